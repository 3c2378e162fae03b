"""What the recording tests share: a minimal finished answer and a clock they move by hand."""

from __future__ import annotations

from adapters._proxy._recording import AnswerRecord


def answer_record(i: int) -> AnswerRecord:
    """A minimal finished answer, request id ``r<i>``."""
    return AnswerRecord(
        request_id=f"r{i}", model_id="m", vocab_size=10, top_k=0, messages=[], settings={},
        text=["x"], entries=[], finish_reason="stop", complete=True, verdict={},
    )  # fmt: skip


class ManualClock:
    """A clock that stands still until a test moves ``now`` (the recorder's rotation age)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now
