"""The skeleton store's warnings as ``liftguard skeleton <command>: warning: ...`` lines."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Callable, Iterator

__all__ = ["with_store_warnings"]


class _WarningLine(logging.Handler):
    """Prints a store warning as ``<prog>: warning: <message>`` on stderr, one line."""

    def __init__(self, prog: str) -> None:
        super().__init__(logging.WARNING)
        self.prog = prog

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = " ".join(record.getMessage().split())
            print(f"{self.prog}: warning: {text}", file=sys.stderr)
        except Exception:  # pragma: no cover - logging must never raise
            self.handleError(record)


@contextlib.contextmanager
def _store_warnings(args: argparse.Namespace) -> Iterator[None]:
    """Show the store's warnings as warning lines (with ``-v`` the log shows them)."""
    if getattr(args, "verbose", False):
        yield
        return
    logger = logging.getLogger("skeleton_store")
    handler = _WarningLine(f"liftguard skeleton {args.skeleton_command}")
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def with_store_warnings(
    func: Callable[[argparse.Namespace], int],
) -> Callable[[argparse.Namespace], int]:
    """``func`` run with the store's warnings shown as warning lines."""

    def wrapped(args: argparse.Namespace) -> int:
        with _store_warnings(args):
            return int(func(args))

    return wrapped
