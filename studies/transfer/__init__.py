"""The transfer study: certificates fitted on one dataset and evaluated on another (NQ-Open
and TriviaQA), each part run with ``python -m studies.transfer.<name>``."""
