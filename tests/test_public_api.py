from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest

import guardrail

PUBLIC_MODULES = (
    "guardrail",
    "guardrail.evaluate",
    "guardrail.fitting",
    "guardrail.paper",
    "guardrail.stats",
    "guardrail.topk",
    "guardrail.traces",
    "guardrail.vsd",
    "adapters",
    "adapters.cli",
    "adapters.litellm",
    "adapters.local",
    "adapters.proxy",
    "adapters.tracefiles",
    "skeleton_store",
)


def _public_names(module: ModuleType) -> set[str]:
    """The names a module shows: not private, not a submodule, not ``annotations``;
    ``dir()`` includes the names a module loads on first access (``__dir__``)."""
    return {
        name
        for name in dir(module)
        if not name.startswith("_")
        and name != "annotations"
        and not isinstance(vars(module).get(name), ModuleType)
    }


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_all_imports_are_exported(name: str) -> None:
    # every public name is in __all__ and every name in __all__ exists: no re-export
    # that is importable but not part of the surface (as httpx checks its own)
    if name == "adapters.proxy":
        pytest.importorskip("starlette")
    if name == "adapters.litellm":
        _import_litellm_offline()
    module = importlib.import_module(name)
    exported = [n for n in module.__all__ if not n.startswith("_")]
    assert len(exported) == len(set(exported)), "a name is in __all__ twice"
    assert _public_names(module) == set(exported)


def test_the_core_surface_is_small() -> None:
    assert len(_public_names(guardrail)) <= 50


def test_all_is_sorted_and_importable() -> None:
    names = [n for n in guardrail.__all__ if n != "__version__"]
    assert names == sorted(names, key=lambda n: (not n.isupper(), n.lower() if n.isupper() else n))
    for name in guardrail.__all__:
        assert hasattr(guardrail, name), name


def test_public_names_are_pinned() -> None:
    # changing the public surface is a deliberate act: update this list with it
    assert guardrail.__all__ == [
        "Calibration",
        "Cause",
        "Certificate",
        "ConfigError",
        "ContextMismatchWarning",
        "EvidenceRule",
        "FittedRule",
        "FittedStatistic",
        "GenerationContext",
        "Guarded",
        "GuardedText",
        "GuardrailBlocked",
        "GuardrailError",
        "InsufficientDataError",
        "LiftRule",
        "MissingDependencyError",
        "MissingLogprobsError",
        "ModelIdentity",
        "Monitor",
        "NGramSkeleton",
        "Reads",
        "RiskMonitor",
        "Skeleton",
        "SkeletonResolver",
        "SkeletonSpec",
        "State",
        "StreamPolicy",
        "StreamTruncated",
        "TemperatureSkeleton",
        "TokenEvent",
        "TokenIds",
        "TraceFormatError",
        "UniformSkeleton",
        "VectorSkeleton",
        "Verdict",
        "WithTokenIds",
        "__version__",
        "calibrate",
        "calibrate_policy",
        "end_cause",
        "skeleton_reads",
    ]


def test_errors_hierarchy() -> None:
    assert issubclass(guardrail.ConfigError, ValueError)
    assert issubclass(guardrail.TraceFormatError, ValueError)
    for exc in (
        guardrail.ConfigError,
        guardrail.TraceFormatError,
        guardrail.InsufficientDataError,
        guardrail.MissingLogprobsError,
        guardrail.GuardrailBlocked,
    ):
        assert issubclass(exc, guardrail.GuardrailError)
    blocked = guardrail.GuardrailBlocked(verdict={"state": "BLOCKED"})
    assert blocked.verdict == {"state": "BLOCKED"}


