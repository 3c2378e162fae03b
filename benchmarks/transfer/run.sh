#!/usr/bin/env bash
# The transfer benchmark; see run.py (usage: run.sh SHARED_TRACES_DIR NQ_TRACES_DIR [options]).
exec python "$(dirname "$0")/run.py" "$@"
