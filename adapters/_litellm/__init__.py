"""The LiteLLM guardrail: LiteLLM's hooks around the serving core."""
