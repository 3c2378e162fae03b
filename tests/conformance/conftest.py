"""The conformance suite imports the adapters' and the proxy's test harnesses."""

from __future__ import annotations

import sys
from pathlib import Path

_TESTS = Path(__file__).resolve().parents[1]
for _part in ("adapters", "proxy"):
    if str(_TESTS / _part) not in sys.path:
        sys.path.insert(0, str(_TESTS / _part))
