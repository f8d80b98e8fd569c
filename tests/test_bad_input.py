"""Every command given bad input exits 2 with one line naming the input and the problem, shows
no traceback, and leaves the store exactly as it was (design.md §4.1)."""
from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import file_digest, kernel, run_cli, write_trace


def _bad_inputs(d: Path) -> dict[str, Path]:
    good = json.dumps({"traceEvents": [kernel("k", float(i), 0.5, corr=i) for i in range(2000)]}).encode()
    out = {
        "empty": d / "empty.json",
        "truncated_gz": d / "truncated.json.gz",
        "corrupt_gz": d / "corrupt.json.gz",
        "truncated_json": d / "truncated.json",
        "binary": d / "random.json",
        "not_json": d / "hello.json",
        "json_not_trace": d / "config.json",
        "json_list_of_numbers": d / "numbers.json",
        "trace_events_not_list": d / "events_dict.json",
        "no_events": d / "no_events.json",
        "deep_nesting": d / "deep.json",
        "deep_header": d / "deep_header.json",
        "unusable_events": d / "unusable.json",
        "malformed_inside_events": d / "broken_event.json",
        "missing": d / "does_not_exist.json.gz",
        "empty_dir": d / "empty_dir",
    }
    out["empty"].write_bytes(b"")
    out["truncated_gz"].write_bytes(gzip.compress(good)[:300])
    gz = bytearray(gzip.compress(good))
    gz[40:60] = b"\x00" * 20
    out["corrupt_gz"].write_bytes(bytes(gz))
    out["truncated_json"].write_bytes(good[: len(good) // 2])
    out["binary"].write_bytes(bytes(range(256)) * 8)
    out["not_json"].write_text("hello, this is not JSON\n")
    out["json_not_trace"].write_text('{"model": "llama", "layers": 32}')
    out["json_list_of_numbers"].write_text("[1, 2, 3]")
    out["trace_events_not_list"].write_text('{"traceEvents": {"a": 1}}')
    out["no_events"].write_text('{"traceEvents": []}')
    out["deep_nesting"].write_text('{"traceEvents": [{"ph": "X", "args": ' + "[" * 100000 + "]" * 100000 + "}]}")
    out["deep_header"].write_text('{"deviceProperties": ' + "[" * 100000 + "]" * 100000 + ', "traceEvents": []}')
    out["unusable_events"].write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": "soon", "dur": 1}]}')
    out["malformed_inside_events"].write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1, "dur": 1}, {"ph": "X" "cat": 2}]}')
    out["empty_dir"].mkdir()
    (out["empty_dir"] / "README.txt").write_text("no traces here")
    return out


CASES = [
    "empty", "truncated_gz", "corrupt_gz", "truncated_json", "binary", "not_json", "json_not_trace",
    "json_list_of_numbers", "trace_events_not_list", "no_events", "deep_nesting", "deep_header",
    "unusable_events", "malformed_inside_events", "missing", "empty_dir",
]


