"""The docs' LiteLLM ``config.yaml`` blocks parse, and every liftguard guardrail in them
names only settings the guardrail takes (its own, or LiteLLM's guardrail settings: the
check the guardrail runs at start, ``adapters._litellm._config.check_known_settings``),
with values it accepts. ``tests/docs/test_docs_litellm.py`` starts LiteLLM with the LiteLLM
page's file. Registered in ``tests/docs/test_docs_blocks.py``."""

from __future__ import annotations

import inspect
from importlib.util import find_spec
from typing import Any

import pytest
from markdown_blocks import block

if find_spec("litellm") is None or find_spec("yaml") is None:
    pytest.skip('litellm is not installed (pip install "liftguard[litellm]")',
                allow_module_level=True)  # fmt: skip

import yaml

from adapters._litellm._config import check_known_settings
from adapters.litellm import LiftGuardGuardrail
from guardrail import ConfigError

OWN = [name for name in inspect.signature(LiftGuardGuardrail._configure).parameters
       if name not in ("self", "kwargs")]  # fmt: skip


def _guardrails(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The liftguard guardrails of ``config`` by name, each checked as the guardrail checks
    its settings at start."""
    from litellm.types.guardrails import LitellmParams

    found = {}
    for entry in config["guardrails"]:
        params = entry["litellm_params"]
        assert params["guardrail"] == "adapters.litellm.LiftGuardGuardrail"
        assert sorted(params["mode"]) == ["post_call", "pre_call"]  # both hooks
        check_known_settings({k: v for k, v in params.items() if k not in OWN}, OWN)
        LitellmParams(**params)  # LiteLLM's own parsing of the entry
        found[entry["guardrail_name"]] = params
    return found


def test_the_settings_check_has_teeth() -> None:
    with pytest.raises(ConfigError, match="did you mean guard_mode"):
        check_known_settings({"guard_mdoe": "buffered"}, OWN)


def test_litellm_config_settings() -> None:
    config = yaml.safe_load(block("docs/litellm.md", "model_list:").text)
    guardrails = _guardrails(config)
    assert set(guardrails) == {"liftguard"}
    settings = guardrails["liftguard"]
    assert settings["guard_mode"] in ("buffered", "passthrough")
    assert settings["on_block"] in ("error", "refusal") and 0 < settings["risk_alpha"] < 1
    (model,) = config["model_list"]
    assert model["litellm_params"]["guardrails"] == ["liftguard"]  # attached by name
    assert config["general_settings"]["master_key"] == "os.environ/LITELLM_MASTER_KEY"


def test_fleet_guardrail_settings() -> None:
    config = yaml.safe_load(block("docs/fleet.md", "guardrails:").text)
    settings = _guardrails(config)["liftguard"]
    assert settings["redis"] is True and settings["fleet_deployment"] == "chat"
