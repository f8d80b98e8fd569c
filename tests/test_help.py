"""Help and small texts a careful reader checks: commands in the README's order, every command
described, defaults stated, the host row of `devices` read once."""
from __future__ import annotations

import re
from pathlib import Path

from conftest import run_cli

README = Path(__file__).resolve().parents[1] / "README.md"


def test_help_lists_commands_in_the_readmes_order() -> None:
    readme = [m.group(1) for m in re.finditer(r"^\| `gpuscope (\w+)", README.read_text(), re.M)]
    out = run_cli("--help").out
    listed = [m.group(1) for m in re.finditer(r"^    (\w+)", out, re.M)]
    assert listed == readme


def test_every_command_has_a_description() -> None:
    from gpuscope.cli import HELP_ORDER

    for cmd in HELP_ORDER:
        out = run_cli(cmd, "--help").out
        paragraphs = out.split("\n\n")
        assert len(paragraphs) > 2 and not paragraphs[1].startswith(("positional", "options")), cmd
    roof_help = run_cli("compare", "--help").out.split("  --roof")[1]
    assert "(default)" in " ".join(roof_help.split())[:200]


def test_devices_host_line_names_the_cpu_once(monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", None)
    out = run_cli("devices").out
    host = next(ln for ln in out.splitlines() if ln.startswith("host "))
    assert not host.startswith("host  host host")


def test_roof_measured_without_a_calibration_says_it_fell_back(db, tmp_path) -> None:
    from conftest import kernel, write_trace

    trace = write_trace(tmp_path / "t.json", [kernel("gemm_kernel", float(i * 10), 5.0) for i in range(5)],
                        deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85520809984,
                                           "computeMajor": 9, "computeMinor": 0, "numSms": 132}])
    assert run_cli("ingest", trace, "-q").code == 0
    text = run_cli("analyze", "--roof", "measured").out
    line = next(ln for ln in text.splitlines() if "judged against" in ln)
    assert "spec roof" in line and "--roof measured: no calibration" in line


def test_help_describes_export_by_its_headline_formats() -> None:
    out = " ".join(run_cli("--help").out.split())
    line = out[out.index(" export ", out.index("COMMAND")):]
    line = line[: line.index(" report ")]
    for fmt in ("perfetto", "chrome", "parquet", "csv"):
        assert fmt in line, line
    assert line.index("timeline") < line.index("parquet")  # the timelines are its headline


def test_a_mistyped_command_gets_the_nearest_one() -> None:
    r = run_cli("anlyze")
    assert r.code == 2 and r.err.count("\n") == 1, r.err
    assert "'anlyze'" in r.err and "did you mean 'analyze'?" in r.err
    r = run_cli("xyzzy")  # nothing near: the list of commands, as before
    assert r.code == 2 and "did you mean" not in r.err and "'analyze'" in r.err


def test_export_with_an_unknown_format_lists_every_format(db, tmp_path: Path) -> None:
    out = tmp_path / "x"
    r = run_cli("export", "--db", str(db), "--format", "xlsx", "--out", str(out))
    assert r.code == 2 and r.err.count("\n") == 1, r.err
    assert "'xlsx'" in r.err and "perfetto, chrome, parquet or csv" in r.err
    assert not out.exists()