@pytest.fixture(scope="module")
def _populated_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with one small run, ingested once for the module (a store's creation is most of
    a test's time here); read-only: each test gets its own copy."""
    d = tmp_path_factory.mktemp("populated")
    write_trace(d / "ok.json", [kernel("k", 0.0, 1.0), kernel("k", 3.0, 1.0)])
    db = d / "store.duckdb"
    assert run_cli("ingest", d / "ok.json", "-q", "--db", db).code == 0
    assert not Path(f"{db}.wal").exists()  # the whole store is the one file copied below
    return db


@pytest.fixture
def populated_store(_populated_template: Path, db: Path) -> Path:
    """The test's own store (GPUSCOPE_DB) holding one small run: a copy of the template."""
    shutil.copyfile(_populated_template, db)
    return db


@pytest.mark.parametrize("case", CASES)
def test_bad_trace_exits_2_with_one_line_and_store_unchanged(case, tmp_path, populated_store) -> None:
    d = tmp_path / "bad"
    d.mkdir()
    bad = _bad_inputs(d)[case]
    before = file_digest(populated_store)
    for argv in (("ingest", bad), ("analyze", bad)):
        r = run_cli(*argv)
        assert r.code == 2, (argv, r.out, r.err)
        lines = r.err.strip().splitlines()
        assert len(lines) == 1, r.err
        assert bad.name in lines[0], lines[0]
        assert "Traceback" not in r.err and r.out == ""
        assert file_digest(populated_store) == before


def test_bad_file_among_good_ones_loads_nothing(tmp_path, populated_store) -> None:
    good = write_trace(tmp_path / "good.json", [kernel("k", 0.0, 1.0)])
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [')
    before = file_digest(populated_store)
    r = run_cli("ingest", good, bad)
    assert r.code == 2 and "bad.json" in r.err
    assert file_digest(populated_store) == before
    assert len(run_cli("runs", "--json").json()) == 1


def test_bad_input_never_creates_a_store(tmp_path, db) -> None:
    bad = tmp_path / "x.json"
    bad.write_text("nope")
    assert run_cli("ingest", bad).code == 2
    assert not db.exists()


@pytest.mark.parametrize("ref", ["999", "no-such-run"])
def test_unknown_run(ref, populated_store) -> None:
    before = file_digest(populated_store)
    r = run_cli("analyze", ref)
    assert r.code == 2 and ref in r.err and len(r.err.strip().splitlines()) == 1
    assert file_digest(populated_store) == before


def test_analyze_with_no_store_or_no_runs(tmp_path, db) -> None:
    r = run_cli("analyze")
    assert r.code == 2 and str(db) in r.err and "Traceback" not in r.err


def test_bad_sql_and_write_attempts(populated_store) -> None:
    before = file_digest(populated_store)
    for q in ("SELEC nonsense", "SELECT * FROM no_such_table", "DROP TABLE runs", "DELETE FROM kernels"):
        r = run_cli("sql", q)
        assert r.code == 2 and r.err.startswith("gpuscope sql: query:"), r.err
        assert len(r.err.strip().splitlines()) == 1
    assert file_digest(populated_store) == before
    assert run_cli("sql", "SELECT count(*) AS n FROM kernels", "--json").json() == [{"n": 2}]


def test_not_a_store(tmp_path, monkeypatch) -> None:
    fake = tmp_path / "fake.duckdb"
    fake.write_text("this is not a database")
    before = file_digest(fake)
    for argv in (("runs", "--db", fake), ("analyze", "--db", fake), ("sql", "SELECT 1", "--db", fake)):
        r = run_cli(*argv)
        assert r.code == 2 and "fake.duckdb" in r.err and len(r.err.strip().splitlines()) == 1, r.err
    assert file_digest(fake) == before


def test_usage_errors_exit_2(db) -> None:
    for argv in (("ingest",), ("analyze", "--top", "many"), ("frobnicate",)):
        r = run_cli(*argv)
        assert r.code == 2 and "Traceback" not in r.err


def test_abbreviated_options_are_not_guessed(db) -> None:
    # argparse would take --head as --head-dim and read 64 as a head dimension.
    r = run_cli("ceiling", "--gpu", "h100-sxm", "--params", "8B", "--dtype", "bf16", "--head", "64")
    assert r.code == 2 and "unrecognized arguments: --head 64" in r.err
    assert "--head-dim" not in r.err and len(r.err.strip().splitlines()) == 1
    r = run_cli("analyze", "--to", "3")
    assert r.code == 2 and "unrecognized arguments: --to " in r.err  # not --top


def test_real_process_shows_no_traceback(tmp_path, db) -> None:
    bad = tmp_path / "trunc.json.gz"
    bad.write_bytes(gzip.compress(b'{"traceEvents": [' + b'{"ph":"X"},' * 5000)[:200])
    p = subprocess.run([sys.executable, "-m", "gpuscope", "ingest", str(bad)], capture_output=True, text=True)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and "trunc.json.gz" in p.stderr and "Traceback" not in p.stderr


def _bad_stores(d: Path) -> dict[str, tuple[Path, str]]:
    (d / "a_dir").mkdir()
    (d / "notes.txt").write_text("my notes, not a store")
    (d / "short.bin").write_bytes(b"\x00\x01")
    return {
        "directory": (d / "a_dir", "is a directory"),
        "text_file": (d / "notes.txt", "not a DuckDB database"),
        "short_file": (d / "short.bin", "not a DuckDB database"),
        "under_a_file": (d / "notes.txt" / "store.duckdb", "cannot"),
    }


@pytest.mark.parametrize("case", ["directory", "text_file", "short_file", "under_a_file"])
@pytest.mark.parametrize("command", ["ingest", "analyze", "runs", "sql", "run"])
def test_a_db_path_that_cannot_be_a_store(case, command, tmp_path) -> None:
    trace = write_trace(tmp_path / "ok.json", [kernel("k", 0.0, 1.0)])
    path, problem = _bad_stores(tmp_path)[case]
    before = sorted((p.name, p.stat().st_size) for p in tmp_path.rglob("*"))
    argv = {"ingest": ("ingest", trace), "analyze": ("analyze", trace), "runs": ("runs",),
            "sql": ("sql", "SELECT 1"), "run": ("run", "--", sys.executable, "-c", "pass")}[command]
    r = run_cli(*argv, "--db", path) if command != "run" else run_cli("run", "--db", path, *argv[1:])
    assert r.code == 2, (r.out, r.err)
    (line,) = r.err.strip().splitlines()
    assert str(path) in line and problem in line and "Traceback" not in r.err
    assert sorted((p.name, p.stat().st_size) for p in tmp_path.rglob("*")) == before


def test_an_empty_file_is_a_new_store(tmp_path) -> None:
    # `--db "$(mktemp)"`: DuckDB refuses an existing empty file; gpuscope makes the store there.
    db = tmp_path / "tmp.XXXX"
    db.write_bytes(b"")
    assert run_cli("runs", "--db", db).out.startswith("no runs yet")
    assert run_cli("analyze", "--db", db).code == 2
    r = run_cli("ingest", write_trace(tmp_path / "ok.json", [kernel("k", 0.0, 1.0)]), "--db", db, "-q")
    assert r.code == 0, r.err
    assert [x["name"] for x in run_cli("runs", "--db", db, "--json").json()] == ["ok"]


def test_folder_of_broken_files_names_each_files_reason(tmp_path) -> None:
    import gzip as _gzip

    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "empty.json").write_text("")
    (folder / "trunc.json").write_text('{"traceEvents": [')
    (folder / "nota.json").write_text('{"a": 1}')
    (folder / "cut.json.gz").write_bytes(_gzip.compress(b'{"traceEvents": []}' * 50)[:30])
    db = tmp_path / "s.duckdb"
    r = run_cli("ingest", folder, "--db", db)
    assert r.code == 2
    (line,) = r.err.strip().splitlines()
    assert line.startswith(f"gpuscope ingest: {folder}: no usable trace: ")
    for name, why in (("empty.json", "empty file"), ("trunc.json", "truncated or malformed JSON"),
                      ("nota.json", "JSON but not a trace"), ("cut.json.gz", "truncated gzip")):
        assert f"{name} ({why}" in line, name
    assert not db.exists()


def test_a_parameter_error_is_spelled_as_the_commands_flags() -> None:
    """Code outside the CLI raises ParameterError with quantities; the CLI writes them as the
    command's flags (its FLAGS table, else --name-with-dashes), and str() keeps the quantities."""
    from gpuscope.cli import _as_flags
    from gpuscope.errors import InputError, ParameterError

    exc = ParameterError("kv_heads", "needs {layers} and a value, not {value}", {"value": "{x}"})
    assert isinstance(exc, InputError)
    assert str(exc) == "kv_heads: needs layers and a value, not {x}"
    assert _as_flags("calibrate", exc) == "--kv-heads: needs --layers and a value, not {x}"
    import gpuscope.cli.ceiling  # noqa: F401 - its FLAGS table is what the CLI uses for ceiling
    assert _as_flags("ceiling", ParameterError("num_gpus", "must be >= 1")) == "--gpus: must be >= 1"
