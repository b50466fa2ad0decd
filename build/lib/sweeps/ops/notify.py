"""Alerts: a JSON POST to ``notify.webhook_url`` when a sweep finishes, fails, regresses or is promoted.

The body is Slack-compatible (``text``) and structured (sweep id, event, status, best metric, report path,
MLflow link). A receiver that hangs, refuses or answers 5xx never fails the sweep: each attempt has
``notify.timeout_s`` and all attempts together stop at ``DEADLINE_S``. The URL is a secret (it can carry a
token): it is redacted in every config the sweep writes and never logged. Sweeps sends these itself, for every
store, so a SQLite store notifies too; MLflow's own registry webhooks (a tracking server only) can be added
on top for promotions made outside sweeps.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from typing import Any

from sweeps.config import stored
from sweeps.config.spec import NotifyCfg

log = logging.getLogger(__name__)
DEADLINE_S = 5.0  # all attempts of one event together
ATTEMPTS = 3


def payload(event: str, rec: Any, *, detail: dict[str, Any] | None = None, text: str | None = None) -> dict[str, Any]:
    """The JSON body for ``event`` about a sweep record."""
    from sweeps.tracking import links

    best = rec.best or {}
    url = links.runs_url(rec.tracking_uri, rec.mlflow_experiment_id) if rec.mlflow_experiment_id else None
    value = best.get("value")
    summary = (f"{rec.metric} = {value:.4g} (trial {best.get('trial_id')})" if isinstance(value, int | float)
               else "no successful trial")
    body = {
        "text": text or f"sweeps: sweep {rec.sweep_id} ({rec.experiment}) {event}: {summary}",
        "event": event, "sweep_id": rec.sweep_id, "experiment": rec.experiment, "status": rec.status,
        "metric": rec.metric, "mode": rec.mode, "best_metric": value, "best_trial": best.get("trial_id"),
        "counts": rec.counts, "report": f"{rec.report_dir}/report.html" if rec.report_dir else None,
        "mlflow_url": url,
    }
    if detail:
        body["detail"] = detail
    return body


def _post(url: str, data: bytes, timeout: float) -> int:
    req = urllib.request.Request(url, data=data, method="POST",
                                 headers={"Content-Type": "application/json", "User-Agent": "sweeps"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (http(s) checked by the config)
        return int(resp.status)


def send(cfg: NotifyCfg, event: str, body: dict[str, Any]) -> bool:
    """POST ``body`` if ``event`` is one ``cfg`` wants; True when a receiver took it. Never raises."""
    if not cfg.webhook_url or event not in cfg.on:
        return False
    data = json.dumps(body, default=str).encode()
    deadline = time.monotonic() + DEADLINE_S
    for attempt in range(1, ATTEMPTS + 1):
        left = deadline - time.monotonic()
        if left <= 0.05:
            break
        try:
            status = _post(cfg.webhook_url, data, min(cfg.timeout_s, left))
            if status < 500:
                return True
            why = f"HTTP {status}"
        except urllib.error.HTTPError as exc:
            if exc.code < 500:
                log.warning("notify: the webhook refused the %s event (HTTP %d); not retried", event, exc.code)
                return False
            why = f"HTTP {exc.code}"
        except (OSError, ValueError) as exc:  # refused, timed out, unreachable
            why = type(exc).__name__
        log.debug("notify: attempt %d for %s failed (%s)", attempt, event, why)
        time.sleep(min(0.2 * attempt, max(deadline - time.monotonic(), 0)))
    log.warning("notify: the webhook did not take the %s event of %s in %.0f s; the sweep goes on", event,
                body.get("sweep_id"), DEADLINE_S)
    return False


def notify_promoted(sweep_id: str, text: str) -> bool:
    """A manual ``promote``: the ``promoted`` event to the sweep's webhook. The URL is not stored (a secret):
    it comes from the sweep's config composed again (``${oc.env:...}`` or a default in the config files)."""
    from sweeps import store
    from sweeps.ops.prepare import spec_for

    rec = store.load(sweep_id)
    if not stored.of(rec).webhook_set:
        return False  # the stored config says whether one was set (its value is redacted)
    try:
        cfg = spec_for(rec, []).notify
    except Exception as exc:  # noqa: BLE001 - a config that no longer composes must not fail a done promotion
        log.warning("notify: no promoted event: the sweep's config did not compose again (%s); pass the webhook "
                    "as notify.webhook_url=${oc.env:VAR} so a later promote can send it", exc)
        return False
    return send(cfg, "promoted", payload("promoted", rec, text=f"sweeps: {text}"))
