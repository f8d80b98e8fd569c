"""The Prometheus ``/metrics`` endpoint of ``gpuscope monitor``: the ``--prometheus`` address
parsed strictly, and a small HTTP server of gpuscope's own that anyone who can reach the port
cannot turn against the monitor.

Why not ``http.server`` (or prometheus_client's server, the same thing): it gives every
connection a thread and waits on it without a time limit. About 1,100 connections that send
nothing (any local user can open them) took every file descriptor; ``accept`` then failed with
EMFILE in a loop at 100 % CPU, holding the GIL, so ``/metrics`` stopped answering and samples
reached the store 53 s late; and every scrape its client cut off printed a 23-line traceback.

This server is one thread around a selector (epoll), non-blocking sockets only:

- at most :data:`MAX_CONNECTIONS` connections at once; a new one past that closes the oldest
  connection that has not yet sent a whole request (a half-open or slow client; else the oldest
  of all), so a scrape that sends its request at once is answered during a flood;
- a request (line and headers, at most :data:`MAX_REQUEST_BYTES`) must arrive within
  :data:`REQUEST_TIMEOUT_S` of the connection and the answer must be taken within
  :data:`RESPONSE_TIMEOUT_S` (a whole-request deadline, not one per byte: a client sending a
  byte a second is cut off too); one request per connection (``Connection: close``);
- a reserve file descriptor: when ``accept`` fails for want of descriptors (EMFILE, ENFILE) the
  reserve is closed, one pending connection accepted and closed, the reserve reopened; when
  even that fails the listener rests :data:`ACCEPT_PAUSE_S`: never a busy loop;
- one line on stderr when it starts shedding connections, one when it has had no reason to for
  :data:`RECOVERED_AFTER_S`; at most one line a :data:`LOG_EVERY_S` about scrapes their
  clients cut off (with the count), never a traceback;
- only ``GET`` and ``HEAD`` of ``/metrics`` (any query string); 404 for other paths, 405 for
  other methods, 400 / 431 / 505 for malformed requests; gzip when the scraper asks for it;
- the sampler never waits on it: rendering reads the telemetry state under its short lock and
  a body is reused for :data:`RENDER_REUSE_S`, so a client scraping in a loop costs little.

Label values are other people's text (a recording's device names, process names with
``--per-process``, resource attributes): :class:`VisibleLabels` shows their control characters
as visible escapes (:func:`gpuscope.textsafe.visible`) before the format's own escaping of
backslash, quote and newline.

Only the standard library at import; prometheus_client inside the functions that need it.
"""
from __future__ import annotations

import errno
import gzip
import ipaddress
import os
import re
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from ..textsafe import has_control, visible

#: Connections open at once; past this the oldest unanswered one is closed.
MAX_CONNECTIONS = 32
#: Seconds a client has, from its connection, to send the whole request.
REQUEST_TIMEOUT_S = 5.0
#: Seconds a client has to take the whole answer (Prometheus' default scrape timeout is 10 s).
RESPONSE_TIMEOUT_S = 10.0
#: The request line and headers, at most (a scrape sends about 300 bytes).
MAX_REQUEST_BYTES = 8192
#: Seconds without shedding after which the endpoint says it has recovered.
RECOVERED_AFTER_S = 30.0
#: At most one line about cut-off scrapes (or a failing render) per this many seconds.
LOG_EVERY_S = 60.0
#: Seconds the listener rests when no descriptor or memory is left even for the reserve trick.
ACCEPT_PAUSE_S = 0.5
#: Seconds a rendered body is served again instead of rendering anew.
RENDER_REUSE_S = 0.2
#: Connections accepted per pass of the loop, so that open ones are served between bursts.
_ACCEPT_BATCH = 64
#: The text format the bodies are written in (legacy names, escaped label values).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_PORT = re.compile(r"[1-9][0-9]{0,4}")
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_V6 = re.compile(r"\[([0-9A-Fa-f:.]+(?:%[A-Za-z0-9_.-]{1,64})?)\]:([0-9]+)")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


