"""Progress of long commands on a terminal: one line on stderr, redrawn in place, and
nothing at all when stderr is not a terminal (a pipe, a file, a test)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """``progress(done, total)`` draws ``label done/total`` (at most 10 times a second);
    :meth:`close` clears the line."""

    def __init__(self, label: str, stream: TextIO | None = None) -> None:
        self._stream = sys.stderr if stream is None else stream
        isatty = getattr(self._stream, "isatty", None)
        self.enabled = bool(callable(isatty) and isatty())
        self._label, self._last, self._width = label, 0.0, 0

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if done < total and now - self._last < 0.1:
            return
        self._last = now
        text = f"{self._label} {done}/{total}"
        self._width = max(self._width, len(text))
        self._stream.write("\r" + text.ljust(self._width))
        self._stream.flush()

    def step(self, label: str) -> None:
        """Start a new stage: ``label`` replaces the running label."""
        self._label = label

    def close(self) -> None:
        if self.enabled and self._width:
            self._stream.write("\r" + " " * self._width + "\r")
            self._stream.flush()
            self._width = 0
