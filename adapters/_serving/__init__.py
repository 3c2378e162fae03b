"""The serving core: what every server front end (the guard proxy, the LiteLLM guardrail)
shares, with no server of its own: how a client's request becomes the upstream request.

The front ends keep only what is their own: HTTP for the proxy, LiteLLM's hooks for the
guardrail.
"""
