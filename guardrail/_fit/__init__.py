"""Where a certificate is fitted: the recipe from labelled traces to a calibrated
:class:`~guardrail.Certificate` with a fitted statistic, and its parts. The public names are
:mod:`guardrail.fitting`'s; this package imports nothing at import, so the core's modules
that hold or stream a fitted statistic import the module they need without the recipe.

- ``_recipe``: :func:`~guardrail.fitting.fit_certificate`, the whole recipe (split, fit,
  choose, calibrate);
- ``_options``: what it is told (:class:`~guardrail.fitting.FitOptions`) and what it
  measured (:class:`~guardrail.fitting.FitReport`);
- ``_choice``: the choices made on the fitting answers alone (scopes, the statistic chosen
  by cross-validated coverage, early-block margins);
- ``_cv_coverage``: the cross-validated coverage a candidate statistic would give;
- ``_logistic``: the answer-level features and the logistic fit of a statistic;
- ``_features_batch``: the batch twin of the per-token features the fit reads;
- ``_statistic``: :class:`~guardrail.fitting.FittedStatistic`, the weights a certificate
  stores, and the feature presets;
- ``_state``: the per-answer state a :class:`~guardrail.FittedRule` streams, and the reading
  of its features from token events;
- ``_replay``: the exact replay of recorded answers through that state, the critical
  scores, the calibration on them and the early-block margins;
- ``_extrapolation``: how far a fitted statistic's features lie, on other answers, from
  the fitting answers' (the warning of ``calibrate`` and ``eval``).
"""
