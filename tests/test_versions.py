"""A mismatched cluster, the parts that need no second Ray: Ray's own refusal read, the one line, the Ray Job way out.

The whole path (a head on another Ray, the driver refused in < 10 s with the lever on and off, nothing left
running) is tests/test_installed_slow.py's ``mismatch``; these pin each part on its own, fast.
"""

from __future__ import annotations

import json
import shlex
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from sweeps.errors import BadInput
from sweeps.execution.cluster import versions
from sweeps.execution.cluster.versions import Versions

REPO = Path(__file__).resolve().parent.parent
UNROUTABLE = "198.51.100.7"  # TEST-NET-2 (RFC 5737): nothing answers there

# Ray's refusal as Ray 2.53 to 2.60 word it: ray/_private/utils.py, check_version_info (mismatch_msg and
# error_message), raised by ray.init through Node.check_version_info (ray/_private/node.py) and, for a Ray Client
# address, by ray/util/client/__init__.py's _check_versions.
RAYS_OWN = ("Version mismatch: The cluster was started with:\n"
            "    Ray: 2.59.0\n"
            "    Python: 3.11.9\n"
            "This process on node 10.0.0.5 was started with:\n"
            "    Ray: 2.60.0\n"
            "    Python: 3.11.7\n")


def test_rays_own_mismatch_text_names_the_clusters_versions() -> None:
    assert versions.from_error(RuntimeError(RAYS_OWN)) == Versions("2.59.0", "3.11.9")
    assert versions.from_error(RAYS_OWN) == Versions("2.59.0", "3.11.9")
    assert versions.from_error(ConnectionError("Failed to connect to GCS at 10.0.0.5:6379")) is None
    assert versions.from_error(RuntimeError("Python patch version mismatch: The cluster was started with:")) is None


@pytest.mark.parametrize("where", ["node 10.0.0.5", "Ray Client"])
def test_the_installed_rays_own_refusal_names_the_clusters_versions(where: str) -> None:
    from ray._private.utils import check_version_info

    with pytest.raises(RuntimeError) as refused:
        check_version_info({"ray_version": "2.59.0", "python_version": "3.11.9"}, where)
    assert versions.from_error(refused.value) == Versions("2.59.0", "3.11.9")


def _submit(command: str) -> tuple[dict[str, object], dict[str, object]]:
    """``command`` parsed by the installed Ray's own ``ray job submit``: (its options, the job's runtime_env)."""
    from ray.dashboard.modules.dashboard_sdk import parse_runtime_env_args
    from ray.dashboard.modules.job.cli import submit

    words = shlex.split(command)
    assert words[:3] == ["ray", "job", "submit"], command
    params = submit.make_context("submit", words[3:]).params
    env = parse_runtime_env_args(runtime_env_json=params["runtime_env_json"], working_dir=params["working_dir"])
    return params, env


def test_the_ray_job_command_is_this_run_on_the_jobs_own_cluster() -> None:
    argv = ["-v", "run", "+experiment=quickstart", "cluster=remote", "cluster.address=10.0.0.5:6379",
            "tracking.uri=http://mlflow:5000", "--dry-run"]
    params, env = _submit(versions.job_command(argv, "http://10.0.0.5:8265", []))
    assert params["address"] == "http://10.0.0.5:8265" and env == {"working_dir": "."}, (params, env)
    assert list(params["entrypoint"]) == ["python", "-m", "sweeps", "-v", "run", "+experiment=quickstart",
                                          "cluster=remote", "cluster.address=auto", "tracking.uri=http://mlflow:5000"]


def test_the_ray_job_command_carries_sweeps_where_the_working_dir_does_not_hold_it(tmp_path: Path) -> None:
    assert versions.shipped_code(REPO) == [], "a checkout's working dir holds sweeps/ itself"
    shipped = versions.shipped_code(tmp_path)
    assert [Path(p).name for p in shipped] == ["sweeps", "trainables", "hydra_plugins"] and all(
        Path(p).is_dir() for p in shipped), shipped
    params, env = _submit(versions.job_command(["run", "+experiment=x"], "http://h:8265", shipped))
    assert env == {"py_modules": shipped, "working_dir": "."}, env
    assert list(params["entrypoint"])[-3:] == ["run", "+experiment=x", "cluster.address=auto"]


def test_a_command_other_than_run_gets_a_run_to_fill_in() -> None:
    params, _ = _submit(versions.job_command(["doctor", "--address", "10.0.0.5:6379"], "http://h:8265", []))
    assert list(params["entrypoint"]) == ["python", "-m", "sweeps", "run", "+experiment=NAME", "cluster=remote",
                                          "cluster.address=auto"]


