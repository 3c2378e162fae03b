from __future__ import annotations

import subprocess
import sys

import guardrail


def test_all_is_sorted_and_importable() -> None:
    names = [n for n in guardrail.__all__ if n != "__version__"]
    assert names == sorted(names, key=lambda n: (not n.isupper(), n.lower() if n.isupper() else n))
    for name in guardrail.__all__:
        assert hasattr(guardrail, name), name


def test_public_names_are_pinned() -> None:
    # changing the public surface is a deliberate act: update this list with it
    assert len(guardrail.__all__) == 88
    for name in ("Calibration", "StreamPolicy", "calibrate", "ltt_threshold", "read_traces"):
        assert name in guardrail.__all__


def test_import_pulls_in_no_heavy_or_vendor_module() -> None:
    code = (
        "import sys, guardrail, guardrail.cli\n"
        "bad = [m for m in ('torch', 'openai', 'anthropic', 'langchain_core', 'langchain',"
        " 'transformers', 'llama_cpp', 's3fs', 'fsspec', 'adapters', 'skeleton_store')"
        " if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_errors_hierarchy() -> None:
    assert issubclass(guardrail.ConfigError, ValueError)
    assert issubclass(guardrail.TraceFormatError, ValueError)
    for exc in (
        guardrail.ConfigError,
        guardrail.TraceFormatError,
        guardrail.InsufficientDataError,
        guardrail.MissingLogprobsError,
        guardrail.GuardrailBlocked,
    ):
        assert issubclass(exc, guardrail.GuardrailError)
    blocked = guardrail.GuardrailBlocked(verdict={"state": "BLOCKED"})
    assert blocked.verdict == {"state": "BLOCKED"}
