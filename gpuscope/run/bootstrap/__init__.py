"""The child side of ``gpuscope run``: what runs inside the program, and under which names.

The wrapper copies three files into the run's private bootstrap folder (0700) and puts that
folder first on the program's ``PYTHONPATH``:

- ``sitecustomize.py``: Python imports it at start-up; it chains to the program's own
  ``sitecustomize`` and, once the program imports torch, starts the profiler windows;
- ``_gpuscope_boot.py``: the profiler windows, marks and events (imported only once torch is,
  or by :mod:`gpuscope.api`);
- ``_gpuscope_contract.py``: a copy of :mod:`gpuscope.run.contract` (names of variables and files).

In the child these are top-level modules: the program may not be able to import gpuscope at
all. So that a process never holds two copies of the bootstrap's state (its open descriptors,
its window counter, its timer), every process loads them under those top-level names only:
:func:`load_child_side` is how gpuscope's own modules (:mod:`gpuscope.api`) get them. This
package's ``__init__`` is never copied and imports nothing heavy: the child imports it through
:mod:`gpuscope.api`.
"""
from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

_HERE = Path(__file__).resolve().parent

#: File name in the private bootstrap folder -> the file gpuscope ships.
CHILD_FILES = {
    "sitecustomize.py": _HERE / "sitecustomize.py",
    "_gpuscope_boot.py": _HERE / "_gpuscope_boot.py",
    "_gpuscope_contract.py": _HERE.parent / "contract.py",
}


def _load(name: str) -> ModuleType:
    """Module ``name`` from the search path (under ``gpuscope run``: the run's private copy),
    else from gpuscope's own file, registered under the same name."""
    module = sys.modules.get(name)
    if module is not None:
        return module
    import importlib
    import importlib.util

    try:
        return importlib.import_module(name)
    except Exception:
        # Not on the search path, or the run's copy is damaged (deleted, cut short, a syntax
        # error): gpuscope's own file serves, as outside a run, so `import gpuscope` never fails
        # in the program for the bootstrap's sake. No line here: the run's sitecustomize reports
        # the damage once where it meets it (the windows need the copy), and this file is no less
        # trusted than the gpuscope package the program is importing.
        pass
    spec = importlib.util.spec_from_file_location(name, CHILD_FILES[name + ".py"])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def load_child_side() -> ModuleType:
    """The bootstrap module (``_gpuscope_boot``), with the contract it imports
    (``_gpuscope_contract``), loaded once under those names in this process."""
    _load("_gpuscope_contract")  # first: the bootstrap imports it by that name
    return _load("_gpuscope_boot")
