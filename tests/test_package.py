"""Packaging: the console script, ``python -m``, light imports, wheel and editable installs."""
from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import REPO

HEAVY = ("torch", "textual", "opentelemetry", "pandas", "pyarrow", "numpy", "duckdb")


def _run(code: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    import os

    e = dict(os.environ)
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, env=e)


def test_help_imports_nothing_heavy(tmp_path) -> None:
    code = (
        "import sys, json\n"
        "from gpuscope.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})), file=sys.stderr)\n"
    )
    p = _run(code, tmp_path)
    assert p.returncode == 0, p.stderr
    assert "ingest" in p.stdout and "analyze" in p.stdout
    assert json.loads(p.stderr.strip().splitlines()[-1]) == []


def test_python_dash_m_and_version(tmp_path) -> None:
    p = subprocess.run([sys.executable, "-m", "gpuscope", "--version"], cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.startswith("gpuscope ")


def test_console_script_is_installed(tmp_path) -> None:
    import shutil

    exe = shutil.which("gpuscope")
    if exe is None:
        pytest.skip("the gpuscope console script is not on PATH (package not installed with pip)")
    p = subprocess.run([exe, "--help"], cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 0 and "analyze" in p.stdout


def test_installed_layout_is_namespaced(tmp_path) -> None:
    # collectors/, analyzers/ and tui/ install under gpuscope.*, never as top-level modules that
    # would shadow modules of the programs gpuscope wraps.
    code = (
        "import importlib.util, json, gpuscope.analyzers, gpuscope.collectors, gpuscope.tui\n"
        "print(json.dumps({'analyzers': gpuscope.analyzers.__file__,\n"
        "  'top': [n for n in ('collectors', 'analyzers', 'tui') if importlib.util.find_spec(n)]}))"
    )
    p = _run(code, tmp_path)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["top"] == []
    assert Path(doc["analyzers"]).parent.name in ("analyzers",)


def test_editable_install_maps_the_top_level_folders(tmp_path) -> None:
    import gpuscope.analyzers

    where = Path(gpuscope.analyzers.__file__).resolve()
    if REPO not in where.parents:
        pytest.skip("gpuscope is not installed in editable mode from this checkout")
    assert where == REPO / "analyzers" / "__init__.py"


@pytest.mark.slow
def test_wheel_install_works(tmp_path) -> None:
    dist = tmp_path / "dist"
    p = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "--no-build-isolation", "-q", "-w", str(dist)],
        capture_output=True, text=True,
    )
    if p.returncode != 0 and "No module named" in p.stderr:
        pytest.skip(f"cannot build a wheel here: {p.stderr.strip().splitlines()[-1]}")
    assert p.returncode == 0, p.stderr
    (wheel,) = dist.glob("gpuscope-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for mod in ("gpuscope/cli/__init__.py", "gpuscope/analyzers/breakdown.py", "gpuscope/collectors/__init__.py",
                "gpuscope/tui/__init__.py"):
        assert mod in names
    assert not any(n.startswith(("analyzers/", "collectors/", "tui/", "tests/")) for n in names)
    # every module of the source tree is in the wheel (a new subpackage missing from pyproject's
    # package list would install without it)
    src = [f"gpuscope/{p.relative_to(REPO / 'gpuscope').as_posix()}" for p in (REPO / "gpuscope").rglob("*.py")]
    src += [f"gpuscope/{top}/{p.relative_to(REPO / top).as_posix()}" for top in ("analyzers", "collectors", "tui")
            for p in (REPO / top).rglob("*.py")]
    assert sorted(set(src) - set(names)) == []
    target = tmp_path / "site"
    p = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    code = ("import gpuscope, gpuscope.analyzers.breakdown as b, sys\n"
            "from gpuscope.cli import main\n"
            "print(gpuscope.__file__); print(b.__file__)\n"
            "sys.exit(main(['runs', '--json']))")
    p = _run(code, tmp_path, PYTHONPATH=str(target), GPUSCOPE_DB=str(tmp_path / "s.duckdb"))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith(str(target)) and lines[1].startswith(str(target))
    assert json.loads("\n".join(lines[2:])) == []


def test_checkout_imports_without_an_install(tmp_path) -> None:
    """`python -m gpuscope` or pytest in the repository root put the checkout's gpuscope/ first on
    sys.path, ahead of any install: its subpackages that live beside it (collectors/, analyzers/,
    tui/) must still resolve, to the checkout's files. `-S` leaves out site-packages and with it
    the editable install's import hook (the GPU machine's acceptance run had none, and every
    command failed with No module named 'gpuscope.collectors')."""
    code = ("import gpuscope.collectors, gpuscope.analyzers, gpuscope.tui, gpuscope.collectors.nvml;"
            "print(gpuscope.collectors.__file__); print(gpuscope.analyzers.__file__); print(gpuscope.tui.__file__)")
    out = subprocess.run([sys.executable, "-S", "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert [Path(p) for p in out.stdout.split()] == [REPO / top / "__init__.py" for top in ("collectors", "analyzers", "tui")]
