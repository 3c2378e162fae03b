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
ENVIRONMENT = {
    UPSTREAM_KEY_ENV: "proxy.upstream_key",
    CLIENT_KEY_ENV: "proxy.client_key",
    "LIFTGUARD_REDIS_URL": "fleet.url",
}
"""The settings read from the environment, by where they go: ``proxy.NAME`` is
:class:`~adapters.proxy.ProxyConfig`'s own field ``NAME``, ``limits.NAME``,
``recording.NAME`` and ``fleet.NAME`` the fields of its groups (the destinations of
``serve``'s arguments are named the same way); an argument given wins."""


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


def _settings(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The settings that ``serve``'s arguments and the environment (:data:`ENVIRONMENT`)
    give, by group (``"proxy"``: :class:`~adapters.proxy.ProxyConfig`'s own fields): what
    was not given is left to the configuration's defaults."""
    values = {dest: value for dest, value in vars(args).items() if "." in dest}
    for env, dest in ENVIRONMENT.items():
        if values.get(dest) is None:
            values[dest] = os.environ.get(env) or None
    groups: dict[str, dict[str, Any]] = {"proxy": {}, "limits": {}, "recording": {}, "fleet": {}}
    for dest, value in values.items():
        if value is not None:
            group, _, name = dest.partition(".")
            groups[group][name] = value
    return groups


def _proxy_config(args: argparse.Namespace) -> Any:
    """The :class:`~adapters.proxy.ProxyConfig` that ``serve``'s arguments and the
    environment describe (a usage error, exit status 2, for a wrong value, naming the
    argument or the variable)."""
    from adapters.proxy import FleetSettings, Limits, ProxyConfig, Recording, certificate_source
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
    given = _settings(args)
    proxy, recording, fleet = given["proxy"], given["recording"], given["fleet"]
    proxy.setdefault("allowed_hosts", _default_hosts(args.host))
    try:
        return ProxyConfig(
            certificate=default,
            model_certificates=routes,
            limits=Limits(**given["limits"]),
            recording=(
                Recording(**recording, storage_options=options)
                if "destination" in recording
                else None
            ),
            fleet=FleetSettings(**fleet) if "url" in fleet else None,
            **proxy,
        )
    except ConfigError as exc:  # every setting here is an argument's value: a usage error
        field, sep, rest = str(exc).partition(" ")
        raise CommandError(args.names.get(field, field) + sep + rest, status=2) from exc


def cmd_serve(args: argparse.Namespace) -> int:
    from adapters._serving._wire import redact_url
    from adapters.proxy import serve

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
    if config.fleet is None:
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


def _megabytes(text: str) -> int:
    """The bytes of a size in MiB (``--max-body-mb``): a finite number, at least 1 KiB."""
    from ._common import positive

    size = int(positive(text) * 1024 * 1024)
    if size < 1024:
        raise argparse.ArgumentTypeError(f"expected at least 1 KiB (0.001), got {text!r}")
    return size


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
    """``serve``'s arguments on the parser ``p``, running ``func``. Those of the proxy's
    configuration are in one table, each stored where it goes (``dest``: ``proxy.NAME``,
    ``limits.NAME``, ``recording.NAME`` or ``fleet.NAME``, as in :data:`ENVIRONMENT`) and
    left unset when not given: the configuration's defaults are the only ones."""
    from ._common import integer, non_negative, positive, probability
    from ._skeleton import _StorageOptionAction

    names = {dest.removeprefix("proxy."): f"${env}" for env, dest in ENVIRONMENT.items()}

    def add(rows: tuple[tuple[Any, str, str, Any, dict[str, Any], str], ...]) -> None:
        for parser, flag, dest, kind, extra, text in rows:
            if "choices" not in extra:  # named by the flag, as by default
                extra = {"metavar": flag[2:].upper().replace("-", "_"), **extra}
            parser.add_argument(flag, dest=dest, type=kind, help=text, **extra)
            names[dest.removeprefix("proxy.")] = flag  # a field's errors name its argument

    add(((p, "--upstream", "proxy.upstream", None, {"required": True, "metavar": "URL"},
          "the model server's OpenAI base URL, e.g. http://127.0.0.1:8000/v1"),))  # fmt: skip
    p.add_argument("--certificate", metavar="CERT.json|STORE_URL#NAME@ALIAS",
                   help="the certificate of every model without its own (a file, or a store "
                   "alias re-read every --refresh-interval seconds)")
    p.add_argument("--model-certificate", nargs=2, action="append", metavar=("MODEL", "SPEC"),
                   help="the certificate for requests naming MODEL (repeatable)")
    p.add_argument("--storage-option", dest="storage_options", action=_StorageOptionAction,
                   metavar="KEY=VALUE", help="fsspec option of a store URL and of a --record "
                   "URL (repeatable, as for 'skeleton')")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=integer(0), default=8080, help="0: a free port")
    seconds, n, many = {"metavar": "SECONDS"}, {"metavar": "N"}, {"action": "append"}
    fleet = p.add_argument_group(
        "several replicas",
        "share the answers, labels and risk monitors with every replica that names the same "
        "Redis or Valkey server and namespace (pip install \"liftguard[fleet]\")",
    )
    settings: tuple[tuple[Any, str, str, Any, dict[str, Any], str], ...] = (
        (p, "--mode", "proxy.mode", None, {"choices": ("buffered", "passthrough", "observe")},
         "buffered: send nothing before certification (default); passthrough: tokens flow, "
         "a block ends the stream; observe: block nothing, report verdicts (shadow runs, "
         "recording complete answers)"),
        (p, "--on-block", "proxy.on_block", None, {"choices": ("error", "refusal")},
         "end a blocked answer with an error event (HTTP 422 when not streamed) or a "
         "refusal message (finish_reason content_filter)"),
        (p, "--refusal-message", "proxy.refusal_message", None, {},
         "the text of --on-block refusal"),
        (p, "--on-context-mismatch", "proxy.on_context_mismatch", None,
         {"choices": ("log", "reject")}, "a request that changes a calibrated setting (or "
         "sends a field that is not on the allowlist): forward it and count it (log), or "
         "refuse it with HTTP 400 (reject)"),
        (p, "--allow-request-field", "proxy.allow_request_fields", None,
         {**many, "metavar": "NAME"}, "add a request field to the allowlist of those "
         "forwarded without counting as a change (repeatable; only for fields that leave the "
         "answer distribution as it is)"),
        (p, "--upstream-timeout", "limits.upstream_timeout_s", positive, seconds,
         "longest wait for the upstream's next bytes; a stalled answer is never certified"),
        (p, "--top-logprobs", "proxy.top_logprobs", integer(0), {}, "alternatives to ask for "
         "per token (default: 20 if the skeleton reads them, else 1; never less than 1)"),
        (p, "--max-token-chars", "limits.max_token_chars", integer(1), {},
         "longest text of one token (default 4096)"),
        (p, "--max-concurrent-requests", "limits.max_concurrent_requests", integer(1), n,
         "chat requests served at once, body to last byte; more get HTTP 503 overloaded"),
        (p, "--max-body-mb", "limits.max_body_bytes", _megabytes, {},
         "largest request body (HTTP 413 beyond; default 4)"),
        (p, "--max-json-values", "limits.max_json_values", integer(1), {},
         "most values in a request body, counted as its , and : before it is decoded (HTTP "
         "413 beyond; default 250,000)"),
        (p, "--max-json-containers", "limits.max_json_containers", integer(1), {},
         "most objects and lists in a request body, counted as its { and [ (HTTP 413 "
         "beyond; default 50,000)"),
        (p, "--max-answer-tokens", "limits.max_answer_tokens", integer(1), {},
         "most tokens read of one answer (also at most the request's own limit); past it "
         "the answer is blocked and the upstream closed"),
        (p, "--max-answer-mb", "limits.max_answer_bytes", _megabytes, {},
         "most bytes read of one upstream answer, logprobs included (default 8)"),
        (p, "--allowed-host", "proxy.allowed_hosts", None, {**many, "metavar": "NAME"},
         "a Host name the proxy answers to (repeat; '*': any); default: loopback names "
         "when --host is a loopback address, else any"),
        (p, "--record", "recording.destination", None, {"metavar": "DIR|URL"},
         "write every guarded answer as a trace line under DIR, or to objects under an "
         "fsspec URL such as s3://bucket/prefix (with --storage-option), each file uploaded "
         "whole once finished"),
        (p, "--record-format", "recording.format", None, {"choices": ("jsonl", "parquet")},
         "the recording files' format (parquet: pip install 'liftguard[columnar]')"),
        (p, "--record-max-age", "recording.max_age_s", positive, seconds,
         "with a URL or --record-format parquet: publish a file once it is this old, so "
         "that a quiet proxy's answers still arrive (default 300)"),
        (p, "--record-spool", "recording.spool", None, {"metavar": "DIR"},
         "with a URL: the local directory where files wait to be uploaded, and where the "
         "next start finds those a crash left (default: one per destination under "
         "$XDG_STATE_HOME/liftguard/record-spool)"),
        (p, "--record-max-mb", "recording.max_bytes", _megabytes, {},
         "start a new trace file past this size (default 64)"),
        (p, "--record-queue", "recording.queue", integer(1), {},
         "answers that may wait to be written; more are dropped and counted"),
        (p, "--record-dataset", "recording.dataset", None, {},
         "the traces' dataset name and the files' prefix (letters, digits, '_', '.', '-')"),
        (p, "--refresh-interval", "proxy.refresh_interval_s", non_negative, seconds,
         "re-read store aliases this often (0: never)"),
        (p, "--risk-alpha", "proxy.risk_alpha", probability, {"metavar": "ALPHA"},
         "level of the live risk monitors: while a certificate's promise holds, its alarm "
         "fires with probability at most ALPHA (default 0.05)"),
        (p, "--feedback-ids", "proxy.feedback_ids", integer(1), n,
         "answers that POST /v1/liftguard/feedback can still label (the oldest are "
         "dropped; about 0.5 kB each; default 50000)"),
        (fleet, "--redis", "fleet.url", None, {"metavar": "URL"},
         "redis://HOST:PORT/DB, rediss://... or unix://PATH (default: $LIFTGUARD_REDIS_URL; "
         "none: one process keeps its own)"),
        (fleet, "--fleet-namespace", "fleet.namespace", None, {"metavar": "NAME"},
         "the fleet's name in Redis: replicas with the same one share everything "
         "(default: derived from --fleet-deployment)"),
        (fleet, "--fleet-deployment", "fleet.deployment", None, {"metavar": "NAME"},
         "the deployment's name, from which the namespace is derived (default: the "
         "upstream URL): two deployments never share an alarm unless given one name"),
        (fleet, "--fleet-timeout", "fleet.timeout_s", positive, seconds,
         "the longest a command to Redis waits (default 0.5)"),
        (fleet, "--fleet-connect-timeout", "fleet.connect_timeout_s", positive, seconds,
         "the longest a new connection to Redis waits (default 5)"),
        (fleet, "--feedback-ttl", "fleet.feedback_ttl_s", integer(1), seconds,
         "with --redis: how long an answer can be labelled (default 604800, a week)"),
    )  # fmt: skip
    add(settings)
    p.add_argument("--log-level", default="warning",
                   choices=("critical", "error", "warning", "info", "debug"),
                   help="uvicorn's log level")
    p.add_argument("--shutdown-grace", type=positive, default=30.0, metavar="SECONDS",
                   help="on SIGTERM/SIGINT, how long answers in flight may finish; 2 s before "
                   "that, those still running end with a proxy_shutdown error event "
                   "(default 30)")
    p.add_argument("--no-verdict-log", action="store_true",
                   help="do not print the JSON verdict lines on stderr")
    p.set_defaults(func=func, names=names)
