"""The Prometheus endpoint of `gpuscope monitor` under attack (issue 27, class 4): the
`--prometheus` address parsed strictly (a table and a property), a real server flooded by
half-open connections past its bound while a scrape is still answered, a slowloris cut off at
the request deadline, scrapes cut off by their clients (close, RST) saying one line at most,
a real monitor with a descriptor limit flooded while it keeps sampling, IPv6, and hostile label
values shown with visible escapes."""
from __future__ import annotations

import gzip
import os
import re
import resource
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, run_cli

pytest.importorskip("prometheus_client")

from gpuscope.errors import InputError  # noqa: E402
from gpuscope.cli.monitor import parse_listen  # noqa: E402
from gpuscope.otel.endpoint import Listen, MetricsEndpoint, VisibleLabels  # noqa: E402
from gpuscope.textsafe import visible  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RECORDING = FIXTURES / "recordings" / "synthetic_h100_a100.jsonl"
V4, V6, NAME = socket.AF_INET, socket.AF_INET6, socket.AF_UNSPEC
#: Raw control characters (C0 but newline, DEL, C1, the bidi controls) in exposition text.
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


# -- the address -----------------------------------------------------------------------------------

VALID = [
    ("9464", "127.0.0.1", 9464, V4),
    ("1", "127.0.0.1", 1, V4),
    ("65535", "127.0.0.1", 65535, V4),
    ("127.0.0.1:9464", "127.0.0.1", 9464, V4),
    ("0.0.0.0:9464", "0.0.0.0", 9464, V4),
    ("10.1.2.3:80", "10.1.2.3", 80, V4),
    ("[::1]:9464", "::1", 9464, V6),
    ("[::]:9464", "::", 9464, V6),
    ("[fe80::1%eth0]:9464", "fe80::1%eth0", 9464, V6),
    ("[2001:db8::7]:443", "2001:db8::7", 443, V6),
    ("[::ffff:127.0.0.1]:9464", "::ffff:127.0.0.1", 9464, V6),
    ("localhost:9464", "localhost", 9464, NAME),
    ("node-7.example.org:9464", "node-7.example.org", 9464, NAME),
    ("a:1", "a", 1, NAME),
]
INVALID = [
    "", " ", "[]:19465", "[]", "[:]:9464", "[ ]:9464", "²", "¹²³", "٩٤٦٤", "127.0.0.1:٩٤٦٤", "９４６４",
    "0", "00", "65536", "99999", "123456", "-1", "+9464", "09464", "9464 ", " 9464", "94 64", "9464\n",
    "9464\x00", "\x1b]0;x\x07:9464", ":9464", "localhost:", "localhost", "localhost:0", "localhost:http",
    "localhost:65536", "127.0.0.1:0", "127.0.0.1", "::1", "::1:9464", "::", ":::9464", "[::1]", "[::1]:",
    "[::1]9464", "[::1]:0", "[::1]:65536", "[::1]:94a", "[127.0.0.1]:9464", "[::g]:9464", "[[::1]]:9464",
    "[::1]:9464]", "[::1%]:9464", "127.1:9464", "127.0.1:9464", "1.2.3.4.5:80", "256.0.0.1:80",
    "0x7f000001:9464", "0x7f.1:9464", "017700000001:9464", "127.0.0.01:9464", "host_name:80", "-host:80",
    "host-:80", "a..b:80", ".a:80", "a.:80", "a/b:80", "http://localhost:9464", "user@host:80", "h:80:80",
    "ホスト:9464", "xn--a.1:80", "1.2.3:80", "a" * 64 + ":80", ".".join(["a" * 60] * 5) + ":80",
]


@pytest.mark.parametrize("text, host, port, family", VALID)
def test_valid_addresses_parse_to_what_they_say(text: str, host: str, port: int, family: int) -> None:
    assert parse_listen(text) == Listen(host, port, family)


@pytest.mark.parametrize("text", INVALID, ids=ascii)
def test_invalid_addresses_are_an_input_error_naming_the_flag_and_the_value(text: str) -> None:
    with pytest.raises(InputError) as exc:
        parse_listen(text)
    message = str(exc.value)
    assert message.startswith("--prometheus: ") and ascii(text) in message and "\n" not in message
    assert RAW_CONTROL.search(message) is None and message.isascii()


