"""Exceptions that map to exit codes. The CLI turns them into one readable message."""

from __future__ import annotations

EXIT_OK = 0
EXIT_RUN_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_GATE_REFUSED = 3
EXIT_REGRESSED = 4
EXIT_LOCKED = 5


class SweepsError(Exception):
    """Base class: ``exit_code`` is what the CLI exits with."""

    exit_code = EXIT_RUN_FAILED


class BadInput(SweepsError, ValueError):
    """Invalid user input (config, CLI argument, id). Raised before anything is started or written.

    Holds one or more messages (``problems``); each names the key, the bad value and what is allowed. A
    ``ValueError`` too, so Python callers can catch it the usual way.
    """

    exit_code = EXIT_BAD_INPUT

    def __init__(self, *messages: str) -> None:
        self.messages = [m for m in messages if m]
        super().__init__("\n".join(self.messages))

    @property
    def problems(self) -> list[str]:
        """Every problem found, one message each (the same list as ``messages``)."""
        return list(self.messages)

    def __str__(self) -> str:
        if len(self.messages) == 1:
            return self.messages[0]
        return f"{len(self.messages)} problems:\n" + "\n".join(f"  - {m}" for m in self.messages)


class GateRefused(SweepsError):
    """Promotion refused: the current champion is at least as good."""

    exit_code = EXIT_GATE_REFUSED


class Regressed(SweepsError):
    """A scheduled sweep's best metric regressed beyond the tolerance."""

    exit_code = EXIT_REGRESSED


class Locked(SweepsError):
    """Another run holds the schedule's lock."""

    exit_code = EXIT_LOCKED