def test_adapter_public_names_are_pinned() -> None:
    import adapters
    import adapters.local

    assert adapters.__all__ == [
        "Abstention",
        "CheckSkipped",
        "ChunkParts",
        "GGUFIds",
        "Judge",
        "JudgeFailure",
        "LiftGuardCallbackHandler",
        "LocalTextScorer",
        "PromptFreeSkeleton",
        "ProviderFormatError",
        "SandboxLimits",
        "SandboxResult",
        "TiktokenIds",
        "anthropic_scorer_prompt",
        "chat_chunk_parts",
        "check_code",
        "check_number",
        "events_from_chat_chunk",
        "events_from_responses_event",
        "extract_python_code",
        "final_number",
        "guard_anthropic_stream",
        "guard_anthropic_stream_sync",
        "guard_chat_stream",
        "guard_chat_stream_sync",
        "guard_runnable",
        "guard_tool",
        "guarded_chat_completion",
        "guarded_message",
        "run_sandboxed",
        "smollm2_prompt_free_prefix",
        "token_ids_for",
    ]
    assert adapters.local.__all__ == [
        "GEMMA3_MODEL_NAME",
        "GEMMA3_PROMPT_FREE",
        "PACKAGED_MODELS",
        "QWEN_MODEL_NAME",
        "QWEN_SYSTEM",
        "SMOLLM2_CERTIFICATE",
        "SMOLLM2_FITTED_CERTIFICATE",
        "SMOLLM2_SYSTEM",
        "ChatTemplate",
        "LocalChatServer",
        "LocalModel",
        "LocalToken",
        "bundled_smollm2_path",
        "gemma3_fewshot_prompt",
        "gemma3_path",
        "gguf_architecture",
        "packaged_model_path",
        "qwen_path",
        "smollm2_certificate",
        "smollm2_chat_prompt",
        "smollm2_fitted_certificate",
    ]
    for module in (adapters, adapters.local):
        for name in module.__all__:
            assert hasattr(module, name), name


def test_proxy_public_names_are_pinned() -> None:
    pytest.importorskip("starlette")
    import adapters.proxy

    assert adapters.proxy.__all__ == [
        "BLOCKED_TYPE",
        "DEFAULT_REFUSAL",
        "INSTALL_HINT",
        "UPSTREAM_TYPE",
        "VERDICT_FIELD",
        "CertificateSource",
        "FileCertificate",
        "Proxy",
        "ProxyConfig",
        "StaticCertificate",
        "StoreCertificate",
        "certificate_source",
        "create_app",
        "redact_url",
        "serve",
    ]
    for name in adapters.proxy.__all__:
        assert hasattr(adapters.proxy, name), name


