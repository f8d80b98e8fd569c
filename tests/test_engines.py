"""The engines' own profilers (vLLM, SGLang) under ``gpuscope run``: recognising a server from
its command line and sockets, its profiler endpoints (bounded, local only), the child's
environment, and what the engines write into the run (docs/run.md, "Engines' own profilers")."""
from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import REPO
from gpuscope.run import contract
from gpuscope.run.engines import (MAX_RESPONSE_BYTES, EngineEndpoint, EngineError, EngineRefused, EngineTimeout,
                                  EngineUnreachable, engine_trace_notes, find_engine, parse_command, trace_pid)

PY = sys.executable
FIXTURE_TRACE = REPO / "fixtures" / "traces" / "cpu_tiny_llm.pt.trace.json.gz"


# -- the command line ----------------------------------------------------------------------------

@pytest.mark.parametrize("command, kind, port, host", [
    (["vllm", "serve", "meta-llama/Llama-3.1-8B"], "vllm", 8000, "127.0.0.1"),
    (["/opt/venv/bin/vllm", "serve", "m", "--port", "9001"], "vllm", 9001, "127.0.0.1"),
    (["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "--port=8100", "--host", "127.0.0.1"],
     "vllm", 8100, "127.0.0.1"),
    (["python", "-m", "sglang.launch_server", "--model-path", "m"], "sglang", 30000, "127.0.0.1"),
    (["env", "CUDA_VISIBLE_DEVICES=0", "python", "-m", "sglang.launch_server", "--port", "31000", "--host", "0.0.0.0"],
     "sglang", 31000, "127.0.0.1"),
    (["bash", "-c", "HF_HOME=/x exec vllm serve m --port 8200 --host ::"], "vllm", 8200, "::1"),
])
def test_an_engine_server_is_found_from_its_command_line(command: list[str], kind: str, port: int, host: str) -> None:
    # no process of the run listens yet (pids empty): the command line alone says where
    ep = find_engine(command, [])
    assert ep is not None and (ep.kind, ep.port, ep.host, ep.pid) == (kind, port, host, None)


def test_commands_that_start_no_engine_or_serve_elsewhere_give_none() -> None:
    assert find_engine(["python", "app.py", "--port", "8000"], []) is None
    assert find_engine(["vllm", "bench", "serve", "--port", "8000"], []) is None
    assert parse_command(["python", "-c", "import vllm"]) is None
    # a server bound to an address that is not this machine's (TEST-NET-3): never contacted
    assert find_engine(["vllm", "serve", "m", "--host", "203.0.113.7"], []) is None
    with pytest.raises(ValueError):
        EngineEndpoint("vllm", "203.0.113.7", 8000)


def test_vllm_on_a_unix_socket() -> None:
    ep = find_engine(["vllm", "serve", "m", "--uds", "/tmp/vllm.sock", "--port", "1"], [])
    assert ep is not None and ep.uds == "/tmp/vllm.sock" and ep.url == "http+unix:///tmp/vllm.sock"


# -- a fake engine server ----------------------------------------------------------------------

class _Recorder(BaseHTTPRequestHandler):
    """Answers /start_profile and /stop_profile as an engine would, recording each request."""

    got: list[tuple[str, bytes]]
    answers: dict[str, tuple[int, dict[str, str], bytes]]

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.got.append((self.path, body))  # type: ignore[attr-defined]
        status, headers, text = self.server.answers.get(  # type: ignore[attr-defined]
            self.path, (200, {}, b'{"message": "ok", "success": true}'))
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def fake_engine(answers: dict[str, tuple[int, dict[str, str], bytes]] | None = None) -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.got = []  # type: ignore[attr-defined]
    server.answers = answers or {}  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_a_listening_socket_of_the_run_is_found_and_the_profiler_driven() -> None:
    with fake_engine() as server:
        port = server.server_address[1]
        # the port on the command line, seen listening in this very process (psutil)
        ep = find_engine(["python", "-m", "sglang.launch_server", "--port", str(port)], [os.getpid()])
        assert ep is not None and ep.port == port and ep.pid == os.getpid() and ep.url == f"http://127.0.0.1:{port}"
        # no --port: nothing of ours on the default 30000, so the tree's own listening port is taken
        ep2 = find_engine(["python", "-m", "sglang.launch_server"], [os.getpid()])
        assert ep2 is not None and ep2.port == port and ep2.pid == os.getpid()
        ep.start_profile(record_shapes=True, output_dir="/run/traces", num_steps=5, timeout_s=30)
        ep.stop_profile(timeout_s=30)
        vllm = EngineEndpoint("vllm", "127.0.0.1", port)
        vllm.start_profile(timeout_s=30)
        got = list(server.got)  # type: ignore[attr-defined]
    assert [path for path, _ in got] == ["/start_profile", "/stop_profile", "/start_profile"]
    assert json.loads(got[0][1]) == {"record_shapes": True, "activities": ["CPU", "GPU"], "output_dir": "/run/traces",
                                     "num_steps": 5}
    assert got[1][1] == b"" and got[2][1] == b""  # vLLM's endpoints take no body


def test_refusals_are_one_line_errors_naming_the_url() -> None:
    with fake_engine() as target:
        elsewhere = f"http://127.0.0.1:{target.server_address[1]}/start_profile"
        answers = {
            "/start_profile": (302, {"Location": elsewhere}, b""),
            "/stop_profile": (200, {"Content-Type": "application/json"},
                              b'{"success": false, "message": "Profiling is not in progress. Call /start_profile first."}'),
        }
        with fake_engine(answers) as server:
            ep = EngineEndpoint("sglang", "127.0.0.1", server.server_address[1])
            with pytest.raises(EngineRefused) as redirect:
                ep.start_profile(timeout_s=30)
            with pytest.raises(EngineRefused) as failed:
                ep.stop_profile(timeout_s=30)
        assert target.got == []  # type: ignore[attr-defined]  # the redirect was not followed
    assert str(redirect.value) == f"{ep.url}/start_profile: answered 302 (a redirect; not followed)"
    assert str(failed.value) == f"{ep.url}/stop_profile: Profiling is not in progress. Call /start_profile first."
    with fake_engine({"/start_profile": (404, {}, b'{"detail":"Not Found"}')}) as server:
        ep = EngineEndpoint("vllm", "127.0.0.1", server.server_address[1])
        with pytest.raises(EngineRefused, match=r"^http://127\.0\.0\.1:\d+/start_profile: answered 404: no profiler "
                                                r"endpoint there \(vLLM has it only when its profiler is configured"):
            ep.start_profile(timeout_s=30)


@contextmanager
def raw_server(behave: Callable[[socket.socket], None]) -> Iterator[int]:
    """A TCP server on an ephemeral loopback port whose one connection ``behave`` handles."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(1)
    done = threading.Event()

    def serve() -> None:
        try:
            conn, _ = lsock.accept()
        except OSError:
            return
        with conn:
            try:
                behave(conn)
            except OSError:
                pass  # the client hung up: what the bounded read is for
        done.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield lsock.getsockname()[1]
    finally:
        lsock.close()
        thread.join(30)


def test_a_server_that_never_answers_times_out() -> None:
    release = threading.Event()

    def silent(conn: socket.socket) -> None:
        conn.recv(4096)
        release.wait(30)  # holds the connection open, answers nothing

    with raw_server(silent) as port:
        ep = EngineEndpoint("vllm", "127.0.0.1", port)
        try:
            with pytest.raises(EngineTimeout) as exc:
                ep.start_profile(timeout_s=0.3)
        finally:
            release.set()
    assert str(exc.value) == f"http://127.0.0.1:{port}/start_profile: no complete answer within 0.3 s"


def test_a_server_that_drips_forever_times_out() -> None:
    stop = threading.Event()

    def drip(conn: socket.socket) -> None:
        conn.recv(4096)
        conn.sendall(b"HTTP/1.0 200 OK\r\n")
        for _ in range(1500):  # a header byte at a time for 30 s, never the end of the headers
            if stop.wait(0.02):
                break
            conn.sendall(b"x")

    with raw_server(drip) as port:
        try:
            with pytest.raises(EngineTimeout):
                EngineEndpoint("sglang", "127.0.0.1", port).stop_profile(timeout_s=0.5)
        finally:
            stop.set()


def test_a_flooding_server_is_read_only_a_few_kilobytes() -> None:
    sent = [0]

    def flood(conn: socket.socket) -> None:
        conn.recv(4096)
        conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n")
        block = b"A" * 65536
        for _ in range(2048):  # up to 128 MiB, until the client hangs up
            conn.sendall(block)
            sent[0] += len(block)

    with raw_server(flood) as port:
        answer = EngineEndpoint("sglang", "127.0.0.1", port).start_profile(timeout_s=30)
    assert answer.endswith(" ...") and len(answer) <= 160 and "\n" not in answer
    assert sent[0] < 2048 * 65536  # the client stopped reading, so the server could not send it all
    assert MAX_RESPONSE_BYTES <= 16384


def test_nothing_listening_is_unreachable() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(EngineUnreachable, match=rf"^http://127\.0\.0\.1:{port}/start_profile: connection refused"):
        EngineEndpoint("vllm", "127.0.0.1", port).start_profile(timeout_s=10)
    with pytest.raises(EngineError, match=r"^http\+unix:///nonexistent/v\.sock/stop_profile: no such socket$"):
        EngineEndpoint("vllm", "127.0.0.1", None, uds="/nonexistent/v.sock").stop_profile(timeout_s=10)


# -- the child's environment ---------------------------------------------------------------------

def _env(base: dict[str, str], command: tuple[str, ...] = ()) -> dict[str, str]:
    return contract.child_environment(base, run_dir="/runs/7-x", run_id=7, profile="{}", bootstrap_dir="/runs/7-x/b",
                                      command=command)


def test_the_engines_profilers_point_at_the_run_with_shapes_unless_the_user_set_them() -> None:
    traces = os.path.join("/runs/7-x", "traces")
    env = _env({})
    assert {k: env[k] for k in ("VLLM_TORCH_PROFILER_DIR", "VLLM_TORCH_PROFILER_RECORD_SHAPES",
                                "SGLANG_TORCH_PROFILER_DIR", "SGLANG_PROFILE_RECORD_SHAPES")} == {
        "VLLM_TORCH_PROFILER_DIR": traces, "VLLM_TORCH_PROFILER_RECORD_SHAPES": "1",
        "SGLANG_TORCH_PROFILER_DIR": traces, "SGLANG_PROFILE_RECORD_SHAPES": "1"}
    # the user's own folder: their profiler settings stay wholly theirs (no shapes added)
    env = _env({"VLLM_TORCH_PROFILER_DIR": "/mine", "SGLANG_TORCH_PROFILER_DIR": "/mine2"})
    assert env["VLLM_TORCH_PROFILER_DIR"] == "/mine" and "VLLM_TORCH_PROFILER_RECORD_SHAPES" not in env
    assert env["SGLANG_TORCH_PROFILER_DIR"] == "/mine2" and "SGLANG_PROFILE_RECORD_SHAPES" not in env
    # shapes turned off by the user, folder not set: the folder is the run's, shapes stay off
    env = _env({"VLLM_TORCH_PROFILER_RECORD_SHAPES": "0", "SGLANG_PROFILE_RECORD_SHAPES": "false"})
    assert env["VLLM_TORCH_PROFILER_DIR"] == traces and env["VLLM_TORCH_PROFILER_RECORD_SHAPES"] == "0"
    assert env["SGLANG_TORCH_PROFILER_DIR"] == traces and env["SGLANG_PROFILE_RECORD_SHAPES"] == "false"
    # vLLM configured on its command line (v0.13+): the variables would override it, so none is set
    for cmd in (("vllm", "serve", "m", "--profiler-config", '{"profiler": "torch", "torch_profiler_dir": "/p"}'),
                ("vllm", "serve", "m", "--profiler-config.torch_profiler_dir=/p"),
                ("bash", "-c", "vllm serve m --profiler-config='{}'")):
        env = _env({}, cmd)
        assert "VLLM_TORCH_PROFILER_DIR" not in env and "VLLM_TORCH_PROFILER_RECORD_SHAPES" not in env
        assert env["SGLANG_TORCH_PROFILER_DIR"] == traces


# -- what the engines write into the run --------------------------------------------------------

FAKE_ENGINE = r"""
import os, shutil, sys, json
src = sys.argv[1]
# as SGLang's scheduler and vLLM's workers name their traces (one per rank)
shutil.copy(src, os.path.join(os.environ["SGLANG_TORCH_PROFILER_DIR"], "1764221000.5-TP-0.trace.json.gz"))
shutil.copy(src, os.path.join(os.environ["SGLANG_TORCH_PROFILER_DIR"], "1764221000.5-TP-1.trace.json.gz"))
shutil.copy(src, os.path.join(os.environ["VLLM_TORCH_PROFILER_DIR"], "a1b2-rank-0.1764221000500.pt.trace.json.gz"))
# and the folder's non-trace files (vLLM's profiler_out_0.txt table) are left alone
open(os.path.join(os.environ["VLLM_TORCH_PROFILER_DIR"], "profiler_out_0.txt"), "w").write("table")
print(json.dumps({k: os.environ.get(k) for k in ("VLLM_TORCH_PROFILER_RECORD_SHAPES", "SGLANG_PROFILE_RECORD_SHAPES")}))
"""


def test_an_engines_traces_are_ingested_and_counted_as_the_engines(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    prog = tmp_path / "fake_engine.py"
    prog.write_text(FAKE_ENGINE)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "SGLANG_", "GPUSCOPE_"))}
    p = subprocess.run([PY, "-m", "gpuscope", "run", "--db", str(db), "--json", "--no-analyze", "--", PY, str(prog),
                        str(FIXTURE_TRACE)], capture_output=True, text=True, timeout=180, env=env)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["ingest_error"] is None
    assert sorted(Path(t).name for t in doc["traces"]) == ["1764221000.5-TP-0.trace.json.gz",
                                                          "1764221000.5-TP-1.trace.json.gz",
                                                          "a1b2-rank-0.1764221000500.pt.trace.json.gz"]
    notes = doc["profiler"]["notes"]
    assert "SGLang's profiler wrote 2 traces into the run" in notes
    assert "vLLM's profiler wrote 1 trace into the run" in notes
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("SELECT count(*), min(events) FROM traces WHERE run_id = ?", [doc["run_id"]]).fetchone()
    finally:
        con.close()
    assert rows is not None and rows[0] == 3 and rows[1] > 0


def test_which_profiler_held_a_process_session(tmp_path: Path) -> None:
    engine = tmp_path / "1764221000.5-TP-0.trace.json.gz"
    shutil.copy(FIXTURE_TRACE, engine)
    pid = trace_pid(engine)
    assert pid == 13572  # the fixture's process, from its first CPU op
    window = str(tmp_path / f"host_{pid}_window1.pt.trace.json.gz")
    windows = [{"pid": pid, "path": window, "start_ns": 1, "end_ns": 2}]
    cmd = ["python", "-m", "sglang.launch_server"]
    # the engine's trace has the events, gpuscope's window none: the engine held the session
    notes = engine_trace_notes(cmd, [engine, Path(window)], windows, [],
                               ingested=[{"path": str(engine), "events": 1735}, {"path": window, "events": 0}])
    assert notes == ["SGLang's profiler wrote 1 trace into the run",
                     f"pid {pid}: SGLang's profiler held the process's profiler session (one Kineto session per "
                     "process: the other's trace recorded nothing)"]
    # the other way round
    notes = engine_trace_notes(cmd, [engine, Path(window)], windows, [],
                               ingested=[{"path": str(engine), "events": 0}, {"path": window, "events": 12}])
    assert notes[1] == (f"pid {pid}: gpuscope's window held the process's profiler session (one Kineto session per "
                        "process: the other's trace recorded nothing)")
    # both recorded (one after the other): nothing to say about the session
    assert len(engine_trace_notes(cmd, [engine, Path(window)], windows, [],
                                  ingested=[{"path": str(engine), "events": 5}, {"path": window, "events": 12}])) == 1
    # the bootstrap skipped a window because the engine's profiler was running
    skipped = [{"event": "window_skipped", "pid": 4242, "ts_ns": 5, "reason": "another profiler is running in this process"}]
    assert engine_trace_notes(["vllm", "serve", "m"], [], [], skipped) == [
        "pid 4242: vLLM's profiler held the process's profiler session; gpuscope's window was skipped (one Kineto "
        "session per process)"]
    # a program that is no engine, with traces of its own: nothing said
    assert engine_trace_notes(["python", "app.py"], [tmp_path / "mine.pt.trace.json.gz"], [], []) == []


def test_trace_pid_reads_a_plain_trace_and_gives_none_for_junk(tmp_path: Path) -> None:
    plain = tmp_path / "t.pt.trace.json"
    plain.write_text(json.dumps({"schemaVersion": 1, "traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 777, "tid": 777, "ts": 1, "dur": 1}]}))
    assert trace_pid(plain) == 777  # the CPU op's pid, not the GPU's device "pid"
    junk = tmp_path / "j.trace.json.gz"
    junk.write_bytes(b"not gzip")
    assert trace_pid(junk) is None
    empty = tmp_path / "e.trace.json.gz"
    with gzip.open(empty, "wt") as f:
        f.write('{"traceEvents": []}')
    assert trace_pid(empty) is None
