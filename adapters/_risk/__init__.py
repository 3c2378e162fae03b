"""Where labels are counted: every front end's label loop.

A label (``POST /v1/liftguard/feedback`` at the proxy, the same route at LiteLLM) is
taken once for an answer the front end showed (:mod:`._feedback`, with the replies a
label can get in :mod:`._risk_replies`), counted by the certificate's risk monitor in one
process (:mod:`._risk_watch`) or across replicas through Redis (:mod:`._fleet`, the
store and its record, and :mod:`._fleet_watch`, the replica), and turned into the alarm
that stops certifying. The answer path the front ends share lives in
:mod:`adapters._serving`, which imports nothing from here.
"""