def _import_litellm_offline() -> None:
    """Skip without LiteLLM; keep its import from fetching the model price list."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    pytest.importorskip("litellm")
    pytest.importorskip("fastapi")


def test_litellm_public_names_are_pinned() -> None:
    _import_litellm_offline()
    import adapters.litellm

    assert adapters.litellm.__all__ == [
        "BLOCKED_STATUS", "INSTALL_HINT", "GuardrailStartupError", "LiftGuardGuardrail",
        "guardrail_check",
    ]  # fmt: skip
    for name in adapters.litellm.__all__:
        assert hasattr(adapters.litellm, name), name


def test_command_line_public_names_are_pinned() -> None:
    import adapters.cli

    assert adapters.cli.__all__ == ["main", "oracle_coverage"]


def test_public_submodules_are_pinned() -> None:
    import guardrail.evaluate
    import guardrail.fitting
    import guardrail.paper
    import guardrail.stats
    import guardrail.topk
    import guardrail.traces
    import guardrail.vsd

    assert guardrail.stats.__all__ == [
        "DEFAULT_CLIP",
        "BettingConfidenceSequence",
        "BettingMean",
        "BettingTrajectory",
        "GammaFit",
        "LowestK",
        "ModelCheck",
        "SubGammaParams",
        "bernstein_params",
        "betting_bets",
        "betting_confidence_sequence",
        "betting_log_wealth",
        "betting_mean_path",
        "binomial_pvalue",
        "budget",
        "checked_subgamma",
        "clipped_lift",
        "clipped_lifts",
        "clopper_pearson_interval",
        "clopper_pearson_upper",
        "fit_gamma",
        "inflate",
        "inflation_factor",
        "lowest_k_path",
        "min_answered_for_risk",
        "model_check",
        "mutual_information",
        "subgamma_from_gamma",
        "subgamma_moments",
        "support_clip",
        "tv_distance",
    ]
    assert guardrail.paper.__all__ == [
        "PaperMean",
        "eta_budget_shift_bound",
        "kappa_answer_rate_bound",
        "mean_lift_lower_bound",
        "pac_bayes_bound",
        "paper_mean_path",
        "paper_radius",
        "topk_compensated_lift",
    ]
    assert guardrail.topk.__all__ == [
        "DEFAULT_R2_MIN",
        "TailModel",
        "TailRule",
        "censored_logprob",
        "censored_logprob_batch",
        "estimate_entropy",
        "estimate_entropy_batch",
        "estimate_logz",
        "estimate_logz_batch",
        "fit_tail",
    ]
    assert guardrail.traces.__all__ == [
        "BASELINES",
        "DEFAULT_F1_THRESHOLD",
        "OPTIONAL_FIELDS",
        "TRACE_SKELETONS",
        "Trace",
        "baseline_score",
        "dump_trace_line",
        "file_sha256",
        "is_correct",
        "is_correct_f1",
        "iter_trace_objects",
        "iter_traces",
        "label_line",
        "normalize_answer",
        "parse_trace",
        "parse_trace_lines",
        "read_traces",
        "select_skeleton_kind",
        "token_f1",
        "token_object",
        "trace_clipped_lifts",
        "trace_line",
        "trace_object",
        "trace_objects",
        "trace_skeleton_logprobs",
        "trace_to_dict",
        "type_token_ratio",
        "unigram_log_probs",
        "vector_clipped_lifts",
    ]
    assert guardrail.vsd.__all__ == [
        "DEFAULT_FLOOR",
        "Geometry",
        "VSDResult",
        "distributions_from_logits",
        "distributions_from_traces",
        "vsd",
        "vsd_objective",
    ]
    assert guardrail.evaluate.__all__ == [
        "LTTOutcome",
        "MethodScores",
        "ReplayResult",
        "auroc",
        "baseline_method",
        "bootstrap_intervals",
        "critical_thresholds",
        "evaluate_methods",
        "first_test_level",
        "fitted_method",
        "lift_method",
        "ltt_threshold",
        "replay",
        "running_statistic",
        "shown_at",
        "threshold_grid",
    ]
    assert guardrail.fitting.__all__ == [
        "DEFAULT_ALTERNATIVES",
        "DEFAULT_L2",
        "FEATURE_PRESETS",
        "FEATURE_SOURCES",
        "SCOPES",
        "Aggregate",
        "Candidate",
        "CandidateScore",
        "CodeScope",
        "Deployment",
        "EventReader",
        "Feature",
        "FinalAnswerScope",
        "FitOptions",
        "FitReport",
        "FittedPath",
        "FittedState",
        "FittedStatistic",
        "MarginAnswers",
        "NumberScope",
        "RecordedSkeleton",
        "TokenFeaturizer",
        "aggregate_of",
        "aggregate_path",
        "answer_features",
        "base_features_batch",
        "block_margins",
        "calibrate_fitted",
        "critical_score",
        "cv_coverage",
        "fit_certificate",
        "fit_statistic",
        "margin_cost",
        "margin_scale",
        "margins_from_scores",
        "moves_one_way",
        "preset_features",
        "reach_path",
        "replay_fitted",
        "scope_mask",
        "scope_tracker",
        "scoped_path",
        "select_statistic",
        "stop_at",
        "token_ranges",
        "trace_events",
        "with_margins",
    ]
    for module in (guardrail.stats, guardrail.paper, guardrail.topk, guardrail.traces,
                   guardrail.vsd, guardrail.evaluate, guardrail.fitting):  # fmt: skip
        for name in module.__all__:
            assert hasattr(module, name), (module.__name__, name)


def test_tracefiles_public_names_are_pinned() -> None:
    import adapters.tracefiles

    assert adapters.tracefiles.__all__ == [
        "PARQUET_SUFFIX",
        "TraceDigest",
        "TraceFileWriter",
        "convert_traces",
        "is_parquet",
        "is_url",
        "open_binary",
        "open_trace_objects",
        "same_traces",
        "trace_digest",
        "trace_file_sha256",
        "trace_identity",
    ]
