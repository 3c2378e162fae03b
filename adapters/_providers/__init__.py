"""Provider integrations: OpenAI, Anthropic (with its local scorer) and LangChain."""
