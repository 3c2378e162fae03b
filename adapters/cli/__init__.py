"""The ``liftguard`` command line.

The application layer on top of the three packages: it reads files and prints. It
imports their public API by its public path (:mod:`guardrail` and its public
submodules, :mod:`adapters`, :mod:`adapters.local`, :mod:`adapters.proxy`,
:mod:`adapters.tracefiles`, :mod:`skeleton_store`), and the internals a command shares
with the library, which users do not call, from the private modules they live in. A
command imports what it needs when it runs, so the commands that do not serve need no
``[serve]`` extra.

Errors: every failure is one line on stderr, ``liftguard <cmd>: error: <message>``.
Bad argument values are rejected when the command line is parsed (exit
status 2); a command's library errors (:class:`~guardrail.GuardrailError`),
``OSError`` and ``ValueError`` give exit status 1; an interrupt gives 130.
The top-level ``-v`` also prints the traceback.
"""

from __future__ import annotations

from ._main import main

__all__ = [
    "main",
]
