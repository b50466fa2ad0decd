"""``sync`` and ``ui``: bring MLflow in line with a sweep's Ray results, and show the MLflow UI."""

from __future__ import annotations

import argparse
import faulthandler
import signal

from sweeps import paths
from sweeps.ops.sync import sync
from sweeps.tracking.server import url_host
from sweeps.tracking.ui import check_exposure, check_port, serve, store_uri, wait_until_interrupted


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def cli_sync(args: argparse.Namespace) -> int:
    counts = sync(args.sweep_id)
    best = f"; best model {counts['best_model_id']}" if counts.get("best_model_id") else ""
    errors = f", {counts['model_errors']} could not be written (see above)" if counts.get("model_errors") else ""
    print(f"synced: {counts['runs_created']} run(s) created, {counts['metrics_logged']} metric value(s) "
          f"logged, {counts['statuses_set']} status(es) set; {counts['models_made']} model(s) made, "
          f"{counts['models_updated']} updated{errors}{best}")
    return 0


def cli_ui(args: argparse.Namespace) -> int:
    """Start the MLflow UI, print its URL, block until Ctrl-C."""
    uri = store_uri(args.tracking_uri)
    if uri.startswith(("http://", "https://")):
        print(f"The tracking store is an MLflow server; open {uri.rstrip('/')}/#/experiments")
        print(_latest_sweep(uri, None), end="", flush=True)
        return 0
    note = check_exposure(args.host, args.auth, args.insecure)
    check_port(args.host, args.port)
    if note:
        print(note)
    log_path = paths.home() / "mlflow-ui.log"
    # what the banner says is worked out before the server starts: once its URL is printed, all that is left
    # is waiting, so a Ctrl-C then never lands in the middle of an import
    latest = _latest_sweep(uri, f"http://{url_host(args.host)}:{args.port}")
    print(f"starting the MLflow UI for {uri} ...", flush=True)
    faulthandler.register(signal.SIGUSR2, all_threads=True)  # `kill -USR2 PID`: where it is, on stderr
    # Ctrl-C and `kill` stop the server, also where SIGINT arrives ignored (a background job of a script)
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        server = serve(uri, args.host, args.port, log_path, auth=args.auth)
        try:
            print(f"MLflow UI: {server.experiments_url()}\n{latest}(server log: {log_path}; Ctrl-C to stop)",
                  flush=True)
            code = wait_until_interrupted(server)
        finally:
            server.stop()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print("MLflow UI stopped")
    return code


def _latest_sweep(uri: str, ui_url: str | None) -> str:
    """The newest sweep of this store: a line with its runs table and its parent run's page ("" when none)."""
    from sweeps import store
    from sweeps.tracking import links

    rec = next((r for r in reversed(store.all_records()) if r.tracking_uri == uri and r.mlflow_experiment_id), None)
    if rec is None:
        return ""
    return (f"latest sweep {rec.sweep_id}: {links.runs_url(uri, rec.mlflow_experiment_id, ui_url)} "
            f"(parent run {links.run_url(uri, rec.mlflow_experiment_id, rec.parent_run_id, ui_url)})\n")
