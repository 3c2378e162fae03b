"""``python -m adapters.cli``: the ``liftguard`` command line."""

import sys

from ._main import main

sys.exit(main())