@contextmanager
def _http(status: int, body: dict[str, object]) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            data = json.dumps(body).encode() if self.path == "/api/version" else b"{}"
            self.send_response(status if self.path == "/api/version" else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            return None

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_dashboard_is_named_only_when_the_clusters_own_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    from sweeps.ports import free_port

    with _http(200, {"version": "4", "ray_version": "2.53.0", "ray_commit": "x"}) as url:
        assert versions._dashboard_of(url, "2.53.0")
        assert not versions._dashboard_of(url, "2.60.0"), "another Ray's dashboard on the same host"
    with _http(401, {"error": "token"}) as url:
        assert versions._dashboard_of(url, "2.53.0"), "a dashboard that wants the token"
    assert not versions._dashboard_of(f"http://127.0.0.1:{free_port()}", "2.53.0")
    monkeypatch.delenv("RAY_API_SERVER_ADDRESS", raising=False)
    assert versions.dashboard(f"{UNROUTABLE}:6379", "2.53.0") == f"http://{UNROUTABLE}:DASHBOARD_PORT"
    assert versions.dashboard("auto", "2.53.0") == "http://HEAD:DASHBOARD_PORT"
    assert versions.dashboard("https://head:8443/", "2.53.0") == "https://head:8443"
    monkeypatch.setenv("RAY_API_SERVER_ADDRESS", "http://dash:1234")
    assert versions.dashboard(f"{UNROUTABLE}:6379", "2.53.0") == "http://dash:1234"


def test_the_mismatch_is_one_line_with_both_versions_and_both_ways_out(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("RAY_API_SERVER_ADDRESS", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["sweeps", "run", "+experiment=quickstart", "cluster=remote",
                                      f"cluster.address={UNROUTABLE}:6379", "--dry-run"])
    line = versions.message(f"{UNROUTABLE}:6379", Versions("2.53.0", "3.11.9"), Versions("2.60.0", "3.11.7"))
    assert "\n" not in line
    assert "runs Ray 2.53.0 on Python 3.11.9" in line and "this driver Ray 2.60.0 on Python 3.11.7" in line, line
    assert "pip install 'ray[default,tune,train]==2.53.0'" in line, line
    assert f"ray job submit --address http://{UNROUTABLE}:DASHBOARD_PORT" in line and "DASHBOARD_PORT:" in line
    assert "--runtime-env-json" in line and "--dry-run" not in line, line


def test_a_cluster_that_does_not_answer_is_named_within_the_time_limit() -> None:
    with pytest.raises(BadInput, match="cluster=remote needs an address"):
        versions.read(None)
    t0 = time.monotonic()
    with pytest.raises(versions.Unread, match=UNROUTABLE):
        versions.by_connecting(f"{UNROUTABLE}:6379", timeout_s=3.0)
    assert time.monotonic() - t0 < 6.0


def test_versions_compare_as_ray_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(versions.PYTHON_MATCH, raising=False)
    assert versions.compatible(Versions("2.59.0", "3.11.7"), Versions("2.59.0", "3.11.7"))
    assert not versions.compatible(Versions("2.59.0", "3.11.7"), Versions("2.60.0", "3.11.7"))
    assert not versions.compatible(Versions("2.60.0", "3.11.9"), Versions("2.60.0", "3.11.7"))
    monkeypatch.setenv(versions.PYTHON_MATCH, "minor")
    assert versions.compatible(Versions("2.60.0", "3.11.9"), Versions("2.60.0", "3.11.7"))


# Ray's words for a missing or wrong token: its GCS client's log line (src/ray/gcs_rpc_client/gcs_client.cc, seen
# on Ray 2.53 and 2.59 heads) and the AuthenticationError its Python client raises (ray/exceptions.py).
TOKEN_REFUSED = ("[2026-12-04 20:48:06,074 W 17103 17108] gcs_client.cc:210: Failed to get cluster ID from GCS "
                 "server: Unauthenticated: RPC error: InvalidAuthToken: Authentication token is missing or incorrect")


def test_a_refused_token_is_named_not_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    from ray.exceptions import AuthenticationError

    assert versions.refused_token(TOKEN_REFUSED)
    assert versions.refused_token(f"{type(AuthenticationError('x')).__name__}: RPC error: InvalidAuthToken")
    assert not versions.refused_token("Failed to connect to GCS at address 10.0.0.5:6379 within 5 seconds.")
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    line = versions.token_message("10.0.0.5:6379")
    assert "token authentication on" in line and "RAY_AUTH_MODE=token" in line and "RAY_AUTH_TOKEN_PATH" in line
