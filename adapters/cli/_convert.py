"""``liftguard traces convert IN OUT``: a trace file from JSONL to Parquet or back.

Each file's format comes from its name (``.parquet``: the columnar format of
:mod:`adapters.tracefiles`, anything else JSONL); either may be a local path or an
fsspec URL (``s3://bucket/key``, with ``--storage-option``s or fsspec's defaults).
Two names of one format copy the file (to or from object storage, say). The
objects are copied as read, keys and values alike, so a file converted and
converted back reads as the original (a JSONL file that the project wrote comes back
byte for byte). A torn last line of a JSONL recording (cut off mid-write) is skipped
with a warning, as ``traces label`` skips it; any other bad line stops the command
in one line naming ``file:line``. Progress is drawn on a terminal only.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ._progress import Progress

__all__ = ["add_convert_parser", "cmd_convert"]


def cmd_convert(args: argparse.Namespace) -> int:
    from adapters.tracefiles import convert_traces

    def torn(lineno: int) -> None:
        print(
            f"liftguard traces convert: warning: {args.source}:{lineno}: skipped 1 torn last "
            "line (a record cut off mid-write)",
            file=sys.stderr,
        )

    progress = Progress(f"converting {args.source}")
    try:
        n = convert_traces(
            args.source,
            args.target,
            storage_options=args.storage_options,
            torn=torn,
            progress=progress if progress.enabled else None,
        )
    finally:
        progress.close()
    print(f"converted {n} traces: {args.source} -> {args.target}", file=sys.stderr)
    return 0


def add_convert_parser(cmds: Any) -> None:
    """Register ``convert`` on the subparsers of ``liftguard traces``."""
    from ._skeleton import _StorageOptionAction

    cv = cmds.add_parser(
        "convert",
        help="convert a trace file between JSONL and Parquet (by the names' suffixes)",
        description="Copy the traces of IN to OUT, one JSONL and the other Parquet (a name "
        "ending with .parquet), each a local path or a URL such as s3://bucket/key; the "
        "objects read from OUT equal those read from IN.",
    )
    cv.add_argument("source", metavar="IN", help="the trace file to read")
    cv.add_argument("target", metavar="OUT", help="the trace file to write")
    cv.add_argument(
        "--storage-option",
        dest="storage_options",
        action=_StorageOptionAction,
        default=None,
        metavar="KEY=VALUE",
        help="fsspec option of a URL IN or OUT (repeatable, as for 'skeleton')",
    )
    cv.set_defaults(func=cmd_convert)
