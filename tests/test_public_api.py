from __future__ import annotations

import subprocess
import sys

import guardrail


def test_all_is_sorted_and_importable() -> None:
    names = [n for n in guardrail.__all__ if n != "__version__"]
    assert names == sorted(names, key=lambda n: (not n.isupper(), n.lower() if n.isupper() else n))
    for name in guardrail.__all__:
        assert hasattr(guardrail, name), name


def test_public_names_are_pinned() -> None:
    # changing the public surface is a deliberate act: update this list with it
    assert guardrail.__all__ == [
        "BASELINES",
        "DEFAULT_CLIP",
        "DEFAULT_R2_MIN",
        "TRACE_SKELETONS",
        "BettingConfidenceSequence",
        "BettingMean",
        "BettingTrajectory",
        "Calibration",
        "Cause",
        "Certificate",
        "CertificateMonitor",
        "ConfigError",
        "ContextMismatchWarning",
        "GammaFit",
        "GenerationContext",
        "GuardedText",
        "GuardrailBlocked",
        "GuardrailError",
        "InsufficientDataError",
        "LTTOutcome",
        "LowestK",
        "MissingDependencyError",
        "MissingLogprobsError",
        "ModelCheck",
        "ModelIdentity",
        "NGramSkeleton",
        "PaperMean",
        "ReplayResult",
        "Skeleton",
        "SkeletonSpec",
        "State",
        "StreamPolicy",
        "StreamTruncated",
        "SubGammaParams",
        "TailModel",
        "TemperatureSkeleton",
        "TokenEvent",
        "TokenIds",
        "Trace",
        "TraceFormatError",
        "UniformSkeleton",
        "VSDResult",
        "Verdict",
        "WithTokenIds",
        "__version__",
        "baseline_score",
        "bernstein_params",
        "betting_bets",
        "betting_confidence_sequence",
        "betting_log_wealth",
        "betting_mean_path",
        "binomial_pvalue",
        "budget",
        "calibrate",
        "calibrate_policy",
        "censored_logprob",
        "censored_logprob_batch",
        "clipped_lift",
        "clipped_lifts",
        "clopper_pearson_interval",
        "clopper_pearson_upper",
        "critical_thresholds",
        "distributions_from_logits",
        "distributions_from_traces",
        "dump_trace_line",
        "end_cause",
        "estimate_entropy",
        "estimate_entropy_batch",
        "estimate_logz",
        "estimate_logz_batch",
        "eta_budget_shift_bound",
        "fit_gamma",
        "fit_tail",
        "inflate",
        "inflation_factor",
        "is_correct",
        "iter_traces",
        "kappa_answer_rate_bound",
        "lowest_k_path",
        "ltt_threshold",
        "min_answered_for_risk",
        "model_check",
        "mutual_information",
        "normalize_answer",
        "pac_bayes_bound",
        "paper_calibration_threshold",
        "paper_lift_correction",
        "paper_mean_path",
        "paper_radius",
        "parse_trace",
        "parse_trace_lines",
        "read_traces",
        "replay",
        "running_statistic",
        "select_skeleton_kind",
        "shown_at",
        "skeleton_needs",
        "subgamma_from_gamma",
        "subgamma_moments",
        "support_clip",
        "threshold_grid",
        "trace_clipped_lifts",
        "trace_skeleton_logprobs",
        "trace_to_dict",
        "tv_distance",
        "type_token_ratio",
        "vsd",
        "vsd_objective",
    ]


def test_import_pulls_in_no_heavy_or_vendor_module() -> None:
    code = (
        "import sys, guardrail, guardrail.cli\n"
        "bad = [m for m in ('torch', 'openai', 'anthropic', 'langchain_core', 'langchain',"
        " 'transformers', 'llama_cpp', 's3fs', 'fsspec', 'adapters', 'skeleton_store', 'scipy')"
        " if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


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
        "GGUFIds",
        "LiftGuardCallbackHandler",
        "LocalTextScorer",
        "PromptFreeSkeleton",
        "ProviderFormatError",
        "TiktokenIds",
        "anthropic_scorer_prompt",
        "events_from_chat_chunk",
        "events_from_responses_event",
        "guard_anthropic_stream",
        "guard_anthropic_stream_sync",
        "guard_chat_stream",
        "guard_chat_stream_sync",
        "guard_runnable",
        "guard_tool",
        "guarded_chat_completion",
        "guarded_message",
        "smollm2_prompt_free_prefix",
        "token_ids_for",
    ]
    assert adapters.local.__all__ == [
        "SMOLLM2_CERTIFICATE",
        "SMOLLM2_SYSTEM",
        "LocalChatServer",
        "LocalModel",
        "LocalToken",
        "bundled_smollm2_path",
        "smollm2_certificate",
        "smollm2_chat_prompt",
    ]
    for module in (adapters, adapters.local):
        for name in module.__all__:
            assert hasattr(module, name), name
