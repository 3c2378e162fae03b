"""The Certificate: validated on construction, exact JSON round trip, one monitor per answer."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from guardrail import (
    Calibration,
    Certificate,
    ConfigError,
    GenerationContext,
    LiftRule,
    ModelIdentity,
    NGramSkeleton,
    SkeletonSpec,
    State,
    StreamPolicy,
    TemperatureSkeleton,
    TokenEvent,
    UniformSkeleton,
)


def calibration(tau: float = 9.43) -> Calibration:
    return Calibration(
        method="ltt", tau=tau, risk=0.8, delta=0.05, score="lift", n=2000, n_answered=203,
        n_errors=151, coverage=0.1015, empirical_risk=0.744, risk_upper=0.794,
        policy=StreamPolicy(aggregate="min").to_dict(),
    )  # fmt: skip


def certificate(**kw: Any) -> Certificate:
    args: dict[str, Any] = {
        "policy": StreamPolicy(aggregate="min", on_length="answer"),
        "tau": 9.43,
        "skeleton": SkeletonSpec("uniform", {"vocab_size": 49152}),
        "model": ModelIdentity("smollm2-135m-instruct-q4_1", api_model="local", vocab_size=49152),
        "context": GenerationContext(
            system_prompt="Answer briefly.", temperature=0.0, repeat_penalty=1.0, max_tokens=24,
            stop=("\n",),
        ),
        "calibration": calibration(),
        "provenance": {"traces_sha256": "ab" * 32, "command": "liftguard calibrate ..."},
    }  # fmt: skip
    return Certificate(**{**args, **kw})


def test_json_round_trip_is_exact(tmp_path: Path) -> None:
    cert = certificate()
    data = cert.to_dict()
    assert data["format"] == "liftguard.certificate/1"
    again = Certificate.from_dict(json.loads(json.dumps(data)))
    assert again == cert and again.to_dict() == data
    path = tmp_path / "cert.json"
    cert.save(path)
    assert Certificate.load(path) == cert
    assert json.loads(path.read_text()) == data
    assert not list(tmp_path.glob(".*.tmp"))  # written via a temporary file


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"surprise": 1}, "unknown field(s) 'surprise'"),
        ({"tau": 12.5}, "tau: must lie strictly inside"),
        ({"tau": "9"}, "tau: must lie strictly inside"),
        ({"policy": {"aggregate": "median"}}, "policy: aggregate must be"),
        ({"policy": {"bogus": 1}}, "policy: unknown policy field(s): 'bogus'"),
        ({"skeleton": {"kind": "uniform", "params": {"vocab_size": 0}}}, "vocab_size must be"),
        ({"skeleton": {"kind": "temperature", "params": {"vocab_size": 9, "rule": "x"}}},
         "rule must be 'anchored' or 'paper'"),
        ({"skeleton": {"params": {}}}, "skeleton.kind: missing"),
        ({"model": {"model_id": ""}}, "model.model_id"),
        ({"model": {"model_id": "m", "logprob_mode": "cooked"}}, "model.logprob_mode"),
        ({"context": {"temperature": -1}}, "context.temperature: must be >= 0"),
        ({"context": {"top_p": 1.5}}, "context.top_p: must be <= 1"),
        ({"context": {"max_tokens": 0}}, "context.max_tokens"),
        ({"context": {"stop": "\n"}}, "context.stop"),
        ({"context": {"seed": 3}}, "context: unknown field(s) 'seed'"),
        ({"calibration": {"tau": 9.43, "bogus": 1}}, "calibration: unknown field(s) 'bogus'"),
        ({"format": "liftguard.certificate/0"}, "format: expected"),
    ],
)  # fmt: skip
def test_invalid_fields_are_config_errors_naming_the_field(
    change: dict[str, Any], field: str
) -> None:
    data = {**certificate().to_dict(), **change}
    with pytest.raises(ConfigError) as info:
        Certificate.from_dict(data)
    assert field in str(info.value)


def test_missing_fields_and_a_calibration_file_are_explained(tmp_path: Path) -> None:
    data = certificate().to_dict()
    del data["tau"]
    with pytest.raises(ConfigError, match="tau: missing"):
        Certificate.from_dict(data)
    old = tmp_path / "cal.json"
    old.write_text(calibration().to_json())
    with pytest.raises(ConfigError, match=r"cal\.json: format: .*calibration record"):
        Certificate.load(old)
    with pytest.raises(ConfigError, match="differs from the calibration"):
        certificate(tau=9.0)


def test_monitor_is_fresh_per_answer_and_replays_the_policy() -> None:
    cert = certificate()
    a, b = cert.monitor(), cert.monitor()
    assert isinstance(a.rule, LiftRule) and a is not b
    assert a.policy == cert.policy and a.tau == cert.tau
    assert isinstance(a.skeleton, UniformSkeleton) and a.skeleton.vocab_size == 49152
    a.update(TokenEvent("x", -20.0))  # lift 0 < tau: the min policy blocks at once
    assert a.verdict.state is State.BLOCKED and b.verdict.state is State.CONTINUE
    assert a.finish("length").state is State.BLOCKED


def test_skeleton_specs_build_core_kinds_and_name_the_others() -> None:
    temp = SkeletonSpec.of(TemperatureSkeleton(100, 2.0, "paper"))
    assert temp == SkeletonSpec("temperature", {"vocab_size": 100, "temperature": 2.0,
                                                "rule": "paper"})  # fmt: skip
    assert isinstance(temp.build(), TemperatureSkeleton)
    ngram = NGramSkeleton(10, n=2).fit([[1, 2, 3]])
    spec = SkeletonSpec.of(ngram)
    assert spec.kind == "ngram" and spec.source is None  # counts never saved: not buildable
    cert = certificate(skeleton=spec)
    with pytest.raises(ConfigError, match="pass skeleton="):
        cert.monitor()
    monitor = cert.monitor(skeleton=ngram)  # a stateful skeleton gets its own stream
    assert monitor.skeleton is not ngram


def test_context_request_settings() -> None:
    ctx = certificate().context
    assert ctx.request_settings() == {"temperature": 0.0, "max_tokens": 24, "stop": ["\n"]}
    assert GenerationContext().request_settings() == {}
    assert certificate(calibration=None).calibrated is False


def test_replay_skeleton_is_what_a_replay_of_the_statistic_reads() -> None:
    data = Path(__file__).parents[2] / "guardrail" / "data"
    lift = Certificate.load(data / "smollm2_fitted_certificate.json")  # reads prompt-free lifts
    api = Certificate.load(data / "qwen_fitted_certificate.json")  # reads no skeleton
    single = Certificate.load(data / "smollm2_certificate.json")  # no fitted statistic
    assert lift.statistic is not None and "skeleton" in lift.statistic.requires
    assert lift.replay_skeleton() == "prompt-free"
    assert api.statistic is not None and "skeleton" not in api.statistic.requires
    assert api.replay_skeleton() is None and single.replay_skeleton() is None
    # any other kind: the skeleton its spec builds
    built = replace(lift, skeleton=SkeletonSpec("uniform", {"vocab_size": 49152})).replay_skeleton()
    assert isinstance(built, UniformSkeleton)
