"""Models and traces for ``warm_start_real.py``: re-quantisation, trace generation
(``liftguard traces generate``), teacher-forced scoring, and how two trace sets differ."""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from guardrail.traces import Trace, dump_trace_line, parse_trace_lines


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The sha256 of a file's bytes (a model's), read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def requantise(src: Path, dst: Path, qtype: str, threads: int) -> dict[str, Any]:
    """``src`` re-quantised to ``qtype`` at ``dst`` (reused when it is already there)."""
    info: dict[str, Any] = {"path": str(dst), "qtype": qtype, "reused": dst.is_file()}
    if not dst.is_file():
        import llama_cpp

        llama_cpp.llama_backend_init()
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = int(getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{qtype}"))
        params.allow_requantize = True
        params.nthread = threads
        tmp = dst.with_name(dst.name + f".tmp{os.getpid()}")
        t0 = time.perf_counter()
        rc = llama_cpp.llama_model_quantize(
            str(src).encode(), str(tmp).encode(), ctypes.byref(params)
        )
        if rc != 0 or not tmp.is_file():
            tmp.unlink(missing_ok=True)
            raise RuntimeError(f"llama_model_quantize returned {rc} for {qtype}")
        tmp.replace(dst)
        info["seconds"] = time.perf_counter() - t0
    info["bytes"] = dst.stat().st_size
    info["sha256"] = file_sha256(dst)
    return info


def _index(trace: Trace) -> int:
    return int(trace.id.rsplit("-", 1)[1])


def _read_cached(path: Path, sources: Sequence[Trace]) -> list[Trace]:
    """Complete lines of a (possibly interrupted) cache that answer ``sources`` in order."""
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").split("\n")[:-1]  # the last piece is unfinished
    out = []
    for t, src in zip(parse_trace_lines(lines, source=str(path)), sources, strict=False):
        if t.id != src.id or t.question != src.question:
            break
        out.append(t)
    return out


def generate_traces(
    model_path: Path,
    sources: Sequence[Trace],
    cache: Path,
    model_name: str,
    *,
    max_tokens: int,
    threads: int | None,
) -> tuple[list[Trace], dict[str, Any]]:
    """Traces of ``model_path`` for the questions of ``sources`` (cached in ``cache``),
    made by the repository's trace generator, ``liftguard traces generate`` (the
    command of this environment; it runs llama.cpp with its default threads, so
    ``threads`` does not apply here). An interrupted run resumes: the command writes to
    ``<cache>.part``, whose complete lines join the cache."""
    from studies.tables import liftguard_executable

    del threads  # the command's default
    part = cache.with_name(cache.name + ".part")
    if part.is_file():  # the last batch of an interrupted run
        with open(cache, "a", encoding="utf-8") as fh:
            fh.write(part.read_text(encoding="utf-8"))
        part.unlink()
    done = _read_cached(cache, sources)
    info: dict[str, Any] = {"path": str(cache), "cached": len(done), "generated": 0}
    if len(done) >= len(sources):
        return done[: len(sources)], info
    with open(cache, "w", encoding="utf-8") as fh:  # rewrite the good prefix, then append
        fh.writelines(dump_trace_line(t) + "\n" for t in done)
    dataset = sources[0].dataset
    for k, src in enumerate(sources):  # the command numbers the questions by position
        if src.dataset != dataset or _index(src) != k:
            raise ValueError(f"trace {src.id} is not {dataset}-{k}: the sources must be a prefix")
    questions = cache.with_name(cache.name + ".questions.jsonl")
    with open(questions, "w", encoding="utf-8") as fh:
        for src in sources:
            fh.write(json.dumps({"question": src.question, "references": list(src.references)}))
            fh.write("\n")
    argv = [
        "traces", "generate", "--model", str(model_path), "--questions", str(questions),
        "--out", str(part), "--dataset", dataset, "--model-name", model_name,
        "--max-tokens", str(max_tokens), "--start", str(len(done)),
        "--limit", str(len(sources) - len(done)),
    ]  # fmt: skip
    t0 = time.perf_counter()
    status = subprocess.run([liftguard_executable(), *argv], check=False).returncode
    info["seconds"] = time.perf_counter() - t0
    if status != 0:
        raise RuntimeError(f"liftguard {' '.join(argv)} failed (exit status {status})")
    with open(cache, "a", encoding="utf-8") as fh:
        fh.write(part.read_text(encoding="utf-8"))
    part.unlink()
    questions.unlink()
    done = _read_cached(cache, sources)
    info["generated"] = len(done) - info["cached"]
    info["seconds_per_answer"] = info["seconds"] / max(info["generated"], 1)
    return done, info


def _abs_diffs(a: Sequence[npt.NDArray[np.float64]], b: Sequence[npt.NDArray[np.float64]]) -> Any:
    d = np.concatenate([np.asarray(x) - np.asarray(y) for x, y in zip(a, b, strict=True)])
    return {
        "mean_abs": float(np.abs(d).mean()),
        "median_abs": float(np.median(np.abs(d))),
        "p95_abs": float(np.quantile(np.abs(d), 0.95)),
        "max_abs": float(np.abs(d).max()),
        "mean_signed": float(d.mean()),
        "n_tokens": int(d.size),
    }


def teacher_forced(
    path: Path, items: Sequence[Trace], cache: Path, threads: int | None
) -> tuple[list[npt.NDArray[np.float64]], float | None]:
    """``LocalModel.score`` of each answer of ``items`` after its prompt (cached in ``cache``)."""
    ids = [f"{t.id}:{hashlib.sha256(t.token_ids.tobytes()).hexdigest()[:16]}" for t in items]
    if cache.is_file():
        data = json.loads(cache.read_text(encoding="utf-8"))
        if data["ids"] == ids:  # the same answers (token ids), not only the same questions
            return [np.array(x) for x in data["logprobs"]], data.get("seconds")
    from adapters.local import LocalModel

    model = LocalModel(path, n_threads=threads)
    t0 = time.perf_counter()
    scored = [np.array(model.score(t.prompt, t.token_ids.tolist())) for t in items]
    seconds = time.perf_counter() - t0
    data = {"ids": ids, "logprobs": [x.tolist() for x in scored], "seconds": seconds}
    cache.write_text(json.dumps(data), encoding="utf-8")
    return scored, seconds


def measure_change(
    a_path: Path,
    b_path: Path,
    traces_a: Sequence[Trace],
    work_dir: Path,
    threads: int | None,
) -> dict[str, Any]:
    """Per-token log-probability change from A to B, teacher-forced on A's answers."""
    items = [t for t in traces_a if t.n_tokens > 0]
    scored: dict[str, list[npt.NDArray[np.float64]]] = {}
    seconds: dict[str, float | None] = {}
    for key, path in (("b", b_path), ("a", a_path)):
        answers = hashlib.sha256("".join(t.answer for t in items).encode()).hexdigest()
        cache = work_dir / f"scores_{file_sha256(path)[:12]}_{len(items)}_{answers[:8]}.json"
        scored[key], seconds[key] = teacher_forced(path, items, cache, threads)
    recorded = [t.logprobs for t in items]
    return {
        "n_answers": len(items),
        "b_scored_vs_a_scored": _abs_diffs(scored["b"], scored["a"]),
        "b_scored_vs_a_recorded": _abs_diffs(scored["b"], recorded),
        "a_scored_vs_a_recorded": _abs_diffs(scored["a"], recorded),
        "seconds": seconds,
    }


def compare_traces(x: Sequence[Trace], y: Sequence[Trace]) -> dict[str, Any]:
    """How two trace sets for the same questions differ (answers, labels, logprobs)."""
    same = [a.token_ids.tolist() == b.token_ids.tolist() for a, b in zip(x, y, strict=True)]
    both = [(a, b) for a, b, s in zip(x, y, same, strict=True) if s and a.n_tokens]
    out: dict[str, Any] = {
        "n": len(x),
        "identical_answers": float(np.mean(same)),
        "accuracy_x": float(np.mean([bool(t.correct) for t in x])),
        "accuracy_y": float(np.mean([bool(t.correct) for t in y])),
        "label_changes": int(
            sum(bool(a.correct) != bool(b.correct) for a, b in zip(x, y, strict=True))
        ),
    }
    if both:
        out["logprob_diff_on_identical_answers"] = _abs_diffs(
            [a.logprobs for a, _ in both], [b.logprobs for _, b in both]
        )
    return out
