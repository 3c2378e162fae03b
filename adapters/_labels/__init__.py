"""Labels for recorded answers: an LLM judge, and checks that run answers (in a sandbox)."""
