"""Keeping secrets out of everything a sweep stores or logs: redaction by key name, by known value, in URIs.

Three kinds of secret are recognised (what looks secret is decided in :mod:`sweeps.config.secretlike`):

- the value of any key whose name, read as words, names a secret (``password``, ``hf_token``, ``apiKey``,
  ``authorization``...), wherever it sits, and every value beneath such a key;
- a credential inside a URI, in any string: ``user:password@``, ``https://TOKEN@host``, ``?token=``/``&sig=``;
- a value that came from ``${oc.env:NAME}`` with a secret-looking ``NAME``, under any key.

Values found once are remembered for this process (:func:`remember`), so free text (error messages, the
overrides string, log lines) is scrubbed of them too; a value is cut out of other text only when it could not
be an ordinary word or number (``gpt2``, ``admin``, ``2048`` never are). Stored URIs are public forms
(:func:`public_uri`): an MLflow server URI loses its userinfo (the credentials travel as
``MLFLOW_TRACKING_USERNAME``/``PASSWORD``), any other URI has its password replaced; the real URI stays in
this process's memory only (:func:`real_uri`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sweeps.config.secretlike import REDACTED, cuttable, is_secret_key, redact_uri, switch, uri_secrets, whole
from sweeps.errors import BadInput

_VALUE = r"(?P<value>(?!\$\{|\.\.\.|<)[^\s,;'\"}\]=]+)(?=[\s,;'\"}\]]|$)"
# `password=x` anywhere in free text; `password: x` only inside a flow mapping (`{a: 1, token: x}`), so a
# message such as "tracking.password: its value ..." is left alone. The key must name a secret as words.
KEY_VALUE = re.compile(rf"(?P<key>[\w.\-]+)(?P<sep>\s*=\s*){_VALUE}")
KEY_FLOW = re.compile(rf"(?P<key>(?<=[{{,])\s*[\w.\-]+)(?P<sep>\s*:\s*){_VALUE}")
# `Authorization: Bearer x`, `bearer x` in free text (a value with a digit: "bearer authentication" stays)
BEARER = re.compile(r"(?i)(?P<key>\b(?:authorization\s*[:=]\s*(?:bearer|basic|token)?|bearer)\s+)"
                    r"(?P<value>(?=[^\s]*\d)[A-Za-z0-9._~+/\-]{8,}=*)")
ENV_REF = re.compile(r"\$\{oc\.env:\s*([A-Za-z_][A-Za-z0-9_]*)")
ONLY_INTERPOLATION = re.compile(r"^\$\{[^{}]*\}$")

_known: set[str] = set()
_real_uris: dict[str, str] = {}


def remember(values: Iterable[str]) -> None:
    """Add secret values (found while composing or parsing) to this process's scrub list."""
    _known.update(str(v) for v in values if v not in (None, ""))


def known() -> set[str]:
    return set(_known)


def uri_passwords(text: str) -> set[str]:
    """The credentials inside URIs in ``text`` (passwords, ``https://TOKEN@`` tokens, secret query values)."""
    return uri_secrets(text)


def split_userinfo(uri: str) -> tuple[str, str | None, str | None]:
    """``(uri without userinfo, user, password)``; user and password are None when absent."""
    from urllib.parse import unquote, urlsplit, urlunsplit

    parts = urlsplit(uri)
    if "@" not in parts.netloc:
        return uri, None, None
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, sep, pw = userinfo.partition(":")
    clean = urlunsplit((parts.scheme, hostport, parts.path, parts.query, parts.fragment))
    return clean, unquote(user) or None, unquote(pw) if sep else None


def public_uri(uri: str) -> str:
    """The form of a URI that may be stored and shown; the real one is remembered for :func:`real_uri`."""
    if uri.startswith(("http://", "https://")):
        public, _, pw = split_userinfo(uri)
        remember({*uri_secrets(uri), *(v for v in (pw,) if v)})
        public = redact_uri(public)
    else:
        remember(uri_passwords(uri))
        public = redact_uri(uri)
    if public != uri:
        _real_uris[public] = uri
    return public


def real_uri(public: str) -> str:
    """The URI with its credentials: from this process's memory, else ``$MLFLOW_TRACKING_URI`` when that is
    the same store, else ``public`` itself (an MLflow server then reads ``MLFLOW_TRACKING_USERNAME``...)."""
    if public in _real_uris:
        return _real_uris[public]
    env = os.environ.get("MLFLOW_TRACKING_URI", "")
    if env and env != public and public_uri(env) == public:
        return env
    return public


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """Free text with URI credentials, ``secret_key=value`` pairs, bearer tokens and every known secret value
    (long enough not to be an ordinary word) replaced."""
    text = redact_uri(str(text))
    for s in sorted({*secrets, *_known}, key=len, reverse=True):
        if cuttable(s):
            text = text.replace(s, REDACTED)
    for pattern in (KEY_VALUE, KEY_FLOW):
        text = pattern.sub(lambda m: f"{m.group('key')}{m.group('sep')}{REDACTED}"
                           if is_secret_key(m.group("key")) and not switch(m.group("value")) else m.group(0), text)
    return BEARER.sub(lambda m: f"{m.group('key')}{REDACTED}", text)


