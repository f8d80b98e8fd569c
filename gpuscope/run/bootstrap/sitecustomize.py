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

            spec = importlib.util.find_spec("torch")
            if spec is None or spec.loader is None:
                return spec
            loader = spec.loader
            exec_module = loader.exec_module

            def exec_and_hook(module):
                exec_module(module)
                try:
                    _on_torch(cfg)
                except Exception as exc:  # never harm the program
                    _report(f"profiler windows disabled: {type(exc).__name__}: {exc}")

            loader.exec_module = exec_and_hook
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
except Exception as _exc:  # the chained sitecustomize failed: as Python would, say so and go on
    _report(f"the program's own sitecustomize failed: {type(_exc).__name__}: {_exc}")
try:
    _install()
except Exception as _exc:
    _report(f"bootstrap disabled: {type(_exc).__name__}: {_exc}")
