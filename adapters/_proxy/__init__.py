"""The guard proxy (``liftguard serve``): private modules; the public names are in
:mod:`adapters.proxy`.

- ``_config``: :class:`ProxyConfig`, frozen and validated.
- ``_certs``: where certificates come from (a file, a store alias with hot refresh).
- ``_wire``: the OpenAI wire shapes the proxy writes (error bodies, the verdict field,
  what is stripped from a chunk).
- ``_guarded``: one answer, sans I/O: upstream chunks in, client chunks out.
- ``_upstream``: the aiohttp client and the server-sent-events decoder.
- ``_auth``: client key check and the upstream's headers.
- ``_metrics``: the Prometheus metrics of one proxy.
- ``_recording``: answers written as trace lines by a background thread.
- ``_feedback``: labels after the fact (``POST /v1/liftguard/feedback``) and the live
  risk monitor of each model entry.
- ``_app``: the starlette application.
- ``_serve``: :func:`~adapters.proxy.serve`, the application under uvicorn until a signal.
"""
