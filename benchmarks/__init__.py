"""Timing scripts: what the library costs (per token, per request, per load), each run
with ``python -m benchmarks.<name>`` from the repository root. Measurements of the method
on data live in ``studies/``."""
