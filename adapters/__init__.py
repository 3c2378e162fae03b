"""Provider adapters for liftguard (OpenAI, Anthropic, LangChain, local models).

Adapters depend on the :mod:`guardrail` core, never the reverse. Vendor SDKs are
optional extras, imported inside the adapter that needs them.

Note: the PyPI package of AdapterHub is also imported as ``adapters``; install
liftguard in an environment without it.
"""