@pytest.mark.parametrize("text", ["[]:19465", "²", "localhost:0", "::1:9464", "0x7f000001:9464", "9464\x1b[2J"],
                         ids=ascii)
def test_monitor_exits_2_with_one_line_before_anything_starts(text: str) -> None:
    r = run_cli("monitor", "--prometheus", text, "--seconds", "30")
    assert r.code == 2, (r.code, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and "--prometheus:" in lines[0] and ascii(text) in lines[0], r.err
    assert "Traceback" not in r.err and "\x1b" not in r.err


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=24),
                 st.text(alphabet="0123456789[]:.%abfx-²٩ \x00\x1b", max_size=24),
                 st.builds(lambda h, p: f"{h}:{p}", st.sampled_from(["", "[]", "[::1]", "127.0.0.1", "0.0.0.0", "::1",
                                                                    "localhost", "[::]", "127.1"]),
                           st.integers(-5, 70000).map(str))))
def test_any_text_parses_to_a_strict_address_or_an_input_error(text: str) -> None:
    try:
        listen = parse_listen(text)
    except InputError as exc:
        assert str(exc).startswith("--prometheus: ") and RAW_CONTROL.search(str(exc)) is None
        return
    assert text.isascii() and text.isprintable() and " " not in text
    assert 1 <= listen.port <= 65535 and text.endswith(f":{listen.port}") or text == str(listen.port)
    # every interface only when written: never from an empty or odd host
    if listen.host in ("0.0.0.0", "::"):
        assert text.startswith(("0.0.0.0:", "[::]:"))
    if listen.family == V6:
        assert text.startswith(f"[{listen.host}]:")
    if text.isdigit():
        assert listen.host == "127.0.0.1"
    assert parse_listen(listen.shown()) == listen


# -- a real server -----------------------------------------------------------------------------------

