"""What looks like a secret: key names read as words, credentials inside URIs, values worth cutting out of text.

A key name is split into words (at ``_``, ``-``, ``.``, other punctuation and case changes: ``apiKey`` ->
``api key``, ``X-Amz-Signature`` -> ``x amz signature``) and is secret when its *last* word names a secret
(``password``, ``token``, ``auth``...) or its last two do (``api key``, ``webhook url``). So ``hf_token`` and
``tracking.password`` are secret; ``tokenizer_name``, ``max_new_tokens``, ``cwd_pwd_dir``, ``password_file``,
a tokenizer's ``pad_token`` and the shell's ``PWD`` are not. Only the last dotted part counts, and trailing
digits and encodings (``api_key_2``, ``secret_key_base``, ``token_b64``) are skipped first.

In a URI, the password of ``user:password@``, the whole userinfo of ``http(s)://TOKEN@host``, and the value of
a query parameter with a secret name (``?token=``, ``&sig=``, ``X-Amz-Signature=``, ``?key=``) are secrets.

A value is cut out of other text only when it could not be an ordinary word or number (:func:`cuttable`);
shorter ones are replaced only where they stand whole (:func:`whole`).
"""

from __future__ import annotations

import re

REDACTED = "***REDACTED***"
WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
SECRET_WORDS = frozenset({
    "password", "passwd", "pwd", "passphrase", "token", "secret", "secrets", "credential", "credentials",
    "creds", "auth", "authorization", "bearer", "signature", "sig", "apikey", "accesskey", "privatekey",
    "secretkey", "webhook", "cookie",
})
SECRET_PAIRS = frozenset({
    ("api", "key"), ("api", "keys"), ("access", "key"), ("private", "key"), ("secret", "key"),
    ("signing", "key"), ("encryption", "key"), ("webhook", "url"), ("account", "key"),
})
# `pad_token: "<pad>"`, `max_token`: a tokenizer's special tokens and counts are not credentials.
NOT_A_CREDENTIAL = frozenset({
    "pad", "eos", "bos", "unk", "sep", "cls", "mask", "start", "end", "stop", "special", "new", "max", "min",
    "num", "total", "prompt", "input", "output", "first", "last", "next", "prev", "split", "per",
})
TRAILING = frozenset({"value", "b64", "base64", "hex", "base", "str"})
QUERY_ONLY = frozenset({"key", "code"})  # `?key=AIza...`: secret in a query string, too generic as a config key

USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^\s/@:?#]*):(?P<pw>[^\s/?#]*)@")
TOKEN_USERINFO = re.compile(r"(?P<scheme>(?i:https?|wss?)://)(?P<token>[^\s/@:?#]+)@")
QUERY = re.compile(r"(?P<lead>[?&])(?P<key>[A-Za-z0-9_.\-]+)=(?P<value>(?!\$\{)[^&#\s'\"<>]+)")
NUMBER = re.compile(r"[-+]?(\d[\d_]*\.?\d*|\.\d+)([eE][-+]?\d+)?")
MIN_WHOLE = 4  # a secret this long is replaced wherever a whole value equals it
MIN_CUT = 8  # ... and this long (with a digit or symbol, or 16+ letters) is cut out of any text


def words(key: str) -> list[str]:
    """``"X-Amz-Signature"`` -> ``["x", "amz", "signature"]``; ``"apiKey"`` -> ``["api", "key"]``."""
    return [w.lower() for w in WORD.findall(str(key))]


def is_secret_key(key: str) -> bool:
    """Whether a key (or dotted key, or environment variable name) names a secret, read as words."""
    ws = words(str(key).rsplit(".", 1)[-1])  # `trainable.params.PWD`: the leaf's name decides
    while ws and (ws[-1].isdigit() or ws[-1] in TRAILING):
        ws.pop()
    if not ws:
        return False
    last, prev = ws[-1], (ws[-2] if len(ws) > 1 else "")
    if (prev, last) in SECRET_PAIRS:
        return True
    if last == "token":
        return prev not in NOT_A_CREDENTIAL
    if last == "pwd":
        return bool(prev)  # `db_pwd` is a password; a bare `PWD` is the shell's working directory
    return last in SECRET_WORDS


def is_secret_param(key: str) -> bool:
    """A query-string parameter name that carries a secret (``token``, ``sig``, ``X-Amz-Signature``, ``key``)."""
    return is_secret_key(key) or (words(key)[-1:] or [""])[0] in QUERY_ONLY


def switch(value: str) -> bool:
    """``true``/``false``/``null`` as typed in an override or a message: no secret, whatever its key."""
    return value.strip().lower() in ("true", "false", "null", "none", "~")


def whole(value: str) -> bool:
    """A secret value long enough to be replaced where a whole value equals it (not a number)."""
    return len(value) >= MIN_WHOLE and value != REDACTED and not NUMBER.fullmatch(value)


def cuttable(value: str) -> bool:
    """A secret value safe to cut out of other text: not a common word or number (``gpt2``, ``admin``, ``2048``
    never are), i.e. at least 8 characters with a digit or symbol, or 16 letters."""
    if not whole(value) or len(value) < MIN_CUT:
        return False
    return not value.isalpha() or len(value) >= 2 * MIN_CUT


def uri_secrets(text: str) -> set[str]:
    """Every credential inside URIs in ``text``: userinfo passwords, ``https://TOKEN@`` tokens, query secrets."""
    found = {m.group("pw") for m in USERINFO.finditer(text) if m.group("pw")}
    found |= {m.group("token") for m in TOKEN_USERINFO.finditer(text) if m.group("token") != REDACTED}
    found |= {m.group("value") for m in QUERY.finditer(text) if is_secret_param(m.group("key"))}
    return found - {REDACTED}


def redact_uri(text: str) -> str:
    """``text`` with every credential inside a URI replaced (the user name of ``user:password@`` is kept)."""
    text = USERINFO.sub(lambda m: f"{m.group('scheme')}{m.group('user')}:{REDACTED}@", text)
    text = TOKEN_USERINFO.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", text)
    return QUERY.sub(lambda m: f"{m.group('lead')}{m.group('key')}={REDACTED}" if is_secret_param(m.group("key"))
                     else m.group(0), text)
