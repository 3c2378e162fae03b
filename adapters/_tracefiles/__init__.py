"""Trace files at scale: the columnar (Parquet) trace format beside JSONL, and the one
opener and writer of trace files, local or behind an fsspec URL.

- ``_columnar``: the Parquet schema, rows from decoded objects and back.
- ``_files``: the opener (:func:`open_trace_objects`), the writer, conversion, sha256.
- ``_digest``: the traces digest, the same for a file in any container.
"""
