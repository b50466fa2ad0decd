"""Redaction in both directions, one table: every secret is gone from the stored config, the stored overrides and
scrubbed free text; every ordinary value (a Transformers tokenizer name, a token count, a working directory)
comes back exactly as it went in, and so do its neighbours (the sweep's name, the model's name). Fast tier."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sweeps.config import redaction
from sweeps.config.secretlike import is_secret_key

R = redaction.REDACTED

# (key under trainable.params, value, the text that must vanish; None: nothing may change)
Row = tuple[str, Any, str | None]
BY_KEY: list[Row] = [  # a secret by its key, read as words
    ("password", "hunter2-xyz", "hunter2-xyz"),
    ("db_pwd", "Pw-4471qz", "Pw-4471qz"),
    ("hf_token", "hf_AbCdEf0123456789", "hf_AbCdEf0123456789"),
    ("api_key", "sk-live-5521abcd", "sk-live-5521abcd"),
    ("apiKey", "ak-7781zzzz", "ak-7781zzzz"),
    ("X-Api-Key", "xk-0099aaaa", "xk-0099aaaa"),
    ("client_secret", "cs-31415926", "cs-31415926"),
    ("aws_secret_access_key", "wJalrXUtnFEMI-K7MDENG", "wJalrXUtnFEMI-K7MDENG"),
    ("private_key", "pk-ed25519-zz9", "pk-ed25519-zz9"),
    ("authorization", "Bearer-eyJhbGciOi.123", "eyJhbGciOi.123"),
    ("bearer", "tok-88812345", "tok-88812345"),
    ("passphrase", "correct-horse-42", "correct-horse-42"),
    ("creds", "user:pa55word", "pa55word"),
    ("auth", "Basic-dXNlcjpwYXNz", "dXNlcjpwYXNz"),
    ("MY_TOKEN", "t-99999999", "t-99999999"),
    ("webhook_url", "https://hooks.slack.com/services/T0/B0/XyZ123", "XyZ123"),
    ("SECRET_KEY_BASE", "skb-4242abcd", "skb-4242abcd"),
    ("api_key_2", "ak2-55555555", "ak2-55555555"),
    ("refresh_token", "rt-1234abcd", "rt-1234abcd"),
    ("gcp_credentials", "gc-0000ffff", "gc-0000ffff"),
]
IN_VALUE: list[Row] = [  # a secret inside a URI, under an ordinary key: the value's scrubbing must find it
    ("note", "clone https://ghp_Tok123456789@github.com/x.git", "ghp_Tok123456789"),
    ("data_url", "https://b.s3.amazonaws.com/f?X-Amz-Signature=abcdef0123&X-Amz-Date=1", "abcdef0123"),
    ("blob", "https://acct.blob.core.windows.net/c?sv=2020&sig=Zm9vYmFy0123", "Zm9vYmFy0123"),
    ("endpoint", "https://api.example/v1?token=tq-0042abcd&page=2", "tq-0042abcd"),
    ("db", "postgresql://bob:Db-pw-1234@db:5432/ml", "Db-pw-1234"),
    ("maps", "https://maps.example/api?key=AIzaSyA-123456", "AIzaSyA-123456"),
    ("session", "https://h/x?access_token=at-777777&x=1", "at-777777"),
]
ORDINARY: list[Row] = [  # ordinary values: nothing may change
    ("tokenizer_name", "gpt2", None),
    ("model_name", "gpt2-medium", None),
    ("max_new_tokens", 20, None),
    ("cwd_pwd_dir", "/home/me/work", None),
    ("pad_token", "<pad>", None),
    ("eos_token", "</s>", None),
    ("num_tokens", 4096, None),
    ("password_file", "/run/secrets/db", None),
    ("token_budget", 1000, None),
    ("secret_name", "prod-db", None),
    ("use_auth_token", True, None),
    ("key", "lr", None),
    ("sort_key", "val_loss", None),
    ("tokenizer", "bert-base-uncased", None),
    ("password_length", 16, None),
    ("tokens_per_second", 1000, None),
    ("repo", "ssh://git@github.com/me/x.git", None),
    ("url", "https://example.com/?page=2&sort=desc", None),
    ("link", "https://mlflow.example/#/experiments/1", None),
    ("PWD", "/home/me", None),
]
ROWS = BY_KEY + IN_VALUE + ORDINARY


def _config(key: str, value: Any) -> dict[str, Any]:
    return {"sweep": {"name": "gpt2-lora"},
            "trainable": {"params": {key: value, "model_name": "gpt2-medium", "tokenizer_name": "gpt2"}}}


@pytest.mark.parametrize(("key", "value", "secret"), ROWS, ids=[f"{k}={v}"[:50] for k, v, _ in ROWS])
def test_secrets_vanish_and_ordinary_values_stay(key: str, value: Any, secret: str | None) -> None:
    cfg = _config(key, value)
    found: set[str] = set()
    out = redaction.redact(cfg, found)
    override = f"+trainable.params.{key}={value}"
    stored = redaction.redact_overrides([override])[0]
    text = redaction.scrub(f"trial failed: {key}={value} ({value})", found)
    assert out["sweep"]["name"] == "gpt2-lora", "a neighbour was mangled"
    assert out["trainable"]["params"]["model_name"] == "gpt2-medium"
    assert out["trainable"]["params"]["tokenizer_name"] == "gpt2"
    if secret is None:
        assert out == cfg and found == set()
        assert stored == override and text == f"trial failed: {key}={value} ({value})"
        return
    assert secret not in json.dumps(out) and R in json.dumps(out)
    assert secret not in stored and secret not in text, (stored, text)


def _literal(value: Any) -> str:
    """``value`` as a Hydra override writes it: a quoted string, a bare number or boolean."""
    if isinstance(value, bool | int):
        return str(value).lower()
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def test_a_composed_sweep_stores_each_row_as_its_section_says_whole_cut_out_or_untouched() -> None:
    """The path a real run takes (``sweeps run``: Hydra composes the overrides, ``build_spec`` validates,
    ``spec.redacted()`` and ``redact_overrides`` give what is stored), every row at once: a secret key's value is
    replaced whole; a URI's secret under an ordinary key is cut out and the rest of the value stays (a key read as
    secret would redact the whole value, and the row above would pass for the wrong reason); an ordinary value,
    ``use_auth_token: true`` included, comes back as it went in."""
    from sweeps.config import build as config_build
    from sweeps.config import compose

    keys = [k for k, _, _ in ROWS]
    assert len(set(keys)) == len(keys), "a key appears twice (all rows share one config)"
    overrides = [f"+trainable.params.{k}={_literal(v)}" for k, v, _ in ROWS]
    spec = config_build.build_spec(compose.compose(["+experiment=quickstart", *overrides]))
    stored = spec.redacted()["trainable"]["params"]
    stored_overrides = redaction.redact_overrides(overrides)
    expected = {k: R for k, _, _ in BY_KEY} | {k: v.replace(s, R) for k, v, s in IN_VALUE} | \
        {k: v for k, v, _ in ORDINARY}
    wrong = {k: (v, stored.get(k)) for k, v, _ in ROWS if stored.get(k) != expected[k]}
    assert not wrong, f"(as given, as stored) where the stored value is not the expected one: {wrong}"
    expected_overrides = [f"+trainable.params.{k}={R}" for k, _, _ in BY_KEY] + \
        [o.replace(s, R) for o, (_, _, s) in zip(overrides[len(BY_KEY):], IN_VALUE, strict=False)] + \
        overrides[len(BY_KEY) + len(IN_VALUE):]
    assert stored_overrides == expected_overrides
    assert min(len(BY_KEY), len(IN_VALUE + ORDINARY)) >= 15, "both directions"


def test_the_issue_example_is_left_alone() -> None:
    cfg = {"trainable": {"params": {"tokenizer_name": "gpt2", "model_name": "gpt2-medium", "max_new_tokens": 20}},
           "sweep": {"name": "gpt2-lora"}}
    assert redaction.redact(cfg) == cfg


def test_a_real_secret_is_cut_out_of_other_strings_a_short_one_only_where_it_stands_whole() -> None:
    cfg = {"hf_token": "hf_LongSecret0042", "note": "pushed with hf_LongSecret0042 to the hub",
           "password": "gpt2", "model_name": "gpt2-medium", "again": "gpt2", "count": "2048", "pin": "2048"}
    out = redaction.redact(cfg)
    assert out["note"] == f"pushed with {R} to the hub"
    assert out["password"] == R and out["again"] == R, "a whole value equal to a secret is that secret"
    assert out["model_name"] == "gpt2-medium", "a short secret is never cut out of another string"
    assert out["count"] == "2048", "a number is never treated as a secret elsewhere"
    assert redaction.scrub("gpt2-medium on gpt2", {"gpt2"}) == "gpt2-medium on gpt2"


def test_everything_under_a_secret_key_is_redacted() -> None:
    out = redaction.redact({"creds": {"user": "bob", "key": "gk-9911aaaa", "ids": ["a-1", 7]}, "api_keys": ["k-1"]})
    assert out == {"creds": {"user": R, "key": R, "ids": [R, R]}, "api_keys": [R]}


def test_free_text_bearer_tokens_and_query_secrets() -> None:
    text = "curl -H 'Authorization: Bearer eyJhbGci0123' 'https://h/?token=zq-9999&a=1' (bearer authentication)"
    out = redaction.scrub(text)
    assert "eyJhbGci0123" not in out and "zq-9999" not in out and "a=1" in out and "bearer authentication" in out


def test_public_uri_drops_a_token_userinfo_and_query_secrets() -> None:
    public = redaction.public_uri("https://ghp_Pub0123456789@mlflow.example/?api_key=k-pub-1234&x=1")
    assert public == f"https://mlflow.example/?api_key={R}&x=1"
    assert redaction.real_uri(public).startswith("https://ghp_Pub0123456789@")
    assert "ghp_Pub0123456789" not in redaction.scrub("could not reach ghp_Pub0123456789")


@pytest.mark.parametrize(("name", "secret"), [
    ("SWEEPS_DB_PASSWORD", True), ("HF_TOKEN", True), ("RAY_AUTH_TOKEN", True), ("OPENAI_API_KEY", True),
    ("AWS_SESSION_TOKEN", True), ("MLFLOW_TRACKING_PASSWORD", True), ("SWEEPS_WEBHOOK_URL", True),
    ("TOKENIZERS_PARALLELISM", False), ("PWD", False), ("OLDPWD", False), ("RAY_AUTH_MODE", False),
    ("RAY_AUTH_TOKEN_PATH", False), ("HF_HOME", False),
])
def test_environment_names(name: str, secret: bool) -> None:
    assert is_secret_key(name) is secret