class _Lines:
    """What the endpoint says, with an event per kind of line."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.shedding = threading.Event()
        self.recovered = threading.Event()
        self.cut_off = threading.Event()

    def __call__(self, line: str) -> None:
        self.lines.append(line)
        if "closing connections unanswered" in line:
            self.shedding.set()
        if "back to normal" in line:
            self.recovered.set()
        if "cut off" in line:
            self.cut_off.set()

    def count(self, what: str) -> int:
        return sum(what in line for line in self.lines)


def _registry(labels: dict[str, str] | None = None) -> Any:
    from prometheus_client import CollectorRegistry, Gauge

    registry = CollectorRegistry()
    gauge = Gauge("gpuscope_test_value", "a value", list(labels or {"hw_name": ""}), registry=registry)
    gauge.labels(**(labels or {"hw_name": "gpu0"})).set(42)
    return registry


def _endpoint(registry: Any = None, host: str = "127.0.0.1", family: int = V4, **kw: Any) -> MetricsEndpoint:
    ep = MetricsEndpoint(Listen(host, 0, family), registry if registry is not None else _registry(), **kw)
    ep.start()
    return ep


def _request(ep: MetricsEndpoint, raw: bytes, timeout_s: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    """Send ``raw`` and read the answer to its end (the server closes): status, headers, body."""
    family = V6 if ":" in ep.host else V4
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        s.connect((ep.host, ep.port))
        s.sendall(raw)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split(" ")[1]), headers, body


def _get(ep: MetricsEndpoint, path: str = "/metrics", extra: str = "") -> tuple[int, dict[str, str], bytes]:
    return _request(ep, f"GET {path} HTTP/1.1\r\nHost: x\r\n{extra}\r\n".encode())


@pytest.mark.parametrize("raw, status", [
    (b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 200),
    (b"GET /metrics HTTP/1.0\r\n\r\n", 200),
    (b"GET /metrics?name[]=x HTTP/1.1\r\n\r\n", 200),
    (b"GET http://h:1/metrics HTTP/1.1\r\n\r\n", 200),
    (b"GET /metrics HTTP/1.1\n\n", 200),
    (b"GET / HTTP/1.1\r\n\r\n", 404),
    (b"GET /metrics/ HTTP/1.1\r\n\r\n", 404),
    (b"GET /../metrics HTTP/1.1\r\n\r\n", 404),
    (b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", 405),
    (b"DELETE /metrics HTTP/1.1\r\n\r\n", 405),
    (b"OPTIONS * HTTP/1.1\r\n\r\n", 405),
    (b"GET /metrics HTTP/2.0\r\n\r\n", 505),
    (b"GET /metrics\r\n\r\n", 400),
    (b"GET  /metrics HTTP/1.1\r\n\r\n", 400),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400),
    (b"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n", 400),
    (b"GET /metrics HTTP/1.1\r\n" + b"X-Pad: " + b"a" * 20000 + b"\r\n\r\n", 431),
])
def test_only_get_and_head_of_metrics_are_answered(raw: bytes, status: int) -> None:
    ep = _endpoint()
    try:
        got, headers, body = _request(ep, raw)
    finally:
        ep.stop()
    assert got == status, (got, body[:200])
    assert headers["connection"] == "close" and int(headers["content-length"]) == len(body)
    if status == 200:
        assert b'gpuscope_test_value{hw_name="gpu0"} 42.0' in body
        assert headers["content-type"].startswith("text/plain; version=0.0.4")
    if status == 405:
        assert headers["allow"] == "GET, HEAD"


def test_head_has_the_length_and_no_body_and_gzip_when_asked() -> None:
    ep = _endpoint()
    try:
        status, headers, body = _request(ep, b"HEAD /metrics HTTP/1.1\r\n\r\n")
        _, _, plain = _get(ep)
        _, zheaders, zipped = _get(ep, extra="Accept-Encoding: gzip\r\n")
        _, noheaders, notzipped = _get(ep, extra="Accept-Encoding: gzip;q=0, identity\r\n")
    finally:
        ep.stop()
    assert status == 200 and body == b"" and int(headers["content-length"]) == len(plain)
    assert zheaders["content-encoding"] == "gzip" and gzip.decompress(zipped) == plain
    assert "content-encoding" not in noheaders and notzipped == plain


def _half_open(ep: MetricsEndpoint, n: int) -> list[socket.socket]:
    """``n`` connections that never send a byte."""
    out = []
    for _ in range(n):
        s = socket.socket(V6 if ":" in ep.host else V4, socket.SOCK_STREAM)
        s.setblocking(False)
        s.connect_ex((ep.host, ep.port))
        out.append(s)
    return out


@pytest.mark.parametrize("partial", [b"", b"G", b"GET /metrics HTTP/1.1\r\n", b"GET /metrics HTTP/1.1\r\nHost: x\r\n"])
def test_a_flood_past_the_bound_sheds_the_oldest_and_a_scrape_is_answered(partial: bytes) -> None:
    """200 connections (8 allowed at once) that send nothing or part of a request and wait:
    the scrape behind them is answered, the endpoint never holds more than its bound, says once
    that it sheds load and once that it is over."""
    lines = _Lines()
    ep = _endpoint(max_connections=8, request_timeout_s=60.0, recovered_after_s=0.3, log=lines)
    flood = _half_open(ep, 200)
    try:
        for s in flood:
            try:
                if partial:
                    s.send(partial)
            except OSError:
                pass  # already shed and closed by the server
        status, _, body = _get(ep)
        assert status == 200 and b"gpuscope_test_value" in body
        assert lines.shedding.wait(10) and ep.connections() <= 8 and ep.shed >= 150
        assert lines.recovered.wait(10)  # nobody new for a while: one line says so
    finally:
        for s in flood:
            s.close()
        ep.stop()
    assert lines.count("closing connections unanswered") == 1 and lines.count("back to normal") == 1, lines.lines
    assert len(lines.lines) == 2


def test_a_slowloris_is_cut_off_at_the_request_deadline_however_it_trickles() -> None:
    """A byte every 20 ms never completes a request; it is closed at the whole-request
    deadline (a per-read timeout would let it live for ever) and nothing is answered."""
    ep = _endpoint(request_timeout_s=0.5)
    done = threading.Event()
    try:
        with socket.create_connection((ep.host, ep.port), timeout=10) as s:
            def trickle() -> None:
                for byte in b"GET /metrics HTTP/1.1\r\nX-A: " + b"a" * 1000:
                    if done.wait(0.02):
                        return
                    try:
                        s.send(bytes([byte]))
                    except OSError:
                        return
            t = threading.Thread(target=trickle, daemon=True)
            t.start()
            try:
                answer = s.recv(65536)  # waits for the server's close
            except ConnectionResetError:
                answer = b""
            done.set()
            t.join(10)
    finally:
        ep.stop()
    assert answer == b"" and ep.timed_out == 1 and ep.served == 0


def _big_endpoint(log: Any) -> MetricsEndpoint:
    body = b"# a body that cannot fit in the sockets' buffers\n" + b"x 1\n" * (4 * 2**20)
    ep = MetricsEndpoint(Listen("127.0.0.1", 0, V4), None, log=log)
    ep.render = lambda: body
    ep.start()
    return ep


def _abort(ep: MetricsEndpoint, how: str) -> None:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(10)
    s.connect((ep.host, ep.port))
    s.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
    s.recv(1024)  # the answer has begun
    if how == "rst":
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    elif how == "shutdown":
        s.shutdown(socket.SHUT_RDWR)
    s.close()


def test_slow_readers_past_the_bound_leave_room_for_a_scrape() -> None:
    """Clients that ask and never read a body too big for the sockets' buffers hold their
    connection in the writing phase; past the bound the oldest of them is closed, so a scrape
    behind 20 of them (8 allowed) is answered, and their end is not an error line."""
    lines = _Lines()
    ep = MetricsEndpoint(Listen("127.0.0.1", 0, V4), None, max_connections=8, response_timeout_s=60.0,
                         recovered_after_s=60.0, log=lines)
    body = b"x 1\n" * (2 * 2**20)
    ep.render = lambda: body
    ep.start()
    readers = []
    try:
        for _ in range(20):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect((ep.host, ep.port))
            s.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
            readers.append(s)
        status, _, got = _get(ep)
    finally:
        for s in readers:
            s.close()
        ep.stop()
    assert status == 200 and got == body
    assert lines.count("closing connections unanswered") == 1 and "Traceback" not in "".join(lines.lines)


def test_connections_reset_before_asking_say_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    """Port scanners and health checks: connect, then RST or close at once (50 of each)."""
    ep = _endpoint(log=None)
    try:
        for i in range(100):
            s = socket.create_connection((ep.host, ep.port), timeout=10)
            if i % 2:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
        status, _, _ = _get(ep)  # after them in the queue: they have all been handled
    finally:
        ep.stop()
    assert status == 200 and capsys.readouterr().err == ""


@pytest.mark.parametrize("how", ["rst", "close", "shutdown"])
def test_scrapes_cut_off_by_their_client_say_one_line_at_most(how: str, capsys: pytest.CaptureFixture[str]) -> None:
    ep = _big_endpoint(log=None)  # the real stderr
    try:
        for _ in range(25):
            _abort(ep, how)
        deadline = time.monotonic() + 20
        while ep.aborted + ep.timed_out < 25 and time.monotonic() < deadline:
            time.sleep(0.01)  # waits on the server's count, bounded
        status, _, body = _get(ep)  # and it still answers
    finally:
        ep.stop()
    err = capsys.readouterr().err
    assert ep.aborted >= 20 and status == 200 and len(body) > 2**20
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 1, err
    assert err.count("cut off by their client") == 1, err


# -- a real monitor, its descriptors limited, flooded --------------------------------------------------

def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _scrape_until(port: int, done: Any, deadline_s: float = 30.0) -> str:
    """Scrape until ``done(text)`` (bounded): the answer waited on, not a sleep."""
    end = time.monotonic() + deadline_s
    last: Exception | None = None
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
            text = data.decode()
            if done(text):
                return text
        except OSError as exc:
            last = exc
        time.sleep(0.05)
    raise AssertionError(f"no scrape as awaited in {deadline_s} s ({last})")


def _io_total(text: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("hw_gpu_io_bytes_total{"))


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_a_monitor_out_of_descriptors_keeps_sampling_and_answering() -> None:
    """The issue's attack, scaled down: the monitor may open only a few more descriptors than
    it uses (`prlimit`), and 600 connections that send nothing arrive; it answers a scrape,
    its counters keep growing (the sampler ticks), it says once that it sheds load, and it never
    prints a traceback."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    p = subprocess.Popen([sys.executable, "-m", "gpuscope", "monitor", "--replay", str(RECORDING), "--interval", "0.1",
                          "--prometheus", str(port)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    flood: list[socket.socket] = []
    try:
        first = _scrape_until(port, lambda text: _io_total(text) > 0)
        hard = resource.prlimit(p.pid, resource.RLIMIT_NOFILE)[1]
        resource.prlimit(p.pid, resource.RLIMIT_NOFILE, (_fds(p.pid) + 6, hard))
        for _ in range(3):
            flood += [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(200)]
            # answered during the flood, and the byte counters grew: the sampler ticks on
            first = _scrape_until(port, lambda text, before=_io_total(first): _io_total(text) > before)
    finally:
        for s in flood:
            s.close()
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert "Traceback" not in err and err.count("closing connections unanswered") == 1, err
    assert "no file descriptor left" in err, err


