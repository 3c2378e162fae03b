"""Fingerprints of the shipped certificates' token-by-token verdicts on the shared traces.

Each shipped certificate (``guardrail/data``) replays the shared TriviaQA traces of its
model token by token, twice: through :meth:`guardrail.Certificate.monitor` fed the traces'
token events, and through the adapters' stream step fed the same tokens as OpenAI Chat
Completions chunks (the path every front end drives). Every verdict (state, tokens,
statistic, bounds, cause, reason; the numbers to 9 significant digits) goes into a sha256
per path; both must agree, and a refactoring that changes no behaviour must leave them as
they were.

    python benchmarks/verdict_fingerprints.py [--limit N] [--write]

``--write`` records them in ``benchmarks/results/verdict_fingerprints.json``, which
``tests/test_verdict_fingerprints.py`` checks (on the first traces only, to stay quick).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from importlib import resources
from pathlib import Path
from typing import Any

from adapters._guard._openai_events import chat_chunk_parts
from adapters._guard._stream import GuardStep
from guardrail import Certificate, Reads, TokenEvent, Verdict
from guardrail.fitting import RecordedSkeleton
from guardrail.traces import Trace, read_traces

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "data" / "traces"
RESULTS = ROOT / "benchmarks" / "results" / "verdict_fingerprints.json"
SHIPPED = {
    "smollm2_certificate.json": "triviaqa_smollm2.jsonl",
    "smollm2_fitted_certificate.json": "triviaqa_smollm2.jsonl",
    "qwen_certificate.json": "triviaqa_qwen25coder.jsonl",
    "qwen_fitted_certificate.json": "triviaqa_qwen25coder.jsonl",
}


class InOrder:
    """The recorded prompt-free log-probabilities, read in order (a stream's events carry
    no index)."""

    reads = Reads()

    def __init__(self, values: Any) -> None:
        self._values, self._i = list(values), 0

    def log_prob(self, event: TokenEvent) -> float:
        value = float(self._values[self._i])
        self._i += 1
        return value


def _events(trace: Trace) -> list[TokenEvent]:
    return [
        TokenEvent(
            text=text,
            logprob=float(lp),
            top_logprobs=tuple(
                (str(int(a)), float(b))
                for a, b in zip(trace.top_ids[i], trace.top_logprobs[i], strict=True)
            ),
            index=i,
        )
        for i, (text, lp) in enumerate(zip(trace.token_texts, trace.logprobs, strict=True))
    ]


def _chunk(event: TokenEvent | None) -> dict[str, Any]:
    if event is None:
        return {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "logprobs": None}]}
    entry = {
        "token": event.text,
        "logprob": event.logprob,
        "bytes": None,
        "top_logprobs": [{"token": t, "logprob": lp} for t, lp in event.top_logprobs],
    }
    choice = {"index": 0, "delta": {"content": event.text}, "finish_reason": None,
              "logprobs": {"content": [entry]}}  # fmt: skip
    return {"choices": [choice]}


def _num(x: float) -> str:
    """A statistic to 9 significant digits: a machine whose floating point differs in the
    last bits (numpy's SIMD paths for ``exp`` and ``log`` differ between CPUs) gives the
    same fingerprint, a change of behaviour does not."""
    return f"{x:.9g}"


def _line(v: Verdict) -> bytes:
    numbers = (_num(x) for x in (v.mean, v.lower, v.upper))
    return repr((v.state, v.t, *numbers, v.cause, v.reason)).encode()


def fingerprints(certificate: Certificate, traces: list[Trace]) -> dict[str, str]:
    """The sha256 of every verdict, through the monitor and through the stream step."""
    direct, stepped = hashlib.sha256(), hashlib.sha256()
    prompt_free = certificate.skeleton.kind == "prompt_free"
    for trace in traces:
        a = (
            certificate.monitor(skeleton=RecordedSkeleton(trace.prompt_free_logprobs))
            if prompt_free
            else certificate.monitor()
        )
        b = (
            certificate.monitor(skeleton=InOrder(trace.prompt_free_logprobs))  # type: ignore[arg-type]
            if prompt_free
            else certificate.monitor()
        )
        step = GuardStep(b, "buffered", "stop", chat_chunk_parts)
        for event in _events(trace):
            direct.update(_line(a.update(event)))
            step.feed(_chunk(event))
            stepped.update(_line(b.verdict))
        direct.update(_line(a.finish("stop")))
        step.feed(_chunk(None))
        step.end()
        stepped.update(_line(b.verdict))
    return {"monitor": direct.hexdigest(), "step": stepped.hexdigest()}


def run(limit: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, traces_name in SHIPPED.items():
        text = (resources.files("guardrail") / "data" / name).read_text(encoding="utf-8")
        traces = read_traces(TRACES / traces_name, limit=limit)
        out[name] = {"traces": traces_name, "n": len(traces),
                     **fingerprints(Certificate.from_json(text), traces)}  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--limit", type=int, default=2000, help="traces per file")
    parser.add_argument("--write", action="store_true", help=f"record them in {RESULTS.name}")
    args = parser.parse_args()
    found = run(args.limit)
    print(json.dumps(found, indent=2))
    if args.write:
        saved = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        saved[str(args.limit)] = found
        RESULTS.write_text(json.dumps(saved, indent=2, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
