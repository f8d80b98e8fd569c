"""Imported by ``slow_import.py``: an import that takes ``$GPUSCOPE_SLOW_IMPORT_S`` seconds
(default 5), importing ``torch._dynamo`` half way, so that the importing thread holds the
import lock, inside a torch submodule's import for a while, when a profiler window falls due."""
from __future__ import annotations

import os
import time

_HALF_S = float(os.environ.get("GPUSCOPE_SLOW_IMPORT_S", "5")) / 2
time.sleep(_HALF_S)
import torch._dynamo  # noqa: E402,F401  (what torch.profiler's start imports: the H100 run's circular import)

time.sleep(_HALF_S)
