"""The shipped certificates give, token by token, the verdicts they gave when the
fingerprints were recorded (``tests/fixtures/verdict_fingerprints.py``), through the monitor and
through the stream step every front end drives: a change that means to change no behaviour
changes none. Skipped without the shared traces."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "fixtures" / "verdict_fingerprints.py"
LIMIT = 300


def test_the_shipped_certificates_verdicts_are_unchanged() -> None:
    spec = importlib.util.spec_from_file_location("verdict_fingerprints", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if not all((mod.TRACES / name).exists() for name in set(mod.SHIPPED.values())):
        pytest.skip("the shared traces are not here (../shared/data/traces)")
    saved = json.loads(mod.RESULTS.read_text(encoding="utf-8"))[str(LIMIT)]
    found = mod.run(LIMIT)
    for name, prints in found.items():
        assert prints["monitor"] == prints["step"], f"{name}: the step and the monitor disagree"
    assert found == saved
