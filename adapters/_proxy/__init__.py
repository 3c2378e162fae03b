"""The guard proxy (``liftguard serve``): private modules; the public names are in
:mod:`adapters.proxy`. It keeps only what is HTTP's: the answer path it shares with the
LiteLLM guardrail is :mod:`adapters._serving`, the label loop :mod:`adapters._risk`.

- ``_config``: :class:`ProxyConfig` and its groups (:class:`Limits`, :class:`Recording`;
  the fleet's is :mod:`adapters._risk`'s ``FleetSettings``), frozen and validated.
- ``_app``: the starlette application: routes, lifecycle, the concurrency cap.
- ``_auth``: the client key check and the upstream's headers.
- ``_prepared``: a client's chat body made the guarded upstream request.
- ``_upstream``: the aiohttp client and the server-sent-events decoder; ``_body``: an
  upstream body read in parts, each read ended after a stall.
- ``_answer``: one answer as the proxy keeps it (:class:`ProxyAnswer`), sans I/O.
- ``_relay_loop``: :class:`RelayLoop`, the upstream's chunks through the answer to the
  client.
- ``_replies``: what is sent back (verdict headers, the assembled whole answer, the
  refusal and the in-stream error of a blocked one, the upstream's own error).
- ``_feedback``: the proxy's risk watch (its model entries, settings and metrics).
- ``_recording``, ``_record_line``, ``_spool``, ``_publish``: answers recorded as trace
  lines off the request path, and published whole to a directory or object storage.
- ``_serve``: :func:`~adapters.proxy.serve`, the application under uvicorn until a signal.
"""