# -- IPv6 ---------------------------------------------------------------------------------------------

def _ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(V6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")
def test_ipv6_loopback_binds_and_answers() -> None:
    listen = parse_listen("[::1]:1")
    ep = _endpoint(host=listen.host, family=listen.family)
    try:
        assert ep.host == "::1"
        status, _, body = _get(ep)
        with pytest.raises(OSError):  # IPv6 loopback only: not on IPv4
            socket.create_connection(("127.0.0.1", ep.port), timeout=2).close()
    finally:
        ep.stop()
    assert status == 200 and b"gpuscope_test_value" in body


# -- hostile label values --------------------------------------------------------------------------

HOSTILE = ["\x1b]0;TITLE\x07\x1b[2J\x1b]52;c;QUJD\x07", "a\x1b\\b", "\x9b31m", "tab\there", "nl\nx", 'q"uo\\te',
           "\u202egnp.exe", "del\x7f", "nul\x00x", "\x00", "plain H100"]


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.sampled_from(HOSTILE), st.text(max_size=30)))
def test_label_values_show_control_characters_as_escapes(value: str) -> None:
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    text = generate_latest(VisibleLabels(_registry({"hw_model": value}))).decode()
    assert RAW_CONTROL.search(text) is None, ascii(text)
    [family] = [f for f in text_string_to_metric_families(text) if f.name == "gpuscope_test_value"]
    assert family.samples[0].labels["hw_model"] == visible(value)


