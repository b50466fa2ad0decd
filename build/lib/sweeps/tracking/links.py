"""Links into the MLflow UI: a sweep's training-runs table and its parent run's page.

MLflow 3's UI opens an experiment on a GenAI overview page; a sweep's runs are the experiment's runs table,
``#/experiments/ID/runs``, where the parent run expands to its trials. For the embedded SQLite store the UI
is the one ``python -m sweeps ui`` serves (127.0.0.1:5000 unless told otherwise). Credentials in a tracking
URI never reach a printed or written link.
"""

from __future__ import annotations

import urllib.parse

LOCAL_UI = "http://127.0.0.1:5000"


def ui_base(tracking_uri: str, ui_url: str | None = None) -> str:
    """The UI's address: the tracking server itself, or the local UI ``sweeps ui`` starts."""
    if ui_url:
        return ui_url.rstrip("/")
    parsed = urllib.parse.urlparse(tracking_uri)
    if parsed.scheme not in ("http", "https"):
        return LOCAL_UI
    netloc = parsed.hostname or ""
    if parsed.port:
        netloc += f":{parsed.port}"
    return urllib.parse.urlunparse((parsed.scheme, netloc, parsed.path.rstrip("/"), "", "", ""))


def runs_url(tracking_uri: str, experiment_id: str, ui_url: str | None = None) -> str:
    return f"{ui_base(tracking_uri, ui_url)}/#/experiments/{experiment_id}/runs"


def run_url(tracking_uri: str, experiment_id: str, run_id: str, ui_url: str | None = None) -> str:
    return f"{runs_url(tracking_uri, experiment_id, ui_url)}/{run_id}"


def needs_local_ui(tracking_uri: str) -> bool:
    """True when no server serves the store: the links work once ``python -m sweeps ui`` runs."""
    return urllib.parse.urlparse(tracking_uri).scheme not in ("http", "https")