@dataclass(frozen=True)
class Listen:
    """Where to listen: ``host`` as given (an IPv4 literal, an IPv6 literal without brackets,
    or a host name), ``port``, and the address family a literal implies (``AF_UNSPEC`` for a
    name, resolved when binding)."""

    host: str
    port: int
    family: int

    def shown(self) -> str:
        """``HOST:PORT`` as one would type it (IPv6 in brackets)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_listen(text: str) -> Listen:
    """``PORT`` (on 127.0.0.1), ``HOST:PORT`` or ``[IPV6]:PORT`` -> :class:`Listen`.

    Strict, because a lax parse once bound every interface for ``[]:PORT``: the port is 1 to
    65535 in ASCII digits (no sign, no leading zero, no other script's digits); HOST is a
    dotted-quad IPv4 address, an IPv6 address in brackets (a zone after ``%`` allowed) or a
    host name of letters, digits, hyphens and dots (no form the C library would read as a
    number, such as ``127.1`` or ``0x7f000001``); nothing else (no spaces, no empty host or
    brackets, no IPv6 without brackets). ``0.0.0.0`` and ``[::]`` only when written. Anything
    else is an :class:`~gpuscope.errors.InputError` quoting the value with visible escapes
    (``ascii``: control characters and other scripts' digits alike); the CLI names its flag."""
    def bad(why: str) -> InputError:
        return InputError("listen address", f"{why}, not {ascii(text)} (expected PORT, HOST:PORT or [IPV6]:PORT, "
                                  "e.g. 9464, 0.0.0.0:9464, [::1]:9464)")

    if not isinstance(text, str) or not text:
        raise bad("empty")
    if len(text) > 300 or not text.isascii() or not text.isprintable() or " " in text:
        raise bad("only ASCII letters, digits and . : [ ] % - are allowed")
    if re.fullmatch(r"[0-9]+", text):
        return Listen("127.0.0.1", _port(text, bad), socket.AF_INET)
    if text.startswith("["):
        m = _V6.fullmatch(text)
        if m is None:
            raise bad("an IPv6 address goes in brackets followed by :PORT")
        host = m.group(1)
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise bad(f"{host!r} is not an IPv6 address") from None
        return Listen(host, _port(m.group(2), bad), socket.AF_INET6)
    if text.count(":") != 1:
        raise bad("an IPv6 address goes in brackets, [::1]:9464" if text.count(":") > 1 else "no port")
    host, port_text = text.split(":")
    if not host:
        raise bad("no host before the port (give only the port for 127.0.0.1)")
    port = _port(port_text, bad)
    if re.fullmatch(r"[0-9.]+", host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise bad(f"{host!r} is not an IPv4 address") from None
        return Listen(host, port, socket.AF_INET)
    labels = host.split(".")
    if len(host) > 253 or not all(_LABEL.fullmatch(label) for label in labels) or labels[-1].isdigit():
        raise bad(f"{host!r} is not a host name")
    try:  # a name the C library reads as an address (inet_aton: 0x7f000001, 0x7f.1) is a disguise
        socket.inet_aton(host)
    except OSError:
        return Listen(host, port, socket.AF_UNSPEC)
    raise bad(f"{host!r} is not a host name or a dotted-quad IPv4 address")


def _port(text: str, bad: Callable[[str], InputError]) -> int:
    if not _PORT.fullmatch(text) or int(text) > 65535:
        raise bad("the port must be 1 to 65535")
    return int(text)


def open_listener(listen: Listen, backlog: int = 256) -> socket.socket:
    """A listening, non-blocking TCP socket on ``listen``, of the address's own family (a
    name: its first IPv4 address, else its first IPv6 one). ``OSError`` when it cannot be
    bound (the port in use, a name that does not resolve, IPv6 not available here)."""
    flags = socket.AI_NUMERICHOST if listen.family != socket.AF_UNSPEC else 0
    infos = socket.getaddrinfo(listen.host, listen.port, listen.family, socket.SOCK_STREAM, 0, flags)
    infos.sort(key=lambda info: info[0] != socket.AF_INET)  # IPv4 first for a name, as Go does
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        # a restarted monitor can bind while the old one's connections sit in TIME_WAIT; on
        # Linux this never lets two listeners share a port
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(backlog)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


class VisibleLabels:
    """A prometheus_client collector showing another's samples with every control character
    of their label values as a visible escape (``\\x1b``)."""

    def __init__(self, registry: Any) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Any]:
        for family in self.registry.collect():
            if any(has_control(v) for s in family.samples for v in s.labels.values()):
                family.samples = [s._replace(labels={k: visible(v) for k, v in s.labels.items()})
                                  for s in family.samples]
            yield family


class _Conn:
    __slots__ = ("sock", "opened", "deadline", "inbuf", "out", "sent", "writing")

    def __init__(self, sock: socket.socket, now: float, deadline: float) -> None:
        self.sock = sock
        self.opened = now
        self.deadline = deadline
        self.inbuf = b""
        self.out: memoryview | None = None
        self.sent = 0
        self.writing = False


class MetricsEndpoint:
    """The ``/metrics`` server (module docstring). Bound at construction, so a port in use
    fails before the monitor starts; serves from :meth:`start` to :meth:`stop`.

    ``render``, when set, gives the body instead of ``registry`` (dcgm-exporter's or AMD's names). The counters
    (``served``, ``shed``, ``timed_out``, ``aborted``, ``refused``) are for tests and logs."""

    def __init__(self, listen: Listen, registry: Any = None, *, max_connections: int = MAX_CONNECTIONS,
                 request_timeout_s: float = REQUEST_TIMEOUT_S, response_timeout_s: float = RESPONSE_TIMEOUT_S,
                 max_request_bytes: int = MAX_REQUEST_BYTES, recovered_after_s: float = RECOVERED_AFTER_S,
                 log: Callable[[str], None] | None = None) -> None:
        self.registry = registry
        self.render: Callable[[], bytes] | None = None
        self.max_connections = max(1, max_connections)
        self.request_timeout_s = request_timeout_s
        self.response_timeout_s = response_timeout_s
        self.max_request_bytes = max_request_bytes
        self.recovered_after_s = recovered_after_s
        self._log = log
        self._sock = open_listener(listen)
        address = self._sock.getsockname()
        self.host: str = address[0]
        self.port: int = address[1]
        self.served = self.shed = self.timed_out = self.aborted = self.refused = 0
        self._conns: dict[int, _Conn] = {}
        self._reserve: int | None = _open_reserve()
        self._accept_paused_until: float | None = None
        self._shedding_since: float | None = None
        self._last_shed = 0.0
        self._shed_in_episode = 0
        self._aborted_unsaid = 0
        self._last_abort_log = -1e18
        self._last_error_log = -1e18
        self._cache: tuple[float, bytes, bytes | None] | None = None
        self._stopping = False
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._sock, selectors.EVENT_READ, None)
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._thread = threading.Thread(target=self._loop, name="gpuscope-metrics", daemon=True)
        self._closed = False

    # -- life ---------------------------------------------------------------------------------
    def start(self) -> None:
        """Serve in a thread of its own."""
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close every socket (also when never started)."""
        if self._closed:
            return
        self._stopping = True
        if self._thread.is_alive():
            try:
                os.write(self._wake_w, b"x")
            except OSError:
                pass
            self._thread.join(5.0)
        self._closed = True
        for conn in list(self._conns.values()):
            self._close(conn)
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)
        self._sel.close()
        self._sock.close()
        if self._reserve is not None:
            os.close(self._reserve)
            self._reserve = None

    def connections(self) -> int:
        """Connections open now."""
        return len(self._conns)

    # -- the loop -----------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stopping:
            try:
                self._once()
            except Exception as exc:  # the endpoint must never take the monitor down, nor spin
                self._say_error(f"{type(exc).__name__}: {exc}")
                time.sleep(0.05)

    def _once(self) -> None:
        now = time.monotonic()
        timeout = 1.0
        if self._conns:
            timeout = min(timeout, max(0.0, min(c.deadline for c in self._conns.values()) - now))
        if self._accept_paused_until is not None:
            timeout = min(timeout, max(0.0, self._accept_paused_until - now))
        for key, _mask in self._sel.select(timeout):
            if key.data is None:
                self._accept()
            elif key.data == "wake":
                try:
                    os.read(self._wake_r, 64)
                except OSError:
                    pass
            else:
                conn: _Conn = key.data
                if self._conns.get(conn.sock.fileno()) is conn:  # not closed earlier in this pass
                    if conn.writing:
                        self._write(conn)
                    else:
                        self._read(conn)
        now = time.monotonic()
        for conn in [c for c in self._conns.values() if c.deadline <= now]:
            self.timed_out += 1
            self._close(conn)
        if self._accept_paused_until is not None and now >= self._accept_paused_until:
            self._accept_paused_until = None
            if self._reserve is None:
                self._reserve = _open_reserve()
            self._sel.register(self._sock, selectors.EVENT_READ, None)
        if self._shedding_since is not None and now - self._last_shed >= self.recovered_after_s:
            self._say(f"gpuscope monitor: /metrics: load back to normal; {self._shed_in_episode} connection(s) "
                      f"were closed unanswered over {self._last_shed - self._shedding_since:.0f} s")
            self._shedding_since = None
            self._shed_in_episode = 0

    def _accept(self) -> None:
        for _ in range(_ACCEPT_BATCH):
            try:
                sock, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    if self._conns:  # our own unanswered connections go first: then accept again
                        self._evict("no file descriptor left")
                        continue
                    self._shed_one("no file descriptor left")
                    if not self._drop_with_reserve():
                        self._pause_accept()
                        return
                    continue
                if exc.errno in (errno.ECONNABORTED, errno.EPROTO, errno.EPERM):
                    continue  # that one connection is gone: the next may be fine
                self._shed_one(f"accept failed ({exc.strerror or exc})")
                self._pause_accept()  # ENOBUFS, ENOMEM, ...: rest rather than spin
                return
            now = time.monotonic()
            if len(self._conns) >= self.max_connections:
                self._evict(f"more than {self.max_connections} connections at once")
            sock.setblocking(False)
            conn = _Conn(sock, now, now + self.request_timeout_s)
            self._conns[sock.fileno()] = conn
            self._sel.register(sock, selectors.EVENT_READ, conn)
            self._read(conn)  # a scraper sends its request at once: often it is here already

    def _drop_with_reserve(self) -> bool:
        """Accept one pending connection in the reserve's place and close it (so the
        listener's readiness is consumed rather than spun on); False when that was impossible."""
        if self._reserve is None:
            return False
        os.close(self._reserve)
        self._reserve = None
        try:
            sock, _ = self._sock.accept()
            sock.close()
        except OSError:
            pass
        self._reserve = _open_reserve()
        return self._reserve is not None

    def _pause_accept(self) -> None:
        if self._accept_paused_until is None:
            self._sel.unregister(self._sock)
        self._accept_paused_until = time.monotonic() + ACCEPT_PAUSE_S

    def _evict(self, why: str) -> None:
        """Close the oldest connection that has not sent a whole request (else the oldest)."""
        reading = [c for c in self._conns.values() if not c.writing]
        victim = min(reading or self._conns.values(), key=lambda c: c.opened)
        self._shed_one(why)
        self._close(victim)

    def _shed_one(self, why: str) -> None:
        now = time.monotonic()
        self.shed += 1
        self._shed_in_episode += 1
        self._last_shed = now
        if self._shedding_since is None:
            self._shedding_since = now
            self._say(f"gpuscope monitor: /metrics: {why}: closing connections unanswered (the oldest that "
                      "have not sent a request first); sampling goes on; one more line when this is over")

    # -- one connection -----------------------------------------------------------------------
    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(self.max_request_bytes + 1 - len(conn.inbuf))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)  # reset before asking anything: not news
            return
        if not data:
            self._close(conn)
            return
        conn.inbuf += data
        end = conn.inbuf.find(b"\r\n\r\n")
        if end < 0:
            end = conn.inbuf.find(b"\n\n")
        if end < 0:
            if len(conn.inbuf) > self.max_request_bytes:
                self._respond(conn, 431, b"request header too large\n")
            return
        self._answer(conn, conn.inbuf[:end].decode("latin-1"))

    def _answer(self, conn: _Conn, head: str) -> None:
        lines = head.replace("\r\n", "\n").split("\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or not parts[1]:
            self._respond(conn, 400, b"malformed request line\n")
            return
        method, target, version = parts
        if not re.fullmatch(r"HTTP/[0-9]\.[0-9]", version):
            self._respond(conn, 400, b"malformed request line\n")
            return
        if version not in ("HTTP/1.1", "HTTP/1.0"):
            self._respond(conn, 505, b"HTTP/1.0 or HTTP/1.1 only\n")
            return
        gzip_ok = False
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not _TOKEN.fullmatch(name):
                self._respond(conn, 400, b"malformed header\n")
                return
            if name.lower() == "accept-encoding":
                gzip_ok = gzip_ok or _accepts_gzip(value)
        if target.startswith(("http://", "https://")):  # absolute form (a proxy's): its path
            target = "/" + target.split("://", 1)[1].partition("/")[2]
        path = target.split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            self._respond(conn, 405, b"only GET and HEAD\n", extra="Allow: GET, HEAD\r\n")
            return
        if path != "/metrics":
            self._respond(conn, 404, b"only /metrics is served here\n", head_only=method == "HEAD")
            return
        try:
            body, zipped = self._body(gzip_ok)
        except Exception as exc:  # a collector's bug: the scrape fails, the monitor goes on
            self._say_error(f"{type(exc).__name__}: {exc}")
            self._respond(conn, 500, b"the metrics could not be rendered\n")
            return
        self._respond(conn, 200, body, content_type=CONTENT_TYPE, head_only=method == "HEAD",
                      extra=("Content-Encoding: gzip\r\n" if zipped else "") + "Vary: Accept-Encoding\r\n")
        self.served += 1

    def _body(self, gzip_ok: bool) -> tuple[bytes, bool]:
        now = time.monotonic()
        if self._cache is None or now - self._cache[0] > RENDER_REUSE_S:
            self._cache = (now, self._render(), None)
        when, body, zipped = self._cache
        if not gzip_ok:
            return body, False
        if zipped is None:
            zipped = gzip.compress(body, compresslevel=1, mtime=0)
            self._cache = (when, body, zipped)
        return zipped, True

    def _render(self) -> bytes:
        if self.render is not None:
            return self.render()
        from prometheus_client import generate_latest

        return generate_latest(VisibleLabels(self.registry))

    def _respond(self, conn: _Conn, status: int, body: bytes, *, content_type: str = "text/plain; charset=utf-8",
                 head_only: bool = False, extra: str = "") -> None:
        if status != 200:
            self.refused += 1
        head = (f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\n{extra}Connection: close\r\n\r\n").encode("ascii")
        conn.out = memoryview(head if head_only else head + body)
        conn.writing = True
        conn.deadline = time.monotonic() + self.response_timeout_s
        self._sel.modify(conn.sock, selectors.EVENT_WRITE, conn)
        self._write(conn)

    def _write(self, conn: _Conn) -> None:
        assert conn.out is not None
        try:
            while conn.sent < len(conn.out):
                conn.sent += conn.sock.send(conn.out[conn.sent:conn.sent + 262144], _NOSIGNAL)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:  # BrokenPipe, ConnectionReset: the scraper gave up; not a traceback
            self._aborted(exc)
            self._close(conn)
            return
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        self._close(conn)

    def _close(self, conn: _Conn) -> None:
        fd = conn.sock.fileno()
        if fd >= 0:
            self._conns.pop(fd, None)
            try:
                self._sel.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
        conn.sock.close()

    # -- what it says -------------------------------------------------------------------------
    def _aborted(self, exc: OSError) -> None:
        self.aborted += 1
        self._aborted_unsaid += 1
        now = time.monotonic()
        if now - self._last_abort_log >= LOG_EVERY_S:
            self._say(f"gpuscope monitor: /metrics: {self._aborted_unsaid} scrape(s) cut off by their client "
                      f"({exc.strerror or type(exc).__name__}); next line about this in {LOG_EVERY_S:.0f} s "
                      "at the earliest")
            self._last_abort_log = now
            self._aborted_unsaid = 0

    def _say_error(self, what: str) -> None:
        now = time.monotonic()
        if now - self._last_error_log >= LOG_EVERY_S:
            self._last_error_log = now
            self._say(f"gpuscope monitor: /metrics: internal error ({visible(what)}); serving goes on")

    def _say(self, line: str) -> None:
        if self._log is not None:
            self._log(line)
        else:
            print(line, file=sys.stderr, flush=True)


def _open_reserve() -> int | None:
    try:
        return os.open(os.devnull, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None


def _accepts_gzip(value: str) -> bool:
    for item in value.split(","):
        coding, _, params = item.strip().partition(";")
        if coding.strip().lower() != "gzip":
            continue
        q = params.strip().replace(" ", "")
        return not (q.startswith("q=") and q[2:] in ("0", "0.", "0.0", "0.00", "0.000"))
    return False


_NOSIGNAL = getattr(socket, "MSG_NOSIGNAL", 0)
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            431: "Request Header Fields Too Large", 500: "Internal Server Error", 505: "HTTP Version Not Supported"}
