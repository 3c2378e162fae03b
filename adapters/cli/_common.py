"""Helpers shared by the command-line commands: argument types that reject bad
values at parse time, the one-line error a command raises, and the calibration
splits."""

from __future__ import annotations

import argparse
import json
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from guardrail import StreamPolicy

__all__ = [
    "CommandError",
    "fraction",
    "integer",
    "no_traces",
    "non_negative",
    "oracle_coverage",
    "other_promise_line",
    "output_file",
    "positive",
    "probability",
    "resolve_clip",
    "split_indices",
    "stream_policy",
]


class CommandError(Exception):
    """A failure a command reports as one line, ``liftguard <cmd>: error: <message>``.

    ``status`` is the exit status: 2 for a usage error (a bad argument value),
    1 for bad data.
    """

    def __init__(self, message: str, *, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def json_lines(path: str) -> Iterator[tuple[int, object]]:
    """``(line number, value)`` of each non-blank line of a JSONL file (a BOM is
    skipped); a line that is not JSON is a :class:`CommandError` naming
    ``path:line`` and the column."""
    with open(path, encoding="utf-8-sig") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CommandError(
                    f"{path}:{lineno}: invalid JSON: {exc.msg} (column {exc.colno})"
                ) from exc
            yield lineno, value


def no_traces(path: str) -> CommandError:
    """The error of a trace file that holds no trace (blank lines only)."""
    return CommandError(f"{path}: holds no traces")


# --------------------------------------------------------------------------- #
# Argument types: argparse reports what they raise as
# ``liftguard <cmd>: error: argument --flag: <message>`` with exit status 2.
# --------------------------------------------------------------------------- #


def _float(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if math.isnan(x):
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}")
    return x


def probability(text: str) -> float:
    """A number strictly between 0 and 1 (a risk target or an evidence level)."""
    x = _float(text)
    if not 0.0 < x < 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}")
    return x


def fraction(text: str) -> float:
    """A share in (0, 1]."""
    x = _float(text)
    if not 0.0 < x <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}")
    return x


def positive(text: str) -> float:
    """A finite number > 0."""
    x = _float(text)
    if not (math.isfinite(x) and x > 0.0):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return x


def non_negative(text: str) -> float:
    """A finite number >= 0."""
    x = _float(text)
    if not (math.isfinite(x) and x >= 0.0):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return x


def integer(minimum: int) -> Callable[[str], int]:
    """The argument type of an integer ``>= minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}")
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse


def output_file(text: str) -> str:
    """A file path that can be written: not a directory, in an existing writable
    directory. Checked when the command line is parsed, so that a command does
    not do all its work and then lose the result."""
    if not text:
        raise argparse.ArgumentTypeError("expected a file path, got ''")
    path = Path(text)
    if path.is_dir() or text.endswith(("/", os.sep)):
        raise argparse.ArgumentTypeError(f"{text!r} names a directory, expected a file path")
    parent = path.parent
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(
            f"cannot write {text}: directory {str(parent)!r} does not exist"
        )
    if path.exists() and not os.access(path, os.W_OK):
        raise argparse.ArgumentTypeError(f"cannot write {text}: permission denied")
    if not path.exists() and not os.access(parent, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(
            f"cannot write {text}: directory {str(parent)!r} is not writable"
        )
    return text


def resolve_clip(args: argparse.Namespace, vocab_size: int) -> float:
    """``--clip``, or when it is not given: ``support_clip(|V|)`` for the uniform
    skeleton (tokens at probability >= 0.8 fully supported), else 12."""
    from guardrail._lift import DEFAULT_CLIP
    from guardrail.stats import support_clip

    if args.clip is None:
        args.clip = support_clip(vocab_size) if args.skeleton == "uniform" else DEFAULT_CLIP
    return float(args.clip)


def stream_policy(args: argparse.Namespace) -> StreamPolicy:
    """The betting-boundary policy the certificate options describe (clip resolved)."""
    from guardrail import StreamPolicy

    return StreamPolicy(
        delta=args.stream_delta,
        clip=args.clip,
        min_tokens=args.min_tokens,
        aggregate=args.aggregate,
        lowest_k=args.lowest_k,
        on_length=getattr(args, "on_length", "answer"),
    )


def oracle_coverage(
    scores: npt.ArrayLike, correct: npt.ArrayLike, risk: float
) -> tuple[float, float]:
    """Largest coverage of a threshold rule whose risk on these examples is ``<= risk``.

    Returns ``(coverage, threshold)``; ``(0.0, inf)`` if no threshold qualifies.
    Thresholds are the distinct finite scores (ties answered together).
    """
    s = np.asarray(scores, dtype=np.float64)
    err = ~np.asarray(correct, dtype=bool)
    finite = np.isfinite(s)
    order = np.argsort(-s[finite], kind="stable")
    ss, ee = s[finite][order], err[finite][order]
    if ss.size == 0:
        return 0.0, float("inf")
    last = np.r_[ss[1:] != ss[:-1], True]
    n = (np.flatnonzero(last) + 1).astype(np.float64)
    k = np.cumsum(ee)[last]
    good = np.flatnonzero(k <= risk * n + 1e-12)
    if good.size == 0:
        return 0.0, float("inf")
    j = int(good[-1])
    return float(n[j] / s.size), float(ss[last][j])


def other_promise_line(share: float) -> str:
    """The summary line beside a high-probability calibration: what the promise in
    expectation (``--procedure conformal``) would show of the same calibration answers
    (:func:`guardrail._calibration.expectation_coverage`)."""
    return (
        f"  in expectation   {share:.1%} shown with --procedure conformal (the cheaper "
        "promise: the target on average over calibrations, not with probability 1 - delta)"
    )


def split_indices(
    n: int, fraction: float, seed: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    n_cal = round(n * fraction)
    return np.sort(perm[:n_cal]), np.sort(perm[n_cal:])


def add_procedure_option(p: argparse.ArgumentParser) -> None:
    """``--procedure``: how tau is calibrated (``calibrate``, ``eval``, ``fit``)."""
    p.add_argument(
        "--procedure",
        default="fixed-sequence",
        choices=("fixed-sequence", "simultaneous", "conformal"),
        help="the label-based procedure of --method ltt: fixed-sequence (from a start count "
        "down, stopping at a failure) or simultaneous (every candidate against one "
        "boundary; never stops at a failure), both with probability 1 - delta; or "
        "conformal, a cheaper promise in expectation only (delta unused)",
    )
