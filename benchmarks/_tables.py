"""The results-page helpers (:mod:`studies.tables`) under the name the fleet benchmark's
modules import them by; every other script imports :mod:`studies.tables` itself."""

from __future__ import annotations

from studies.tables import (
    DOCS,
    RESULTS,
    ROOT,
    Progress,
    header,
    liftguard_executable,
    load,
    parse_args,
    save,
    trace_parts,
    write_page,
)

__all__ = [
    "DOCS",
    "RESULTS",
    "ROOT",
    "Progress",
    "header",
    "liftguard_executable",
    "load",
    "parse_args",
    "save",
    "trace_parts",
    "write_page",
]
