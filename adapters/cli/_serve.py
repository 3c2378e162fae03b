"""``liftguard serve``: the guard proxy (an OpenAI-compatible server in front of a model).

The command imports the proxy (``adapters.proxy``: starlette, uvicorn, aiohttp,
prometheus-client; ``pip install "liftguard[serve]"``) only when it runs. Keys
come from the environment, never from the command line (which other users of
the machine can read): ``LIFTGUARD_UPSTREAM_KEY`` (sent to the upstream) and
``LIFTGUARD_CLIENT_KEY`` (required of clients).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

__all__ = ["add_serve_parser", "cmd_clear_alarm", "cmd_serve"]

UPSTREAM_KEY_ENV = "LIFTGUARD_UPSTREAM_KEY"
CLIENT_KEY_ENV = "LIFTGUARD_CLIENT_KEY"


def _verdict_lines_to_stderr() -> None:
    """Print the proxy's JSON verdict lines on stderr, one per answer."""
    logger = logging.getLogger("adapters.proxy.verdicts")
    if not any(getattr(h, "_liftguard_serve", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler._liftguard_serve = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def _proxy_config(args: argparse.Namespace) -> Any:
    """The :class:`~adapters.proxy.ProxyConfig` that ``serve``'s arguments describe (a
    usage error, exit status 2, for a wrong value)."""
    from adapters.proxy import DEFAULT_REFUSAL, ProxyConfig, certificate_source
    from guardrail import ConfigError

    from ._common import CommandError

    options = args.storage_options
    default = None
    if args.certificate is not None:
        default = certificate_source(args.certificate, storage_options=options)
    routes = {
        name: certificate_source(spec, storage_options=options)
        for name, spec in args.model_certificate or ()
    }
    if default is None and not routes:
        raise CommandError("give --certificate and/or --model-certificate NAME SPEC", status=2)
    try:
        return ProxyConfig(
            upstream=args.upstream,
            certificate=default,
            model_certificates=routes,
            mode=args.mode,
            on_block=args.on_block,
            refusal_message=args.refusal_message or DEFAULT_REFUSAL,
            on_context_mismatch=args.on_context_mismatch,
            allow_request_fields=tuple(args.allow_request_field or ()),
            upstream_timeout_s=args.upstream_timeout,
            upstream_key=os.environ.get(UPSTREAM_KEY_ENV) or None,
            client_key=os.environ.get(CLIENT_KEY_ENV) or None,
            top_logprobs=args.top_logprobs,
            max_token_chars=args.max_token_chars,
            max_concurrent_requests=args.max_concurrent_requests,
            max_body_bytes=int(args.max_body_mb * 1024 * 1024),
            max_answer_tokens=args.max_answer_tokens,
            max_answer_bytes=int(args.max_answer_mb * 1024 * 1024),
            allowed_hosts=tuple(args.allowed_host or _default_hosts(args.host)),
            record_dir=args.record,
            record_max_bytes=int(args.record_max_mb * 1024 * 1024),
            record_queue=args.record_queue,
            record_dataset=args.record_dataset,
            record_format=args.record_format,
            record_max_age_s=args.record_max_age,
            record_storage_options=options,
            record_spool=args.record_spool,
            refresh_interval_s=args.refresh_interval,
            risk_alpha=args.risk_alpha,
            feedback_ids=args.feedback_ids,
            redis_url=args.redis,
            fleet_namespace=args.fleet_namespace,
            fleet_timeout_s=args.fleet_timeout,
            feedback_ttl_s=args.feedback_ttl,
            fleet_deployment=args.fleet_deployment,
            fleet_connect_timeout_s=args.fleet_connect_timeout,
        )
    except ConfigError as exc:  # every setting here is an argument's value: a usage error
        raise CommandError(str(exc), status=2) from exc


def cmd_serve(args: argparse.Namespace) -> int:
    from adapters.proxy import redact_url, serve

    from ._common import CommandError

    config = _proxy_config(args)
    if config.client_key is None and args.host not in _LOOPBACK and not args.no_client_key:
        raise CommandError(f"--host {args.host} serves whoever can reach it: set "
                           f"${CLIENT_KEY_ENV} (clients then send it as a Bearer key), or "
                           "pass --no-client-key to serve without one", status=2)  # fmt: skip
    default, routes = config.certificate, config.model_certificates
    if not args.no_verdict_log:
        _verdict_lines_to_stderr()
    shown = {n: s.current()[1] for n, s in {**routes, "*": default}.items() if s is not None}

    def listening(url: str) -> None:
        certs = ", ".join(f"{name}: {label}" for name, label in shown.items())
        print(
            f"liftguard serve: {url} -> {redact_url(config.upstream)} ({config.mode}; {certs})",
            file=sys.stderr,
            flush=True,
        )

    serve(
        config, host=args.host, port=args.port, log_level=args.log_level, on_listen=listening,
        shutdown_grace_s=args.shutdown_grace,
    )  # fmt: skip
    return 0


def cmd_clear_alarm(args: argparse.Namespace) -> int:
    import asyncio

    from adapters._proxy._feedback import clear_latched_alarms
    from adapters._risk._risk_replies import FeedbackRefused

    from ._common import CommandError

    config = _proxy_config(args)
    if config.redis_url is None:
        raise CommandError("clear-alarm clears a fleet's alarm: give --redis URL", status=2)
    try:
        cleared = asyncio.run(clear_latched_alarms(config, args.model))
    except FeedbackRefused as exc:
        raise CommandError(str(exc)) from None
    except KeyError as exc:
        raise CommandError(f"no model entry {exc.args[0]!r} (see --model-certificate)") from None
    for entry, (label, was_on) in cleared.items():
        what = "cleared" if was_on else "none"
        print(f"liftguard clear-alarm: model {entry}, certificate {label}: alarm kept from a lost "
              f"test: {what}")  # fmt: skip
    return 0


_LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


def _default_hosts(bind: str) -> list[str]:
    """The Host names answered by default: loopback names on a loopback address (a web
    page cannot then reach the proxy through DNS rebinding), any name otherwise."""
    return list(_LOOPBACK) if bind in _LOOPBACK else ["*"]


def add_serve_parser(sub: Any) -> None:
    """Register ``liftguard serve`` and ``liftguard clear-alarm`` (which takes the same
    arguments, so that it names the replicas' fleet exactly as they do) on the top-level
    subparsers ``sub``."""
    serve = sub.add_parser(
        "serve",
        help="run the guard proxy: an OpenAI-compatible server that certifies answers",
        description="An OpenAI-compatible /v1/chat/completions (streamed and not) and "
        "/v1/models in front of UPSTREAM. Every answer is guarded by the certificate: "
        "the upstream is asked for logprobs, the certificate's generation context fills "
        "unset settings, and an answer that is not certified ends with an in-stream error "
        "event (or a refusal). Also /metrics (Prometheus), /healthz and one JSON line per "
        "verdict on stderr. POST /v1/liftguard/feedback takes labels of certified answers "
        "for each calibrated certificate's live risk monitor (alarm in /metrics, /healthz). "
        f"Keys: ${UPSTREAM_KEY_ENV} (sent upstream; without it the "
        f"client's Authorization is passed through), ${CLIENT_KEY_ENV} (required of clients; "
        "needed to listen beyond loopback unless --no-client-key).",
    )
    serve.add_argument("--no-client-key", action="store_true", help=f"listen beyond loopback "
                       f"without ${CLIENT_KEY_ENV}: every client that can reach it is served")
    _serve_arguments(serve, cmd_serve)
    clear = sub.add_parser(
        "clear-alarm",
        help="turn off, fleet-wide, a risk alarm kept on after the fleet lost its state",
        description="With the replicas' own 'serve' arguments (--redis, --upstream or "
        "--fleet-deployment or --fleet-namespace, the certificates, --risk-alpha; the "
        "others are accepted and ignored): turn off, in the fleet's shared record, each "
        "alarm that fired in a test lost since (kept on until an operator clears it), for "
        "every model entry or those named by --model; every replica then reports it off. "
        "The alarm of the test in force is its own and stays on: recalibrate or roll back. "
        "Exit status 0 whether or not an alarm was on, 1 if Redis cannot be reached.",
    )
    clear.add_argument(
        "--model",
        action="append",
        metavar="MODEL",
        help="the model entry (a --model-certificate MODEL, or * for --certificate; "
        "repeatable; default: every entry)",
    )
    _serve_arguments(clear, cmd_clear_alarm)


def _serve_arguments(p: Any, func: Any) -> None:
    """``serve``'s arguments on the parser ``p``, running ``func``."""
    from ._common import integer, non_negative, positive, probability
    from ._skeleton import _StorageOptionAction

    p.add_argument(
        "--upstream",
        required=True,
        metavar="URL",
        help="the model server's OpenAI base URL, e.g. http://127.0.0.1:8000/v1",
    )
    p.add_argument(
        "--certificate",
        metavar="CERT.json|STORE_URL#NAME@ALIAS",
        default=None,
        help="the certificate of every model without its own (a file, or a store "
        "alias re-read every --refresh-interval seconds)",
    )
    p.add_argument(
        "--model-certificate",
        nargs=2,
        action="append",
        metavar=("MODEL", "SPEC"),
        help="the certificate for requests naming MODEL (repeatable)",
    )
    p.add_argument(
        "--storage-option",
        dest="storage_options",
        action=_StorageOptionAction,
        default=None,
        metavar="KEY=VALUE",
        help="fsspec option of a store URL and of a --record URL (repeatable, as for "
        "'skeleton')",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=integer(0), default=8080, help="0: a free port")
    p.add_argument(
        "--mode",
        default="buffered",
        choices=("buffered", "passthrough", "observe"),
        help="buffered: send nothing before certification (default); passthrough: "
        "tokens flow, a block ends the stream; observe: block nothing, report "
        "verdicts (shadow runs, recording complete answers)",
    )
    p.add_argument(
        "--on-block",
        default="error",
        choices=("error", "refusal"),
        help="end a blocked answer with an error event (HTTP 422 when not "
        "streamed) or a refusal message (finish_reason content_filter)",
    )
    p.add_argument("--refusal-message", default=None, help="the text of --on-block refusal")
    p.add_argument(
        "--on-context-mismatch",
        default="log",
        choices=("log", "reject"),
        help="a request that changes a calibrated setting (or sends a field that is not "
        "on the allowlist): forward it and count it (log), or refuse it with HTTP 400 (reject)",
    )
    p.add_argument(
        "--allow-request-field",
        action="append",
        metavar="NAME",
        help="add a request field to the allowlist of those forwarded without counting as a "
        "change (repeatable; only for fields that leave the answer distribution as it is)",
    )
    p.add_argument(
        "--upstream-timeout",
        type=positive,
        default=60.0,
        metavar="SECONDS",
        help="longest wait for the upstream's next bytes; a stalled answer is never certified",
    )
    p.add_argument(
        "--top-logprobs",
        type=integer(0),
        default=None,
        help="alternatives to ask for per token (default: 20 if the skeleton "
        "reads them, else 1; never less than 1)",
    )
    p.add_argument("--max-token-chars", type=integer(1), default=4096)
    p.add_argument(
        "--max-concurrent-requests",
        type=integer(1),
        default=1024,
        metavar="N",
        help="chat requests served at once, body to last byte; more get HTTP 503 overloaded",
    )
    p.add_argument(
        "--max-body-mb", type=positive, default=4.0, help="largest request body (HTTP 413 beyond)"
    )
    p.add_argument(
        "--max-answer-tokens",
        type=integer(1),
        default=16_384,
        help="most tokens read of one answer (also at most the request's own "
        "limit); past it the answer is blocked and the upstream closed",
    )
    p.add_argument(
        "--max-answer-mb",
        type=positive,
        default=8.0,
        help="most bytes read of one upstream answer, logprobs included",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        metavar="NAME",
        default=None,
        help="a Host name the proxy answers to (repeat; '*': any); default: "
        "loopback names when --host is a loopback address, else any",
    )
    p.add_argument(
        "--record",
        metavar="DIR|URL",
        default=None,
        help="write every guarded answer as a trace line under DIR, or to objects under an "
        "fsspec URL such as s3://bucket/prefix (with --storage-option), each file uploaded "
        "whole once finished",
    )
    p.add_argument(
        "--record-format",
        choices=("jsonl", "parquet"),
        default="jsonl",
        help="the recording files' format (parquet: pip install 'liftguard[columnar]')",
    )
    p.add_argument(
        "--record-max-age",
        type=positive,
        default=300.0,
        metavar="SECONDS",
        help="with a URL or --record-format parquet: publish a file once it is this old, "
        "so that a quiet proxy's answers still arrive (default 300)",
    )
    p.add_argument(
        "--record-spool",
        metavar="DIR",
        default=None,
        help="with a URL: the local directory where files wait to be uploaded, and where "
        "the next start finds those a crash left (default: one per destination under "
        "$XDG_STATE_HOME/liftguard/record-spool)",
    )
    p.add_argument(
        "--record-max-mb", type=positive, default=64.0, help="start a new trace file past this size"
    )
    p.add_argument(
        "--record-queue",
        type=integer(1),
        default=10_000,
        help="answers that may wait to be written; more are dropped and counted",
    )
    p.add_argument(
        "--record-dataset",
        default="proxy",
        help="the traces' dataset name and the files' prefix (letters, digits, '_', '.', '-')",
    )
    p.add_argument(
        "--refresh-interval",
        type=non_negative,
        default=10.0,
        metavar="SECONDS",
        help="re-read store aliases this often (0: never)",
    )
    p.add_argument(
        "--risk-alpha",
        type=probability,
        default=0.05,
        metavar="ALPHA",
        help="level of the live risk monitors: while a certificate's promise holds, "
        "its alarm fires with probability at most ALPHA (default 0.05)",
    )
    p.add_argument(
        "--feedback-ids",
        type=integer(1),
        default=50_000,
        metavar="N",
        help="answers that POST /v1/liftguard/feedback can still label (the "
        "oldest are dropped; about 0.5 kB each; default 50000)",
    )
    fleet = p.add_argument_group(
        "several replicas",
        "share the answers, labels and risk monitors with every replica that names the same "
        "Redis or Valkey server and namespace (pip install \"liftguard[fleet]\")",
    )
    fleet.add_argument(
        "--redis",
        metavar="URL",
        default=os.environ.get("LIFTGUARD_REDIS_URL"),
        help="redis://HOST:PORT/DB, rediss://... or unix://PATH (default: $LIFTGUARD_REDIS_URL; "
        "none: one process keeps its own)",
    )
    fleet.add_argument(
        "--fleet-namespace",
        metavar="NAME",
        help="the fleet's name in Redis: replicas with the same one share everything "
        "(default: derived from --fleet-deployment)",
    )
    fleet.add_argument(
        "--fleet-deployment",
        metavar="NAME",
        help="the deployment's name, from which the namespace is derived (default: the "
        "upstream URL): two deployments never share an alarm unless given one name",
    )
    fleet.add_argument(
        "--fleet-timeout",
        type=positive,
        default=0.5,
        metavar="SECONDS",
        help="the longest a command to Redis waits (default 0.5)",
    )
    fleet.add_argument(
        "--fleet-connect-timeout",
        type=positive,
        default=5.0,
        metavar="SECONDS",
        help="the longest a new connection to Redis waits (default 5)",
    )
    fleet.add_argument(
        "--feedback-ttl",
        type=integer(1),
        default=7 * 24 * 3600,
        metavar="SECONDS",
        help="with --redis: how long an answer can be labelled (default 604800, a week)",
    )
    p.add_argument(
        "--log-level",
        default="warning",
        choices=("critical", "error", "warning", "info", "debug"),
        help="uvicorn's log level",
    )
    p.add_argument(
        "--shutdown-grace",
        type=positive,
        default=30.0,
        metavar="SECONDS",
        help="on SIGTERM/SIGINT, how long answers in flight may finish; 2 s before that, "
        "those still running end with a proxy_shutdown error event (default 30)",
    )
    p.add_argument(
        "--no-verdict-log",
        action="store_true",
        help="do not print the JSON verdict lines on stderr",
    )
    p.set_defaults(func=func)
