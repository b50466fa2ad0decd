"""Placeholder: replaced by the scheduling work (issue 7)."""

from __future__ import annotations

import argparse

from sweeps.errors import BadInput


def add_arguments(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("action", choices=("add", "list", "remove", "run"))


def cli_schedule(args: argparse.Namespace, rest: list[str]) -> int:
    raise BadInput("schedule: not available yet")
