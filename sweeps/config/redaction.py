"""Keeping secrets out of everything a sweep stores or logs: redaction by key name, by known value, in URIs.

Three kinds of secret are recognised:

- the value of any key whose name looks secret (``password``, ``token``, ``api_key``...), wherever it sits;
- a password inside a URI's userinfo (``postgresql://user:pw@host/db``, ``https://user:token@host``), in any
  string;
- a value that came from ``${oc.env:NAME}`` with a secret-looking ``NAME``, under any key.

Values found once are remembered for this process (:func:`remember`), so free text (error messages, the
overrides string, log lines) is scrubbed of them too. Stored URIs are public forms (:func:`public_uri`): an
MLflow server URI loses its userinfo (the credentials travel as ``MLFLOW_TRACKING_USERNAME``/``PASSWORD``),
any other URI has its password replaced; the real URI stays in this process's memory only (:func:`real_uri`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sweeps.errors import BadInput

SECRET_WORDS = (r"password|passwd|pwd|token|secret|api[_-]?key|access[_-]?key|private[_-]?key|credential|"
                r"webhook")  # a webhook URL is itself the credential
SECRET_KEY = re.compile(rf"({SECRET_WORDS})", re.IGNORECASE)
REDACTED = "***REDACTED***"
USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^\s/@:?#]*):(?P<pw>[^\s/?#]*)@")
_VALUE = r"(?P<value>(?!\$\{|\.\.\.|<)[^\s,;'\"}\]=]+)(?=[\s,;'\"}\]]|$)"
# `password=x` anywhere in free text; `password: x` only inside a flow mapping (`{a: 1, token: x}`), so a
# message such as "tracking.password: its value ..." is left alone.
KEY_VALUE = re.compile(rf"(?i)(?P<key>[\w.\-]*(?:{SECRET_WORDS})[\w\-]*)(?P<sep>\s*=\s*){_VALUE}")
KEY_FLOW = re.compile(rf"(?i)(?P<key>(?<=[{{,])\s*[\w.\-]*(?:{SECRET_WORDS})[\w\-]*)(?P<sep>\s*:\s*){_VALUE}")
ENV_REF = re.compile(r"\$\{oc\.env:\s*([A-Za-z_][A-Za-z0-9_]*)")
ONLY_INTERPOLATION = re.compile(r"^\$\{[^{}]*\}$")
MIN_SCRUB = 4  # shorter values are redacted where they stand whole, never cut out of other text

_known: set[str] = set()
_real_uris: dict[str, str] = {}


def is_secret_key(key: str) -> bool:
    return bool(SECRET_KEY.search(key))


def remember(values: Iterable[str]) -> None:
    """Add secret values (found while composing or parsing) to this process's scrub list."""
    _known.update(str(v) for v in values if v not in (None, ""))


def known() -> set[str]:
    return set(_known)


def uri_passwords(text: str) -> set[str]:
    return {m.group("pw") for m in USERINFO.finditer(text) if m.group("pw")}


def redact_uri(text: str) -> str:
    """Every ``scheme://user:password@`` in ``text`` with the password replaced."""
    return USERINFO.sub(lambda m: f"{m.group('scheme')}{m.group('user')}:{REDACTED}@", text)


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
        public, user, pw = split_userinfo(uri)
        remember(v for v in (pw,) if v)
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
    """Free text with URI passwords, ``secret_key=value`` pairs and every known secret value replaced."""
    text = redact_uri(str(text))
    for s in sorted({*secrets, *_known}, key=len, reverse=True):
        if len(s) >= MIN_SCRUB and s != REDACTED:
            text = text.replace(s, REDACTED)
    for pattern in (KEY_VALUE, KEY_FLOW):
        text = pattern.sub(lambda m: f"{m.group('key')}{m.group('sep')}{REDACTED}", text)
    return text


def _collect(node: Any, secrets: set[str]) -> None:
    if isinstance(node, Mapping):
        for k, v in node.items():
            if is_secret_key(str(k)) and not isinstance(v, Mapping | list | tuple) and v not in (None, ""):
                secrets.add(str(v))
            else:
                _collect(v, secrets)
    elif isinstance(node, list | tuple):
        for v in node:
            _collect(v, secrets)
    elif isinstance(node, str):
        secrets.update(uri_passwords(node))


def _replace(node: Any, secrets: set[str]) -> Any:
    if isinstance(node, Mapping):
        return {k: (REDACTED if is_secret_key(str(k)) and not isinstance(v, Mapping | list | tuple)
                    and v not in (None, "") else _replace(v, secrets)) for k, v in node.items()}
    if isinstance(node, list | tuple):
        return [_replace(v, secrets) for v in node]
    if isinstance(node, str):
        if node in secrets:
            return REDACTED
        out = redact_uri(node)
        for s in sorted(secrets, key=len, reverse=True):
            if len(s) >= MIN_SCRUB:
                out = out.replace(s, REDACTED)
        return out
    return node


def redact(node: Any, secrets: set[str] | None = None) -> Any:
    """A copy of ``node`` with secret values replaced: secret-named keys, URI passwords, known values.

    ``secrets`` collects the values found (so free text such as an error message can be scrubbed too).
    """
    found: set[str] = set()
    _collect(node, found)
    if secrets is not None:
        secrets.update(found)
    return _replace(node, found | _known)


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
    (``${oc.env:VAR}`` references are kept: they hold no secret), and known secrets are scrubbed."""
    out = []
    for o in overrides:
        parts = _split(o)
        if parts and is_secret_key(parts[1]) and not ONLY_INTERPOLATION.match(parts[2].strip()):
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
