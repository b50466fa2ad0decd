"""Alerts against a real HTTP receiver on 127.0.0.1: one well-formed POST per event, and a receiver that hangs
or fails never fails the sender nor delays it by more than ~5 s."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from sweeps import store
from sweeps.config.spec import NotifyCfg
from sweeps.ops import notify


class Receiver:
    def __init__(self, mode: str) -> None:
        self.mode, self.bodies = mode, []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.bodies.append((self.headers["Content-Type"], json.loads(body)))
                if receiver.mode == "hang":
                    time.sleep(8)
                code = 500 if receiver.mode == "500" else 200
                self.send_response(code)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def receiver(request: pytest.FixtureRequest) -> Iterator[Receiver]:
    r = Receiver(request.param)
    yield r
    r.server.shutdown()


REC = store.SweepRecord("quickstart-1", "quickstart", 0.0, "finished", "/x", ["/x/s"], "http://127.0.0.1:5000",
                        mlflow_experiment_id="7", metric="val/acc", mode="max",
                        best={"trial_id": "t1", "value": 0.97, "params": {"lr": 0.1}}, report_dir="/r/quickstart-1")


@pytest.mark.parametrize("receiver", ["ok"], indirect=True)
def test_one_well_formed_post_per_event(receiver: Receiver) -> None:
    cfg = NotifyCfg(receiver.url, ("finished", "promoted"), 2.0)
    assert notify.send(cfg, "finished", notify.payload("finished", REC))
    assert not notify.send(cfg, "failed", notify.payload("failed", REC)), "an event not asked for is not sent"
    assert len(receiver.bodies) == 1
    content_type, body = receiver.bodies[0]
    assert content_type == "application/json"
    assert body["text"].startswith("sweeps: sweep quickstart-1 (quickstart) finished: val/acc = 0.97")
    assert (body["event"], body["sweep_id"], body["status"], body["best_metric"]) == ("finished", "quickstart-1",
                                                                                      "finished", 0.97)
    assert body["report"] == "/r/quickstart-1/report.html"
    assert body["mlflow_url"] == "http://127.0.0.1:5000/#/experiments/7/runs"


@pytest.mark.parametrize("receiver", ["hang", "500"], indirect=True)
def test_a_receiver_that_hangs_or_fails_costs_at_most_5s_and_never_raises(receiver: Receiver) -> None:
    cfg = NotifyCfg(receiver.url, ("failed",), 2.0)
    t0 = time.monotonic()
    assert notify.send(cfg, "failed", notify.payload("failed", REC)) is False
    took = time.monotonic() - t0
    assert took <= 5.5, f"a bad receiver held the sender for {took:.1f} s"
    assert len(receiver.bodies) >= 1, "it was tried"


def test_an_unreachable_receiver_is_a_warning_not_an_error() -> None:
    cfg = NotifyCfg("http://127.0.0.1:9/nothing-listens", ("finished",), 1.0)
    assert notify.send(cfg, "finished", notify.payload("finished", REC)) is False


def test_the_webhook_url_is_a_secret_in_every_written_config() -> None:
    from sweeps.config import security

    redacted = security.redact({"notify": {"webhook_url": "https://hooks.example/T0/B0/XYZ"}})
    assert redacted["notify"]["webhook_url"] == security.REDACTED
