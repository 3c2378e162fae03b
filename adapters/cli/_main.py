"""``liftguard``'s entry point: parse, run the command, report an error as one line."""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
import traceback
from collections.abc import Sequence

from guardrail import GuardrailError

from ._common import CommandError
from ._parser import build_parser

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``liftguard`` command line; returns the exit status.

    Errors are reported as one line (see :mod:`adapters.cli`); with
    ``-v``/``--verbose`` the traceback is printed above it.
    """
    parser = build_parser()
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(raw)
    args.command_line = shlex.join(["liftguard", *raw])  # recorded in certificates
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    try:
        return int(args.func(args))
    except KeyboardInterrupt as exc:
        return _fail(args, exc, 130, "interrupted")
    except CommandError as exc:
        return _fail(args, exc, exc.status, _one_line(exc))
    except (GuardrailError, OSError, ValueError) as exc:
        return _fail(args, exc, 1, _one_line(exc))


def _fail(args: argparse.Namespace, exc: BaseException, status: int, message: str) -> int:
    """Print the error line (under the traceback with ``-v``); return ``status``."""
    if args.verbose:
        traceback.print_exception(type(exc), exc, exc.__traceback__)
    print(f"{_command_name(args)}: error: {message}", file=sys.stderr)
    return status


def _command_name(args: argparse.Namespace) -> str:
    """``liftguard <cmd>`` (with the subcommand of ``skeleton`` and ``traces``)."""
    words = ["liftguard", str(args.command)]
    sub = getattr(args, f"{args.command}_command", None)
    if isinstance(sub, str):
        words.append(sub)
    return " ".join(words)


def _one_line(exc: BaseException) -> str:
    """The message of ``exc`` on one line; an ``OSError`` as ``path: reason``."""
    if isinstance(exc, OSError) and exc.strerror:
        where = [str(f) for f in (exc.filename, exc.filename2) if f is not None]
        text = ": ".join([*where, exc.strerror])
    else:
        text = str(exc) or type(exc).__name__
    return " ".join(text.split())
