"""A LiteLLM guardrail that cannot guard stops LiteLLM at start: never a model served unguarded.

LiteLLM 1.110.2 skips a guardrail whose constructor raises ``ValueError`` or ``TypeError`` and
serves the models without it. Each configuration error below is started for real
(``litellm --config``): the process must exit, naming the error, and never serve. The
constructor's refusals are also checked in-process for every error the issue lists.
"""

from __future__ import annotations

import asyncio
import os
import sys
import types
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

if find_spec("litellm") is None or find_spec("fastapi") is None:
    pytest.skip(
        'litellm is not installed (pip install "liftguard[litellm]")', allow_module_level=True
    )

from fitted_certs import certificate as fitted_certificate
from litellm_harness import CONTEXT, OFFLINE_ENV, start_outcome, write_config
from proxy_harness import make_certificate

from guardrail import ConfigError


@pytest.fixture(autouse=True)
def _offline() -> None:
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)


def _guardrail(**settings: Any) -> Any:
    from adapters.litellm import LiftGuardGuardrail

    return LiftGuardGuardrail(event_hook=["pre_call", "post_call"], **settings)


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"guard_mode": "bufferd"}, "guard_mode must be buffered or passthrough"),
        ({"gaurd_mode": "buffered"}, "no setting 'gaurd_mode' .*did you mean guard_mode"),
        ({"risk_alpha": 2}, "risk_alpha"),
        ({"certificate": "corrupt.json"}, "corrupt.json"),
        ({"certificate": "missing.json"}, "missing.json"),
        ({"certificate": "api.json", "top_logprobs": 2}, "reads 5 alternatives"),
        ({"max_answer_tokens": 0}, "max_answer_tokens"),
        ({"max_answer_bytes": 100}, "max_answer_bytes must be an integer >= 1024"),
    ],
)
def test_every_configuration_error_is_a_startup_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: dict[str, Any], match: str
) -> None:
    from adapters.litellm import GuardrailStartupError

    monkeypatch.chdir(tmp_path)
    make_certificate(context=CONTEXT).save(tmp_path / "cert.json")
    fitted_certificate("api").save(tmp_path / "api.json")
    (tmp_path / "corrupt.json").write_text('{"tau": ', encoding="utf-8")
    with pytest.raises(GuardrailStartupError, match=match) as caught:
        _guardrail(**{"certificate": "cert.json", **settings})
    # not a ValueError, which LiteLLM would skip; the configuration error is the cause
    assert not isinstance(caught.value, ValueError | TypeError)
    assert isinstance(caught.value.__cause__, Exception)
    assert "LiteLLM must not start" in str(caught.value)


@pytest.mark.parametrize(
    "settings",
    [{"guard_mode": "bufferd"}, {"gaurd_mode": "buffered"}, {"certificate": "corrupt.json"}],
    ids=["guard_mode-typo", "setting-typo", "corrupt-certificate"],
)
def test_litellm_does_not_start_with_a_guardrail_that_cannot_guard(
    tmp_path: Path, settings: dict[str, Any]
) -> None:
    (tmp_path / "corrupt.json").write_text("not json", encoding="utf-8")
    config = write_config(
        tmp_path, "http://127.0.0.1:9/v1", make_certificate(context=CONTEXT),
        {"guarded": {"guard_mode": "buffered", **settings}},
    )  # fmt: skip
    code, log = start_outcome(config)
    assert code is not None, f"LiteLLM served with a guardrail that cannot guard:\n{log[-3000:]}"
    assert code != 0
    assert "LiteLLM must not start" in log
    assert "WITHOUT this guardrail" not in log


def test_a_relative_certificate_is_read_beside_litellms_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from adapters._litellm._config import config_relative

    (tmp_path / "conf").mkdir()
    make_certificate().save(tmp_path / "conf" / "cert.json")
    monkeypatch.chdir(tmp_path)
    server = types.ModuleType("litellm.proxy.proxy_server")
    server.user_config_file_path = str(tmp_path / "conf" / "config.yaml")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "litellm.proxy.proxy_server", server)
    assert config_relative("cert.json") == str(tmp_path / "conf" / "cert.json")
    assert config_relative("store#chat@prod") == "store#chat@prod"  # not beside it: as given
    assert config_relative("s3://b/store#chat") == "s3://b/store#chat"
    guard = _guardrail(certificate="cert.json")
    assert guard.source.current()[1].startswith("cert.json#")


