"""``python -m gpuscope.cli``, the same as ``python -m gpuscope`` and the ``gpuscope`` command."""
import sys

from . import main

sys.exit(main())
