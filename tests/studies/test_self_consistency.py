"""``python -m studies.self_consistency sample`` against an OpenAI-compatible server
(a stdlib HTTP server in a thread: the double sits at the process boundary)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from studies import self_consistency as study

ROOT = Path(__file__).parents[2]
PART = ROOT / "benchmarks" / "traces" / "gsm8k_qwen25coder" / "part-000.jsonl.xz"


@pytest.fixture
def server() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    asked: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            asked.append(body)
            text = f"Step one.\nAnswer: {body['seed'] % 2 + 17}"  # 17 or 18 by seed
            reply = {"choices": [{"text": text, "finish_reason": "stop"}],
                     "usage": {"completion_tokens": 9}}  # fmt: skip
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", asked
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_sample_writes_k_samples_per_question_and_resumes(
    server: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    url, asked = server
    out = tmp_path / "samples.jsonl"
    args = ["sample", "--traces", str(PART), "--base-url", url, "--samples", "3", "--out", str(out)]
    study.main([*args, "--limit", "2"])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["gsm8k-0", "gsm8k-1"]
    first = rows[0]
    assert first["references"] == ["18"] and len(first["samples"]) == 3
    assert [s["final"] for s in first["samples"]] == [17.0, 18.0, 17.0]  # seeds 0, 1, 2
    assert all(s["tokens"] == 9 for s in first["samples"]) and first["greedy_tokens"] > 0
    assert len(asked) == 6 and {a["temperature"] for a in asked} == {study.SAMPLE_TEMPERATURE}
    assert asked[0]["prompt"].startswith("<|im_start|>system")  # the greedy trace's own prompt
    study.main([*args, "--limit", "3"])  # resumes: one more question, nothing asked twice
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()][-1] == "gsm8k-2"
    assert len(asked) == 9


def test_agreement_is_the_share_of_samples_with_the_greedy_final_number() -> None:
    line = {"greedy_final": 18.0, "samples": [{"final": 18.0}, {"final": 17.0},
                                               {"final": None}, {"final": 18.0}]}  # fmt: skip
    assert study.agreement(line) == 0.5
    assert study.agreement({"greedy_final": None, "samples": [{"final": None}]}) == 0.0


def test_escalation_samples_only_the_middle_band_and_keeps_the_bands_in_order() -> None:
    single = [5.0, 1.0, 3.0, 2.5, -4.0, 9.0]
    consistency = [0.0, 1.0, 0.2, 1.0, 1.0, 0.0]
    score, inside = study.escalated(single, consistency, (0.0, 4.0))
    assert inside.tolist() == [False, True, True, True, False, False]
    # above the band first (by the single score), then the band by agreement, then below
    assert sorted(range(6), key=lambda i: -score[i]) == [5, 0, 3, 1, 2, 4]


def test_the_page_is_the_saved_report_of_the_committed_samples() -> None:
    """``docs/results/self_consistency.md`` is what ``report`` renders from its saved JSON,
    the results page includes it, and the report covers the first questions of the
    committed samples (the sampler resumes, so the file may hold more than was reported)."""
    saved = json.loads(study.SAVED.read_text(encoding="utf-8"))
    page = study.PAGE.read_text(encoding="utf-8")
    assert saved["generated_by"] in page.splitlines()[0]
    assert saved["generated_by"].startswith(study.REPORT)
    assert page == study.render(saved), f"stale: run `{study.REPORT} --docs-only`"
    index = (ROOT / "docs" / "results" / "index.md").read_text(encoding="utf-8")
    assert '--8<-- "results/self_consistency.md"' in index
    samples = ROOT / "benchmarks" / "traces" / "gsm8k_qwen25coder_samples.jsonl"
    lines = [json.loads(x) for x in samples.read_text(encoding="utf-8").splitlines() if x]
    assert saved["questions"] <= len(lines)
    assert {len(line["samples"]) for line in lines} == {saved["samples"]}
