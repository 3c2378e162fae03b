"""Local models: llama.cpp models, chat templates, the packaged GGUFs, the local server and
the prompt-free skeleton."""
