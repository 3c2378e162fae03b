"""The provider-neutral guard step: the stream step, the checks of a rule against a
stream, the one settings check, token ids, the OpenAI chunk format every path reads."""
