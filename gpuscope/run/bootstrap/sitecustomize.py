"""gpuscope's bootstrap, put first on the PYTHONPATH of programs run by ``gpuscope run``.

It chains to the ``sitecustomize`` that would have run without it, costs nothing when the
program never imports torch, and never imports torch itself. Once the program has imported
torch, a timer thread opens bounded profiler windows (delay, duration, count from
``GPUSCOPE_PROFILE``; every name shared with the wrapper is in ``_gpuscope_contract``, a copy of
``gpuscope/run/contract.py``). The PyTorch profiler records the ops of the thread that starts it, so
windows are opened and closed on the main thread: the timer sends SIGUSR2 to it and a signal
handler does the work between two bytecodes. Any failure is reported on stderr in one line
and the program runs on.
"""
import os
import sys


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    import importlib.machinery
    import importlib.util

    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def _install() -> None:
    # The contract (a copy of gpuscope/run/contract.py) sits next to this file, under the one
    # name every process uses for it.
    import _gpuscope_contract as contract

    cfg_text = os.environ.get(contract.ENV_PROFILE)
    if not cfg_text or not os.environ.get(contract.ENV_RUN_DIR):
        return
    cfg = contract.decode_profile(cfg_text)
    if not cfg["enabled"]:
        return
    if "torch" in sys.modules:  # imported by another sitecustomize / .pth
        _on_torch(cfg)
        return

    class _TorchWatcher:
        """A meta-path finder that only notices the import of ``torch``."""

        @staticmethod
        def find_spec(name, path=None, target=None):
            if name != "torch":
                return None
            sys.meta_path.remove(_TorchWatcher)
            import importlib.util

            try:
                spec = importlib.util.find_spec("torch")
            except Exception:  # let the import meet that failure as it would without gpuscope
                return None
            if spec is None or spec.loader is None:
                return spec
            loader = spec.loader
            exec_module = loader.exec_module

            def exec_and_hook(module):
                try:
                    exec_module(module)
                except BaseException as exc:
                    # torch's own import failed: the program's error, to be read as without
                    # gpuscope. Dropping this frame (a bare raise adds none) leaves importlib's
                    # frames in one piece, which Python then hides as usual. (Python 3.11 and
                    # later: 3.10's bare raise keeps the traceback it caught, frames and all.)
                    if exc.__traceback__ is not None:
                        exc.__traceback__ = exc.__traceback__.tb_next
                    raise
                try:
                    _on_torch(cfg)
                except Exception as exc:  # never harm the program
                    _report(f"profiler windows disabled: {type(exc).__name__}: {exc}")

            # this one loader only: torch's module runs, then the hook (a patched instance method)
            loader.exec_module = exec_and_hook  # type: ignore[method-assign]
            return spec

    sys.meta_path.insert(0, _TorchWatcher)


def _report(msg: str) -> None:
    try:
        os.write(2, f"gpuscope[{os.getpid()}]: {msg}\n".encode())
    except Exception:
        pass


def _on_torch(cfg: dict) -> None:
    from _gpuscope_boot import start_controller

    start_controller(cfg)


try:
    _chain()
except Exception as _exc:
    # The chained sitecustomize failed: say so in the words Python's site module uses
    # (site.execsitecustomize) and go on, so the program's stderr reads as without gpuscope.
    try:
        if sys.flags.verbose:
            sys.excepthook(*sys.exc_info())
        else:
            sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
                             f"{_exc.__class__.__name__}: {_exc}\n")
    except Exception:
        pass
try:
    _install()
except Exception as _exc:
    _report(f"bootstrap disabled: {type(_exc).__name__}: {_exc}")