def _secret_value(v: Any) -> bool:
    """A value under a secret-named key that is replaced (a switch such as ``use_auth_token: true`` is kept)."""
    return v not in (None, "") and not isinstance(v, bool)


def _collect(node: Any, secrets: set[str], under: bool = False) -> None:
    if isinstance(node, Mapping):
        for k, v in node.items():
            _collect(v, secrets, under or is_secret_key(str(k)))
    elif isinstance(node, list | tuple):
        for v in node:
            _collect(v, secrets, under)
    elif isinstance(node, str):
        if under and _secret_value(node) and not ONLY_INTERPOLATION.match(node):
            secrets.add(node)
        secrets.update(uri_secrets(node))


def _replace(node: Any, secrets: set[str], cut: list[str], under: bool = False) -> Any:
    if isinstance(node, Mapping):
        return {k: _replace(v, secrets, cut, under or is_secret_key(str(k))) for k, v in node.items()}
    if isinstance(node, list | tuple):
        return [_replace(v, secrets, cut, under) for v in node]
    if under and _secret_value(node):
        return REDACTED
    if isinstance(node, str):
        if node in secrets and whole(node):
            return REDACTED
        out = redact_uri(node)
        for s in cut:
            out = out.replace(s, REDACTED)
        return out
    return node


def redact(node: Any, secrets: set[str] | None = None) -> Any:
    """A copy of ``node`` with secret values replaced: under secret-named keys, in URIs, known values.

    ``secrets`` collects the values found (so free text such as an error message can be scrubbed too).
    Example: ``redact({"hf_token": "hf_Ab12...", "tokenizer_name": "gpt2"})`` replaces the first only.
    """
    found: set[str] = set()
    _collect(node, found)
    if secrets is not None:
        secrets.update(found)
    every = found | _known
    return _replace(node, every, sorted((s for s in every if cuttable(s)), key=len, reverse=True))


def env_secrets(unresolved: Any) -> set[str]:
    """Values of ``${oc.env:NAME}`` references with a secret-looking ``NAME`` in an unresolved config."""
    out: set[str] = set()
    if isinstance(unresolved, Mapping):
        for v in unresolved.values():
            out |= env_secrets(v)
    elif isinstance(unresolved, list | tuple):
        for v in unresolved:
            out |= env_secrets(v)
    elif isinstance(unresolved, str):
        out |= {os.environ[n] for n in ENV_REF.findall(unresolved) if is_secret_key(n) and os.environ.get(n)}
    return out


def _split(override: str) -> tuple[str, str, str] | None:
    if "=" not in override:
        return None
    key, _, value = override.partition("=")
    return key, key.lstrip("+~").strip(), value


def redact_overrides(overrides: Sequence[str], secrets: Iterable[str] = ()) -> list[str]:
    """The overrides as they may be stored and logged: a secret-named key's literal value is replaced
    (``${oc.env:VAR}`` references and ``true``/``false``/``null`` are kept: they hold no secret), and known
    secrets are scrubbed."""
    out = []
    for o in overrides:
        parts = _split(o)
        if parts and is_secret_key(parts[1]) and not ONLY_INTERPOLATION.match(parts[2].strip()) \
                and not switch(parts[2]):
            out.append(f"{parts[0]}={REDACTED}")
        else:
            out.append(scrub(o, secrets))
    return out


def restore_overrides(stored: Sequence[str], extra: Sequence[str]) -> list[str]:
    """Stored overrides with each redacted one replaced by the new override of the same key.

    Raises:
        BadInput: a redacted override that ``extra`` does not give again (its value was never stored).
    """
    fresh = {p[1]: o for o in extra if (p := _split(o))}
    used: set[str] = set()
    out, missing = [], []
    for o in stored:
        parts = _split(o)
        if REDACTED not in o or parts is None:
            out.append(o)
        elif parts[1] in fresh:
            out.append(fresh[parts[1]])
            used.add(parts[1])
        else:
            missing.append(parts[1])
    if missing:
        raise BadInput(*(f"{k}: its value was a secret typed on the command line, which is never stored; "
                         f"give it again (e.g. '{k}=...') or pass it as '{k}=${{oc.env:VAR}}'" for k in missing))
    return [*out, *(o for o in extra if (p := _split(o)) is None or p[1] not in used)]