def test_a_hostile_recording_and_process_names_reach_the_endpoint_escaped() -> None:
    """The OpenTelemetry names (the SDK's reader) and the dcgm names: a device model, a process
    name (--per-process) and a host name with control characters, over HTTP."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import CollectorRegistry

    from gpuscope.collectors.base import DeviceInfo, ProcessSample, Sample
    from gpuscope.otel.export import DcgmNames
    from gpuscope.otel.sink import TelemetryState, meter_provider
    from gpuscope.sinks.base import SampleBatch, SamplerInfo

    model = HOSTILE[0] + "H100"
    device = DeviceInfo(key="gpu0", vendor="nvidia", index=0, name=model, uuid="GPU-\x1b[31m1")
    state = TelemetryState(per_process_top=2, name_of=lambda pid: "?")
    state.start(SamplerInfo(interval_s=0.1, started_ns=0, vendors=[], devices=[device]))
    procs = (ProcessSample(pid=7, name="evil\x1b]0;x\x07\u202e", gpu_mem_bytes=2**30),)
    state.write(SampleBatch([(0, [Sample("gpu0", 1, {"power_w": 300.0, "mem_used_bytes": 2**30}, False, procs)])]))
    registry = CollectorRegistry()
    provider = meter_provider(state, [PrometheusMetricReader(registry=registry)], {"host.name": "h\x1b[2J"})
    ep = _endpoint(registry)
    try:
        _, _, otel_body = _get(ep)
        ep.render = DcgmNames(state, "host\x1b]52;c;QQ\x07").render
        ep._cache = None  # noqa: SLF001  (a new renderer: not the body of a moment ago)
        _, _, dcgm_body = _get(ep)
    finally:
        ep.stop()
        provider.shutdown()
    for body in (otel_body.decode(), dcgm_body.decode()):
        assert RAW_CONTROL.search(body) is None, ascii(body)
    assert "hw_power_watts{" in otel_body.decode() and "\\\\x1b]0;TITLE" in otel_body.decode()
    assert "evil\\\\x1b]0;x\\\\x07\\\\u202e" in otel_body.decode()
    assert "DCGM_FI_DEV_POWER_USAGE{" in dcgm_body.decode() and "host\\\\x1b]52;c;QQ\\\\x07" in dcgm_body.decode()
