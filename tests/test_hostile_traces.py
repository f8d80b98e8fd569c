"""Hostile traces (issue 27, class 7, and non-regular files as traces from class 1): header and
event fields out of range or of the wrong type, headers that cross the first read or are huge,
events over DuckDB's object size, FIFOs / devices / sockets / pipes given as traces or found in a
trace directory, float arguments that are not finite, and file names with control characters.

Every case ends in exit 0 (a valid, readable trace) or exit 2 with exactly one stderr line, no
internal error, no traceback, never a hang, and a store left as it was on failure."""
from __future__ import annotations

import copy
import gzip
import json
import math
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import REPO, cpu_op, file_digest, kernel, run_cli, runtime
from gpuscope.ingest import read

SETTINGS = settings(max_examples=20, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

BASE_EVENTS = [kernel("k", 10, 2, corr=1), runtime("cudaLaunchKernel", 9, 1, corr=1, ext=4),
               cpu_op("aten::mm", 8, 5, ext=4)]


def _text(header: dict[str, Any], events: list[Any] | None = None) -> str:
    doc = dict(header)
    doc["traceEvents"] = BASE_EVENTS if events is None else events
    return json.dumps(doc)  # (NaN / Infinity as Python writes them: the header parser takes them)


@pytest.fixture(scope="module")
def seeded_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding one run, copied by each test that checks a failure leaves it as it was."""
    d = tmp_path_factory.mktemp("seed")
    trace = d / "seed.json"
    trace.write_text(_text({}))
    store = d / "store.duckdb"
    assert run_cli("ingest", "-q", "--db", store, trace).code == 0
    return store


def _check(res: Any, store: Path | None = None, before: str | None = None) -> None:
    """Exit 0, or exit 2 with one line (and the store unchanged); never an internal error."""
    assert res.code in (0, 2), (res.code, res.err)
    assert "internal error" not in res.err and "Traceback" not in res.err, res.err
    if res.code == 2:
        assert len(res.err.strip().splitlines()) == 1, res.err
        if store is not None:
            assert file_digest(store) == before


def _ingest(tmp_path: Path, text: str | bytes, seeded: Path, name: str = "t.json") -> Any:
    store = tmp_path / "store.duckdb"
    if not store.exists():
        shutil.copy(seeded, store)
    before = file_digest(store)
    trace = tmp_path / name
    trace.write_bytes(text.encode() if isinstance(text, str) else text)
    res = run_cli("ingest", "-q", "--db", store, trace)
    _check(res, store, before)
    return res


def _traces_row(store: Path) -> tuple[Any, ...]:
    from gpuscope import store as st_

    con = st_.connect(store, read_only=True)
    try:
        return con.execute("SELECT rank, base_time_ns, metadata FROM traces ORDER BY run_id DESC LIMIT 1").fetchone()
    finally:
        con.close()


# ---- 1. header fields out of range or of the wrong type ---------------------------------------

BAD_NUMBERS = ["2**63", "2**70", "-1", "-2**63-1", "1e30", "-1e300", "NaN", "Infinity", "-Infinity", "1.5", "true",
               '"1700000000000000000"', '"NaN"', "[1]", "{}"]


def _lit(v: str) -> str:
    return str(eval(v)) if "**" in v else v  # noqa: S307 (the table's own integers)


@pytest.mark.parametrize("value", BAD_NUMBERS)
def test_base_time_out_of_range_is_ignored_with_a_note(tmp_path: Path, seeded_store: Path, value: str) -> None:
    text = _text({"schemaVersion": 1, "baseTimeNanoseconds": "@@"}).replace('"@@"', _lit(value))
    res = _ingest(tmp_path, text, seeded_store)
    assert res.code == 0
    _rank, base, meta = _traces_row(tmp_path / "store.duckdb")
    assert base == 0
    json.loads(meta)  # strict JSON, NaN and all
    assert "baseTimeNanoseconds" in res.out and "ignored" in res.out, res.out


@pytest.mark.parametrize("value", BAD_NUMBERS + ["2**31", "-2**40"])
def test_rank_out_of_range_is_ignored_with_a_note(tmp_path: Path, seeded_store: Path, value: str) -> None:
    text = _text({"distributedInfo": {"rank": "@@", "world_size": 2}}).replace('"@@"', _lit(value))
    res = _ingest(tmp_path, text, seeded_store)
    assert res.code == 0
    assert _traces_row(tmp_path / "store.duckdb")[0] is None
    assert "distributedInfo.rank" in res.out, res.out


def test_a_base_time_that_overflows_the_events_times_is_ignored(tmp_path: Path, seeded_store: Path) -> None:
    events = copy.deepcopy(BASE_EVENTS)
    events[0]["ts"] = 4.5e15  # µs: within range alone, past 2^62 ns with the base added
    res = _ingest(tmp_path, _text({"baseTimeNanoseconds": 4 * 10**18}, events), seeded_store)
    assert res.code == 0 and "takes the trace's times past" in res.out, res.out


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
HEADER_PATHS = [("baseTimeNanoseconds",), ("distributedInfo",), ("distributedInfo", "rank"),
                ("distributedInfo", "world_size"), ("deviceProperties",), ("deviceProperties", 0),
                ("deviceProperties", 0, "id"), ("deviceProperties", 0, "name"),
                ("deviceProperties", 0, "totalGlobalMem"), ("deviceProperties", 0, "computeMajor"),
                ("deviceProperties", 0, "computeMinor"), ("deviceProperties", 0, "numSms"),
                ("deviceProperties", 0, "warpSize"), ("schemaVersion",), ("traceName",), ("displayTimeUnit",)]


def _header() -> dict[str, Any]:
    return {"schemaVersion": 1, "baseTimeNanoseconds": 1_700_000_000_000_000_000,
            "distributedInfo": {"rank": 0, "world_size": 1, "backend": "nccl"},
            "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85_000_000_000,
                                  "computeMajor": 9, "computeMinor": 0, "numSms": 132, "warpSize": 32}]}


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> None:
    for p in path[:-1]:
        doc = doc[p]
    doc[path[-1]] = value


HEADER_VALUES = st.sampled_from([2**63, 2**70, -(2**40), -1, 1e30, 1e300, math.inf, -math.inf, math.nan, 1.5, "1e18",
                                 "²", "9" * 5000, "\ud800", "a\udcffb", True, None, [1], {"0": {}}, {"²": {"name": "x"}}]) | JSON_VALUES


@SETTINGS
@given(path=st.sampled_from(HEADER_PATHS), value=HEADER_VALUES, after=st.booleans())
def test_header_mutations_never_reach_an_internal_error(tmp_path: Path, seeded_store: Path,
                                                        path: tuple[Any, ...], value: Any, after: bool) -> None:
    header = _header()
    _set(header, path, value)
    if after:  # Kineto writes some keys after the events: the same fields read from the tail
        text = json.dumps({"traceEvents": BASE_EVENTS, **header})
    else:
        text = _text(header)
    _ingest(tmp_path, text, seeded_store)


# ---- 1b. event fields ---------------------------------------------------------------------------

EVENT_FIELDS = ["ts", "dur", "pid", "tid", "ph", "cat", "name", "args", "args.correlation", "args.External id",
                "args.external id", "args.device", "args.stream", "args.grid", "args.block", "args.bytes",
                "args.registers per thread", "args.shared memory", "args.Sequence number"]
EVENT_VALUES = st.sampled_from([2**63, -(2**63) - 1, 2**64, 2**70, 10**300, 1e300, -1e300, 9e15, 9.2e15, 9.3e15,
                                -1.2e15, 1.2e15, -5, 0, "200", "", "x" * 40, True, False, None, [], [1, 2**70], {},
                                1.5]) | JSON_VALUES


@pytest.mark.parametrize("field", ["ts", "dur"])
@pytest.mark.parametrize("value", [2**63, 1e300, -1e300, 9.3e15, -1.2e15, 1e18])
def test_times_out_of_range_skip_the_event_not_the_trace(tmp_path: Path, seeded_store: Path, field: str,
                                                         value: Any) -> None:
    events = copy.deepcopy(BASE_EVENTS)
    events[0][field] = value
    res = _ingest(tmp_path, _text({}, events), seeded_store)
    assert res.code == 0, res.err
    assert "out of range" in res.out or (field == "dur" and value < 0 and "negative dur" in res.out), res.out


@settings(SETTINGS, max_examples=30)
@given(index=st.integers(0, 2), field=st.sampled_from(["ts", "dur", *EVENT_FIELDS]), value=EVENT_VALUES,
       base=st.sampled_from([1_700_000_000_000_000_000, 4 * 10**18, None, 0]))
def test_event_mutations_never_reach_an_internal_error(tmp_path: Path, seeded_store: Path, index: int, field: str,
                                                       value: Any, base: int | None) -> None:
    events = copy.deepcopy(BASE_EVENTS)
    target, key = events[index], field
    if field.startswith("args."):
        target, key = target["args"], field[5:]
    target[key] = value
    _ingest(tmp_path, _text({} if base is None else {"baseTimeNanoseconds": base}, events), seeded_store)


def test_analyze_reads_a_run_of_extreme_times(tmp_path: Path, seeded_store: Path) -> None:
    events = copy.deepcopy(BASE_EVENTS)
    events[0].update(ts=4.6e15 - 1, dur=1.15e15)  # the largest start and duration kept
    events[2].update(ts=-1.15e15, dur=1.15e15)
    store = tmp_path / "store.duckdb"
    assert _ingest(tmp_path, _text({}, events), seeded_store).code == 0
    res = run_cli("analyze", "--db", store, "--json")
    _check(res)
    assert res.code == 0, res.err


# ---- 2. valid JSON that was refused: a header across the first read, large events ------------

@SETTINGS
@given(offset=st.integers(-40, 40), filler=st.sampled_from(["y", "\u00e9", "\u20ac", "\U0001f600", '\\"', "\\u00e9", "\\\\"]),
       shape=st.sampled_from(["string", "key", "array", "object"]))
def test_a_header_value_across_the_first_read_is_read(tmp_path: Path, offset: int, filler: str, shape: str) -> None:
    n = (read.CHUNK_BYTES + offset * 7) // max(1, len(filler.encode()))
    long = filler * n
    if shape == "string":
        head = '{"traceName": "%s", ' % long
    elif shape == "key":
        head = '{"%s": 1, ' % long
    elif shape == "array":
        head = '{"a": ["%s", "%s"], ' % (filler * (n // 2), long)
    else:
        head = '{"o": {"x": "%s", "y": [1, 2.5e3, true, null]}, ' % long
    text = head + '"traceEvents": ' + json.dumps(BASE_EVENTS) + "}"
    expected = json.loads(text)
    path = tmp_path / "h.json"
    path.write_text(text, encoding="utf-8")
    spooled = read.spool_events(path, tmp_path)
    del expected["traceEvents"]
    assert spooled.header == expected
    assert json.loads(spooled.spool.read_text()) == BASE_EVENTS


def test_a_header_string_across_the_first_read_through_the_cli(tmp_path: Path, seeded_store: Path) -> None:
    text = '{"traceName": "%s", "traceEvents": %s}' % ("z" * (read.CHUNK_BYTES + 3), json.dumps(BASE_EVENTS))
    assert _ingest(tmp_path, text, seeded_store).code == 0


def test_a_truncated_or_malformed_header_is_still_named(tmp_path: Path, seeded_store: Path) -> None:
    long = "q" * (read.CHUNK_BYTES * 2)
    for text, words in [('{"traceName": "%s' % long, "truncated"),
                        ('{"traceName": "%s" "x": 1, "traceEvents": []}' % long, "malformed JSON in the trace header"),
                        ('{"a": [%s tru' % ("1," * read.CHUNK_BYTES), "truncated")]:
        res = _ingest(tmp_path, text, seeded_store)
        assert res.code == 2 and words in res.err, res.err


def test_a_huge_header_is_refused_in_one_line_with_bounded_work(tmp_path: Path, seeded_store: Path) -> None:
    # a 6 MB array before traceEvents in a few KB of gzip (the 60 MB one of the issue, scaled)
    big = "[" + ",".join(["0"] * 3_000_000) + "]"
    data = gzip.compress(('{"junk": %s, "traceEvents": %s}' % (big, json.dumps(BASE_EVENTS))).encode())
    res = _ingest(tmp_path, data, seeded_store, name="big.json.gz")
    assert res.code == 2 and f"over {read.MAX_HEADER_BYTES >> 20} MiB" in res.err, res.err
    # just under the limit: read, the header decoded a few times, not once per MiB read
    n = (read.MAX_HEADER_BYTES - 4096) // 2
    path = tmp_path / "ok.json"
    path.write_text('{"junk": [%s], "traceEvents": %s}' % (",".join(["0"] * n), json.dumps(BASE_EVENTS)))
    spooled = read.spool_events(path, tmp_path)
    assert len(spooled.header["junk"]) == n
    assert spooled.header_decodes <= 2 * (read.MAX_HEADER_BYTES // read.CHUNK_BYTES).bit_length() + 2


class _CountingDecoder(json.JSONDecoder):
    decoded = 0

    def raw_decode(self, s: str, idx: int = 0) -> tuple[Any, int]:  # type: ignore[override]
        try:
            value, end = super().raw_decode(s, idx)
        except json.JSONDecodeError as exc:
            _CountingDecoder.decoded += max(0, exc.pos - idx)
            raise
        _CountingDecoder.decoded += end - idx
        return value, end


@pytest.mark.parametrize("candidates", [200, 2000])
def test_keys_after_the_events_are_decoded_about_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      candidates: int) -> None:
    # thousands of "]" that might close traceEvents, each followed by the same large value
    inner = ", ".join(f'"a{i}": [{{}}]' for i in range(candidates))
    big = "[" + ",".join(["0"] * 100_000) + "]"
    text = '{"traceEvents": %s, "x": {%s, "big": %s}, "traceName": "t"}' % (json.dumps(BASE_EVENTS), inner, big)
    path = tmp_path / "tail.json"
    path.write_text(text)
    monkeypatch.setattr(read, "_DECODER", _CountingDecoder())
    _CountingDecoder.decoded = 0
    spooled = read.spool_events(path, tmp_path)
    assert spooled.header["traceName"] == "t" and len(spooled.header["x"]) == candidates + 1
    assert _CountingDecoder.decoded <= 4 * len(text), (_CountingDecoder.decoded, len(text))


def test_an_event_over_duckdbs_object_size_is_read_or_refused_in_words(tmp_path: Path, seeded_store: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuscope.ingest import parse

    events = copy.deepcopy(BASE_EVENTS)
    events[0]["args"]["junk"] = "j" * (40 << 20)  # 40 MiB: over DuckDB's 16 MiB (its buffer takes 32)
    text = _text({}, events)
    res = _ingest(tmp_path, text, seeded_store)
    assert res.code == 0, res.err
    monkeypatch.setattr(parse, "MAX_EVENT_BYTES", parse.EVENT_BYTES)
    res = _ingest(tmp_path, text, seeded_store, name="again.json")
    assert res.code == 2 and "an event is over 16 MiB" in res.err and "malformed" not in res.err, res.err


# ---- 3. non-regular files as traces ------------------------------------------------------------

def _cli(args: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    """gpuscope in a process of its own: a FIFO read would block, and the timeout catches that."""
    return subprocess.run([sys.executable, "-m", "gpuscope", *args], capture_output=True, text=True, timeout=60,
                          cwd=REPO, **kw)


def _refused(p: subprocess.CompletedProcess[str], words: str) -> None:
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "internal error" not in lines[0], p.stderr


def _special(tmp_path: Path, kind: str, name: str = "x.json") -> Path:
    path = tmp_path / name
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
    elif kind == "chardev":
        os.symlink("/dev/null", path)
    elif kind == "dir-link":
        os.symlink(tmp_path, path)
    return path


@pytest.mark.parametrize("kind,words", [("fifo", "FIFO"), ("socket", "socket"), ("chardev", "character device")])
@pytest.mark.parametrize("command", ["ingest", "analyze"])
def test_a_non_regular_trace_is_refused_without_blocking(tmp_path: Path, seeded_store: Path, kind: str, words: str,
                                                        command: str) -> None:
    store = tmp_path / "store.duckdb"
    shutil.copy(seeded_store, store)
    before = file_digest(store)
    path = _special(tmp_path, kind)
    _refused(_cli([command, "--db", str(store), str(path)]), words)
    assert file_digest(store) == before


@pytest.mark.parametrize("path", ["/dev/stdin", "/proc/self/fd/0", "/dev/fd/0"])
def test_stdin_as_a_pipe_is_refused_and_as_a_file_is_read(tmp_path: Path, seeded_store: Path, path: str) -> None:
    if not os.path.exists(path):
        pytest.skip(f"{path} does not exist here")
    store = tmp_path / "store.duckdb"
    shutil.copy(seeded_store, store)
    # a pipe that is never closed: reading it would wait forever
    r, w = os.pipe()
    try:
        _refused(_cli(["ingest", "--db", str(store), path], stdin=r), "FIFO or pipe")
    finally:
        os.close(r)
        os.close(w)
    trace = tmp_path / "t.json"
    trace.write_text(_text({}))
    with open(trace, "rb") as f:  # stdin redirected from a regular file: a trace like any other
        p = _cli(["ingest", "-q", "--db", str(store), path], stdin=f)
    assert p.returncode == 0, p.stderr


def test_a_pipe_by_its_proc_fd_is_refused(tmp_path: Path) -> None:
    r, w = os.pipe()
    try:
        p = _cli(["ingest", "--db", str(tmp_path / "s.duckdb"), f"/proc/self/fd/{r}"], pass_fds=(r,))
        if "no such file" in p.stderr:
            pytest.skip("no /proc here")
        _refused(p, "FIFO or pipe")
    finally:
        os.close(r)
        os.close(w)


def test_a_directory_walk_skips_and_names_non_regular_entries(tmp_path: Path) -> None:
    d = tmp_path / "traces"
    (d / "sub").mkdir(parents=True)
    (d / "rank0.json").write_text(_text({}))
    _special(d, "fifo", "rank1.json")
    _special(d / "sub", "socket", "rank2.json")
    _special(d, "chardev", "rank3.json.gz")
    _special(d / "sub", "fifo", "bad\nname\x1b[2J.json")
    p = _cli(["ingest", "--db", str(tmp_path / "s.duckdb"), str(d)])
    assert p.returncode == 0, p.stderr
    assert "left out what is not a regular file" in p.stdout
    for name in ("rank1.json", "rank2.json", "rank3.json.gz", "bad\\x0aname\\x1b[2J.json"):
        assert name in p.stdout, p.stdout
    assert "\x1b" not in p.stdout
    # a directory of nothing but FIFOs: refused, not a hang
    only = tmp_path / "only"
    only.mkdir()
    _special(only, "fifo", "a.json")
    _refused(_cli(["ingest", "--db", str(tmp_path / "s.duckdb"), str(only)]), "no trace files")


def test_open_regular_never_blocks_on_a_fifo_swapped_in(tmp_path: Path) -> None:
    path = _special(tmp_path, "fifo")
    p = subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; from gpuscope.ingest import read\n"
                        "try:\n read.open_regular(Path(sys.argv[1]))\nexcept Exception as e: print(e)", str(path)],
                       capture_output=True, text=True, timeout=60, cwd=REPO)
    assert "FIFO" in p.stdout, (p.stdout, p.stderr)


# ---- 4. float arguments that are not finite ----------------------------------------------------

def _float_options() -> list[tuple[str, str]]:
    """Every option of every command that takes a number with a fraction (a bare ``float`` too)."""
    import argparse

    from gpuscope.cli import build_parser

    found = []
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in sub.choices.items():
        for action in parser._actions:
            if action.option_strings and (action.type is float
                                          or getattr(action.type, "__name__", "").endswith("_float")):
                found.append((name, action.option_strings[-1]))
    return found


FLOAT_OPTIONS = _float_options()


def test_the_float_options_are_the_ones_expected() -> None:
    names = {f"{c} {o}" for c, o in FLOAT_OPTIONS}
    for expected in ("run --profile-delay", "run --profile-duration", "run --profile-interval", "run --hz",
                     "monitor --interval", "monitor --seconds", "monitor --retention", "record --seconds",
                     "record --interval", "tui --interval", "export --from", "export --to", "calibrate --seconds",
                     "ingest --max-inflate-ratio"):
        assert expected in names, (expected, sorted(names))


@pytest.mark.parametrize("command,option", FLOAT_OPTIONS)
@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "Infinity", "1e999", "-1e999", "x"])
def test_float_options_refuse_values_that_are_not_finite(command: str, option: str, value: str) -> None:
    res = run_cli(command, f"{option}={value}")
    assert res.code == 2, (res.code, res.err)
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and option in lines[0] and "internal error" not in lines[0], res.err


def test_float_options_keep_their_meaning() -> None:
    from gpuscope.cli import build_parser

    args = build_parser().parse_args(["run", "--profile-delay", "0", "--profile-duration", "2.5", "--", "true"])
    assert (args.profile_delay, args.profile_duration, args.hz) == (0.0, 2.5, 10.0)
    args = build_parser().parse_args(["export", "1", "--format", "chrome", "--out", "x.json", "--from", "1.5", "--to", "3"])
    assert (args.from_s, args.to_s) == (1.5, 3.0)
    for bad in (["run", "--profile-delay", "-1"], ["run", "--hz", "0"], ["record", "--seconds", "0", "--out", "x"]):
        assert run_cli(*bad).code == 2


# ---- 5. file names in messages ----------------------------------------------------------------

NAMES = ["new\nline.json", "esc\x1b]0;TITLE\x07.json", "csi\x9b31m.json", "bidi\u202egnp.json", "tab\tcr\r.json",
         "del\x7f.json"]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("content", [b"not json", b'{"traceEvents": [', b"\x1f\x8b broken gzip", b'{"a": 1}'])
def test_messages_name_files_on_one_visible_line(tmp_path: Path, seeded_store: Path, name: str, content: bytes) -> None:
    res = _ingest(tmp_path, content, seeded_store, name=name)
    assert res.code == 2
    line = res.err.strip()
    assert "\n" not in line and "\r" not in line and not any(c in line for c in "\x1b\x07\x9b\u202e\x7f"), repr(line)
    assert "\\x" in line or "\\u" in line, line


@pytest.mark.parametrize("name", NAMES)
def test_a_missing_or_special_path_is_named_visibly(tmp_path: Path, name: str) -> None:
    res = run_cli("ingest", "--db", tmp_path / "s.duckdb", tmp_path / name)
    assert res.code == 2 and "no such file" in res.err
    assert len(res.err.strip().splitlines()) == 1 and "\x1b" not in res.err and "\x9b" not in res.err, repr(res.err)
    p = _cli(["ingest", "--db", str(tmp_path / "s.duckdb"), str(_special(tmp_path, "fifo", name))])
    _refused(p, "FIFO")
    assert "\x1b" not in p.stderr and "\x9b" not in p.stderr


def test_non_finite_numbers_in_the_header_are_stored_as_strict_json(tmp_path: Path, seeded_store: Path) -> None:
    header = _header()
    header["deviceProperties"][0]["totalGlobalMem"] = math.nan
    header["extra"] = {"x": math.inf, "lone": "a\ud800b"}  # (a surrogate JSON may escape, UTF-8 may not hold)
    header["deviceProperties"][0]["name"] = "GPU \udcff"
    res = _ingest(tmp_path, _text(header), seeded_store)
    assert res.code == 0, res.err
    meta = json.loads(_traces_row(tmp_path / "store.duckdb")[2], parse_constant=lambda c: pytest.fail(c))
    assert meta["extra"] == {"x": None, "lone": "a\ufffdb"}
    for command in (["analyze", "--db", tmp_path / "store.duckdb"],
                    ["export", "--db", tmp_path / "store.duckdb", "--format", "chrome", "--out", tmp_path / "o.json"]):
        _check(run_cli(*command))
