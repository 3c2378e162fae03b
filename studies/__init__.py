"""Studies: measurements of the method on data (coverage, risk, transfer), each run with
``python -m studies.<name>`` from the repository root, public imports only. Timing lives
in ``benchmarks/``."""
