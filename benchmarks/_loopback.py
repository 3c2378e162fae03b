"""The loopback upstream (:mod:`benchmarks.loopback`) under the name the fleet benchmark's
modules import it by; every other script imports :mod:`benchmarks.loopback` itself."""

from __future__ import annotations

from benchmarks.loopback import VOCAB, LoopbackServer, Spec, answer_events, answer_text

__all__ = ["VOCAB", "LoopbackServer", "Spec", "answer_events", "answer_text"]