def test_the_checks_name_the_setting_and_a_good_configuration_passes(tmp_path: Path) -> None:
    from adapters._litellm._config import check_settings

    with pytest.raises(ConfigError, match="needs certificate"):
        check_settings(
            certificate=None, guard_mode="buffered", on_block="error",
            refusal_message="x", top_logprobs=None, max_answer_tokens=1,
        )  # fmt: skip
    make_certificate().save(tmp_path / "cert.json")
    assert _guardrail(certificate=str(tmp_path / "cert.json")).guard_mode == "buffered"


# --- entries LiteLLM skips before the guardrail's constructor runs -----------------------------


CHECK = "adapters.litellm.guardrail_check"


def _edited(config: Path, old: str, new: str) -> Path:
    text = config.read_text(encoding="utf-8")
    assert old in text, text
    config.write_text(text.replace(old, new, 1), encoding="utf-8")
    return config


SKIPPED = [
    ("      mode: [pre_call, post_call]\n", ""),
    ("      default_on: false\n", "      default_on: maybe\n"),
]
"""Edits of an entry that LiteLLM 1.110.2 skips before importing the guardrail (its
``LitellmParams`` schema requires ``mode`` and a boolean ``default_on``)."""


@pytest.mark.parametrize(("old", "new"), SKIPPED, ids=["no-mode", "default_on-maybe"])
def test_litellm_does_not_start_with_an_entry_it_would_skip(
    tmp_path: Path, old: str, new: str
) -> None:
    config = write_config(
        tmp_path, "http://127.0.0.1:9/v1", make_certificate(context=CONTEXT),
        {"guarded": {"guard_mode": "buffered"}}, callbacks=[CHECK],
    )  # fmt: skip
    code, log = start_outcome(_edited(config, old, new))
    assert code is not None, f"LiteLLM served with a guardrail it skipped:\n{log[-3000:]}"
    assert code != 0
    assert "LiteLLM must not start" in log and "'lg-guarded'" in log, log[-3000:]
    assert "WITHOUT this guardrail" not in log


@pytest.mark.parametrize(("old", "new"), SKIPPED, ids=["no-mode", "default_on-maybe"])
def test_an_entry_litellm_would_skip_is_found_through_another_entry(
    tmp_path: Path, old: str, new: str
) -> None:
    # no callback: LiteLLM imports the guardrail for the valid entry, and the import checks all
    config = write_config(
        tmp_path, "http://127.0.0.1:9/v1", make_certificate(context=CONTEXT),
        {"guarded": {"guard_mode": "buffered"}, "other": {"guard_mode": "passthrough"}},
    )  # fmt: skip
    text = config.read_text(encoding="utf-8")
    head, sep, tail = text.partition("  - guardrail_name: lg-other\n")
    assert old in tail
    config.write_text(head + sep + tail.replace(old, new, 1), encoding="utf-8")
    code, log = start_outcome(config)
    assert code is not None and code != 0, f"LiteLLM served:\n{log[-3000:]}"
    assert "LiteLLM must not start" in log and "'lg-other'" in log, log[-3000:]


def test_the_check_refuses_every_request_while_a_guardrail_is_not_running() -> None:
    from adapters._litellm._startup import RUNNING, GuardrailCheck
    from adapters._litellm._wire import GuardrailHTTPError

    entry = {"guardrail": "adapters.litellm.LiftGuardGuardrail", "mode": ["pre_call", "post_call"]}
    config = {"guardrails": [{"guardrail_name": "lg-never-started", "litellm_params": entry}]}
    check = GuardrailCheck(config)
    data = {"model": "plain", "messages": []}
    with pytest.raises(GuardrailHTTPError) as refused:
        asyncio.run(check.async_pre_call_hook(None, None, data, "acompletion"))
    assert refused.value.status_code == 503 and "lg-never-started" in str(refused.value.detail)
    RUNNING.add("lg-never-started")
    try:
        assert asyncio.run(check.async_pre_call_hook(None, None, data, "embeddings")) is None
    finally:
        RUNNING.discard("lg-never-started")
