"""The ``liftguard`` command line.

The application layer on top of the three packages: it reads files and prints,
and uses only their public API (:mod:`guardrail` and its public submodules,
:mod:`adapters`, :mod:`adapters.local`, :mod:`adapters.proxy`,
:mod:`skeleton_store`). A command imports what it needs when it runs, so the
commands that do not serve need no ``[serve]`` extra.

Errors: every failure is one line on stderr, ``liftguard <cmd>: error: <message>``.
Bad argument values are rejected when the command line is parsed (exit
status 2); a command's library errors (:class:`~guardrail.GuardrailError`),
``OSError`` and ``ValueError`` give exit status 1; an interrupt gives 130.
The top-level ``-v`` also prints the traceback.
"""

from __future__ import annotations

from ._common import oracle_coverage
from ._main import main

__all__ = ["main", "oracle_coverage"]
