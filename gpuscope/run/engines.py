"""The inference engines' own profilers: vLLM and SGLang servers run under ``gpuscope run``.

Both engines wrap the PyTorch profiler and start it on request (``POST /start_profile``,
``POST /stop_profile`` on their HTTP server), writing Kineto traces where they are told
(docs/run.md, "Engines' own profilers"). This module:

- recognises such a server from the run's command line and, where psutil can see them, the
  listening sockets of the run's processes (:func:`find_engine`);
- talks to its profiler endpoints (:class:`EngineEndpoint`): loopback or an address of this
  machine only, one bounded request each (a deadline over connect, send and read, at most
  :data:`MAX_RESPONSE_BYTES` read, no redirect followed), every failure one line naming the URL;
- says what the engine's profiler wrote into the run, and which profiler held a process's
  profiler session when gpuscope's window and the engine's both tried (:func:`engine_trace_notes`).

Sources (read, not copied): vLLM ``vllm/entrypoints/openai/api_server.py`` (routes registered
only while the profiler is configured), ``vllm/config/profiler.py`` (v0.13-v0.15: the
``VLLM_TORCH_PROFILER_*`` variables as deprecated aliases; PR #29912, removed in v0.16 by PR
#33536), ``vllm/profiler/wrapper.py`` (``tensorboard_trace_handler`` naming
``<instance>-rank-<r>.<ms>.pt.trace.json.gz``); SGLang
``python/sglang/srt/entrypoints/http_server.py`` and
``python/sglang/srt/managers/scheduler_profiler_mixin.py`` (commit 034c23fa:
``<profile_id>-TP-<rank>.trace.json.gz``, ``output_dir`` defaulting to
``SGLANG_TORCH_PROFILER_DIR``).
"""
from __future__ import annotations

import gzip
import ipaddress
import json
import os
import re
import shlex
import socket
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import GpuscopeError

__all__ = ["ENGINES", "EngineEndpoint", "EngineError", "EngineRefused", "EngineTimeout", "EngineUnreachable",
           "MAX_RESPONSE_BYTES", "engine_trace_notes", "find_engine", "listening_sockets", "parse_command",
           "trace_engine"]

#: kind -> (the name said to users, the default port of its HTTP server)
ENGINES: dict[str, tuple[str, int]] = {"vllm": ("vLLM", 8000), "sglang": ("SGLang", 30000)}

#: At most this much of an answer is read: the endpoints answer a line of text or a small JSON
#: object; a server that floods gets cut off here.
MAX_RESPONSE_BYTES = 8192
#: The default deadlines: starting returns once every worker's profiler started (vLLM waits
#: on an RPC to the engine core); stopping returns once the traces are written, which vLLM's
#: docs put at minutes for a big trace (they suggest raising VLLM_RPC_TIMEOUT).
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 300.0

# module names and console words that start each engine's server
_VLLM_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.cli.main")
_SGLANG_MODULES = ("sglang.launch_server",)


class EngineError(GpuscopeError):
    """An engine's profiler endpoint did not do what was asked; the message is one line that
    names the URL."""


class EngineUnreachable(EngineError):
    """Nothing answered at the URL (refused, no route, a socket path that does not exist)."""


class EngineTimeout(EngineError):
    """The request did not complete within its deadline."""


class EngineRefused(EngineError):
    """The server answered, but not with success (a 404 where the profiler is not configured,
    a 500, a redirect, or something that is not HTTP)."""


@dataclass(frozen=True)
class ServerCommand:
    """What a command line says about an engine's server: its kind and where it listens."""

    kind: str
    #: ``--port`` as given; None: the engine's default
    port: int | None
    #: ``--host`` as given; None: the engine's default
    host: str | None
    #: vLLM's ``--uds``: a Unix socket path instead of TCP
    uds: str | None


def _option(args: Sequence[str], name: str) -> str | None:
    """The value of ``--name V`` or ``--name=V`` in ``args`` (the last one given, as argparse
    keeps it)."""
    found = None
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            found = args[i + 1]
        elif a.startswith(name + "="):
            found = a[len(name) + 1:]
    return found


def _engine_start(args: Sequence[str]) -> tuple[str, int] | None:
    """(kind, index after which the engine's own arguments start) of the first word in ``args``
    that starts a vLLM or SGLang server."""
    for i, a in enumerate(args):
        word = os.path.basename(a)
        nxt = args[i + 1] if i + 1 < len(args) else ""
        module = nxt if a == "-m" else (a[2:] if a.startswith("-m") and len(a) > 2 else None)
        if module in _VLLM_MODULES or (word == "vllm" and nxt == "serve"):
            return "vllm", i + 1
        if module in _SGLANG_MODULES or (word == "sglang" and nxt in ("serve", "launch_server")):
            return "sglang", i + 1
    return None


def parse_command(command: Sequence[str]) -> ServerCommand | None:
    """The engine server a command line starts (``vllm serve MODEL --port P``, ``python -m
    vllm.entrypoints.openai.api_server``, ``python -m sglang.launch_server --port P``, also
    behind ``env``, ``nohup``, ``numactl`` or inside ``bash -c "..."``), or None."""
    args = [str(a) for a in command]
    hit = _engine_start(args)
    if hit is None:
        # a whole command in one argument (`bash -c "vllm serve ..."`): look inside it once
        for a in args:
            if " " in a:
                try:
                    inner = shlex.split(a)
                except ValueError:
                    continue
                if _engine_start(inner) is not None:
                    args, hit = inner, _engine_start(inner)
                    break
    if hit is None:
        return None
    kind, start = hit
    own = args[start:]
    port_text = _option(own, "--port")
    try:
        port = int(port_text) if port_text is not None else None
    except ValueError:
        port = None
    if port is not None and not 0 < port < 65536:
        port = None
    uds = _option(own, "--uds") if kind == "vllm" else None
    return ServerCommand(kind, port, _option(own, "--host"), uds)


def listening_sockets(pids: Iterable[int]) -> list[tuple[int, str, int]]:
    """``(pid, address, port)`` of every TCP socket listening in these processes, as psutil
    sees them; processes that are gone or not ours to inspect are passed over, and without
    psutil the list is empty."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a dependency of gpuscope
        return []
    out: list[tuple[int, str, int]] = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            conns = proc.net_connections(kind="tcp") if hasattr(proc, "net_connections") else proc.connections("tcp")
        except (psutil.Error, OSError):
            continue
        for c in conns:
            if c.status == psutil.CONN_LISTEN and c.laddr:
                out.append((pid, str(c.laddr[0]), int(c.laddr[1])))
    return out


def _local_addresses() -> set[str]:
    """The IP addresses of this machine's interfaces (psutil), loopback included."""
    addrs = {"127.0.0.1", "::1"}
    try:
        import psutil

        for entries in psutil.net_if_addrs().values():
            for e in entries:
                if e.family in (socket.AF_INET, socket.AF_INET6) and e.address:
                    addrs.add(e.address.split("%", 1)[0])
    except Exception:  # noqa: BLE001 - without psutil only loopback is known to be this machine
        pass
    return addrs


def _connect_host(listen: str | None) -> str | None:
    """Where to reach a server listening on ``listen``: loopback for a wildcard or a name
    that is this machine, the address itself when it is one of this machine's; None for
    anything else (gpuscope never sends a request to another machine)."""
    if listen is None or listen in ("", "0.0.0.0", "localhost"):
        return "127.0.0.1"
    if listen == "::":
        return "::1"
    host = listen.strip("[]").split("%", 1)[0]
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return "127.0.0.1" if host in (socket.gethostname(), socket.getfqdn()) else None
    if ip.is_loopback:
        return str(ip)
    return str(ip) if str(ip) in _local_addresses() else None


@dataclass(frozen=True)
class EngineEndpoint:
    """A vLLM or SGLang server of the run: its profiler endpoints, reached on loopback or an
    address of this machine (or vLLM's Unix socket)."""

    kind: str
    host: str
    port: int | None
    #: vLLM's ``--uds`` socket path, used instead of host and port
    uds: str | None = None
    #: the process psutil saw listening on it, when it saw one
    pid: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ENGINES:
            raise ValueError(f"unknown engine kind {self.kind!r}")
        if self.uds is None and (_connect_host(self.host) != self.host or self.port is None):
            raise ValueError(f"{self.host}: not an address of this machine (or no port)")

    @property
    def name(self) -> str:
        """``vLLM`` or ``SGLang``."""
        return ENGINES[self.kind][0]

    @property
    def url(self) -> str:
        """The server's base URL, as the messages name it."""
        if self.uds is not None:
            return f"http+unix://{self.uds}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start_profile(self, *, record_shapes: bool = True, output_dir: str | None = None,
                      num_steps: int | None = None, timeout_s: float = START_TIMEOUT_S) -> str:
        """Start the engine's profiler; returns the server's answer (one line, shortened).

        SGLang takes ``record_shapes``, ``output_dir`` (default: its
        ``SGLANG_TORCH_PROFILER_DIR``) and ``num_steps`` (it stops by itself after that many
        forward steps) in the request. vLLM's endpoint takes no parameters: its shapes and
        folder are fixed when the server starts (``--profiler-config`` or, up to v0.15, the
        variables ``gpuscope run`` sets), so the arguments are not sent to it."""
        body: dict[str, Any] | None = None
        if self.kind == "sglang":
            body = {"record_shapes": bool(record_shapes), "activities": ["CPU", "GPU"]}
            if output_dir is not None:
                body["output_dir"] = str(output_dir)
            if num_steps is not None:
                body["num_steps"] = int(num_steps)
        return self._post("/start_profile", body, timeout_s)

    def stop_profile(self, *, timeout_s: float = STOP_TIMEOUT_S) -> str:
        """Stop the engine's profiler; the engine writes its traces before it answers."""
        return self._post("/stop_profile", None, timeout_s)

    # -- one bounded HTTP/1.0 request ----------------------------------------------------------

    def _post(self, path: str, body: dict[str, Any] | None, timeout_s: float) -> str:
        url = self.url + path
        payload = json.dumps(body).encode() if body is not None else b""
        host_header = "localhost" if self.uds is not None else self.url.split("://", 1)[1]
        head = (f"POST {path} HTTP/1.0\r\nHost: {host_header}\r\nUser-Agent: gpuscope\r\n"
                f"Accept: application/json, text/plain\r\nContent-Length: {len(payload)}\r\n"
                + ("Content-Type: application/json\r\n" if body is not None else "")
                + "Connection: close\r\n\r\n").encode()
        data = self._exchange(url, head + payload, timeout_s)
        return _answer(url, data, self.kind)

    def _exchange(self, url: str, request: bytes, timeout_s: float) -> bytes:
        """Send ``request`` and read the answer until the server closes, the answer is
        complete, :data:`MAX_RESPONSE_BYTES` are in, or the deadline passes."""
        deadline = time.monotonic() + max(float(timeout_s), 0.001)

        def remaining() -> float:
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout
            return left

        try:
            if self.uds is not None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                target: Any = self.uds
            else:
                family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
                sock = socket.socket(family, socket.SOCK_STREAM)
                target = (self.host, self.port)
        except OSError as exc:
            raise EngineUnreachable(f"{url}: cannot open a socket ({exc.strerror or exc})") from None
        data = bytearray()
        try:
            sock.settimeout(remaining())
            sock.connect(target)
            view = memoryview(request)
            while view:
                sock.settimeout(remaining())
                sent = sock.send(view)
                view = view[sent:]
            while len(data) <= MAX_RESPONSE_BYTES:
                sock.settimeout(remaining())
                chunk = sock.recv(MAX_RESPONSE_BYTES + 1 - len(data))
                if not chunk:
                    break
                data += chunk
                if _complete(data):
                    break
        except socket.timeout:
            raise EngineTimeout(f"{url}: no complete answer within {timeout_s:g} s") from None
        except ConnectionRefusedError:
            raise EngineUnreachable(f"{url}: connection refused (is the server up and listening there?)") from None
        except FileNotFoundError:
            raise EngineUnreachable(f"{url}: no such socket") from None
        except OSError as exc:
            if not data:
                raise EngineUnreachable(f"{url}: {exc.strerror or exc}") from None
            # a reset after part of the answer: judge what came
        finally:
            sock.close()
        return bytes(data[:MAX_RESPONSE_BYTES + 1])


def _complete(data: bytes | bytearray) -> bool:
    """Whether an HTTP answer is all in: its headers and ``Content-Length`` bytes of body."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return False
    m = re.search(rb"\r\ncontent-length:\s*(\d+)", bytes(data[:end]), re.IGNORECASE)
    return m is not None and len(data) - (end + 4) >= int(m.group(1))


def _answer(url: str, data: bytes, kind: str) -> str:
    """The body of a successful answer as one short line; an :class:`EngineError` otherwise."""
    if not data:
        raise EngineRefused(f"{url}: the server closed the connection without an answer")
    m = re.match(rb"HTTP/\d(?:\.\d)? (\d{3})([^\r\n]*)", data)
    if m is None:
        raise EngineRefused(f"{url}: the answer is not HTTP")
    status = int(m.group(1))
    end = data.find(b"\r\n\r\n")
    body = data[end + 4:] if end >= 0 else b""
    text = " ".join(body[:512].decode("utf-8", "replace").split())
    text = "".join(ch for ch in text if ch.isprintable())[:200]
    if 300 <= status < 400:
        raise EngineRefused(f"{url}: answered {status} (a redirect; not followed)")
    if status == 404:
        why = (" (vLLM has it only when its profiler is configured: --profiler-config, or "
               "VLLM_TORCH_PROFILER_DIR up to v0.15)") if kind == "vllm" else ""
        raise EngineRefused(f"{url}: answered 404: no profiler endpoint there{why}")
    if not 200 <= status < 300:
        raise EngineRefused(f"{url}: answered {status}" + (f": {text}" if text else ""))
    if len(data) > MAX_RESPONSE_BYTES:
        text = (text[:150] + " ...") if text else "(long answer, cut)"
    if text.startswith("{"):
        try:
            doc = json.loads(body.decode("utf-8", "replace"))
        except ValueError:
            doc = None
        if isinstance(doc, dict) and doc.get("success") is False:
            raise EngineRefused(f"{url}: {str(doc.get('message') or 'failed')[:200]}")
    return text or f"{status}"


def find_engine(command: Sequence[str], pids: Sequence[int]) -> EngineEndpoint | None:
    """The vLLM or SGLang server the run's command starts, or None.

    The command line says which engine and where it listens (``--port``, ``--host``, vLLM's
    ``--uds``; else the engine's default port, 8000 or 30000). Where psutil can see the
    sockets of ``pids`` (the run's processes, the root first), a listening socket of theirs
    on that port is preferred (and names the address and the process); when the port came
    from no option and nothing listens on the default, the lowest port the first listening
    process of the tree listens on is taken (a port set in a config file). An address that
    is not this machine's gives None: gpuscope talks to loopback and this machine only."""
    parsed = parse_command(command)
    if parsed is None:
        return None
    if parsed.uds is not None:
        return EngineEndpoint(parsed.kind, "127.0.0.1", None, uds=parsed.uds)
    port = parsed.port if parsed.port is not None else ENGINES[parsed.kind][1]
    listeners = listening_sockets(pids)
    chosen = [(pid, addr) for pid, addr, p in listeners if p == port]
    if not chosen and parsed.port is None and listeners:
        order = {pid: i for i, pid in enumerate(pids)}
        first = min(listeners, key=lambda item: (order.get(item[0], len(order)), item[2]))
        port = first[2]
        chosen = [(first[0], first[1])]
    if chosen:
        # a wildcard or loopback socket before a specific address: loopback is always ours
        chosen.sort(key=lambda item: 0 if item[1] in ("0.0.0.0", "::", "127.0.0.1", "::1") else 1)
        for pid, addr in chosen:
            host = _connect_host(addr)
            if host is not None:
                return EngineEndpoint(parsed.kind, host, port, pid=pid)
        return None
    host = _connect_host(parsed.host)
    return EngineEndpoint(parsed.kind, host, port) if host is not None else None


# -- what the engines wrote into the run -------------------------------------------------------

_SGLANG_NAME = re.compile(r"-TP-\d+")
_VLLM_NAME = re.compile(r"-rank-\d+\.\d+\.pt\.trace\.json|async_llm")
#: how far into a trace :func:`trace_pid` looks for the first CPU event's pid
_PID_SNIFF_BYTES = 1 << 20
_CPU_EVENT_PID = re.compile(rb'"cat":\s*"(?:cpu_op|user_annotation|python_function|cpu_instant_event)"'
                            rb'[^{}]*?"pid":\s*(\d+)')


def trace_engine(path: str | Path, command_kind: str | None = None) -> str | None:
    """Which engine's profiler wrote the trace at ``path`` (a trace that is not one of
    gpuscope's windows): by the engine's file name (SGLang ``<id>-TP-<rank>...trace.json.gz``,
    vLLM ``<instance>-rank-<r>.<ms>.pt.trace.json.gz`` and its front end's ``async_llm``),
    else the engine the run's command starts; None when neither says."""
    name = Path(path).name
    if _SGLANG_NAME.search(name):
        return "sglang"
    if _VLLM_NAME.search(name):
        return "vllm"
    return command_kind


def trace_pid(path: str | Path) -> int | None:
    """The process a Kineto trace recorded: the pid of its first CPU event, read from the
    first MiB of the trace (decompressed); None when there is none there or it cannot be read."""
    try:
        opener = gzip.open if str(path).endswith(".gz") else open
        with opener(path, "rb") as f:
            head = f.read(_PID_SNIFF_BYTES)
    except (OSError, EOFError, gzip.BadGzipFile):
        return None
    m = _CPU_EVENT_PID.search(head)
    return int(m.group(1)) if m else None


def engine_trace_notes(command: Sequence[str], traces: Sequence[str | Path], windows: Sequence[Mapping[str, Any]],
                       events: Sequence[Mapping[str, Any]],
                       ingested: Sequence[Mapping[str, Any]] | None = None) -> list[str]:
    """Sentences for the run's summary about the engines' own profilers: how many traces each
    engine's profiler wrote into the run (``vLLM's profiler wrote 2 traces``), and per process,
    which profiler held its one Kineto session when gpuscope's window and the engine's profiler
    both tried: a window skipped because another profiler was running (the bootstrap's
    ``window_skipped`` event), or, from the ingested event counts (``ingested``, the ingest's
    ``files``), a gpuscope window and an engine trace of the same process of which only one
    recorded anything."""
    parsed = parse_command(command)
    kind_of_command = parsed.kind if parsed is not None else None
    window_paths = {str(w.get("path")) for w in windows if w.get("path")}
    window_paths |= {str(e.get("path")) for e in events if e.get("event") == "window_open" and e.get("path")}
    by_engine: dict[str, list[str]] = {}
    for t in traces:
        if str(t) in window_paths:
            continue
        kind = trace_engine(t, kind_of_command)
        if kind is not None:
            by_engine.setdefault(kind, []).append(str(t))
    notes = []
    for kind, paths in sorted(by_engine.items()):
        notes.append(f"{ENGINES[kind][0]}'s profiler wrote {len(paths)} trace{'s' if len(paths) != 1 else ''} "
                     "into the run")
    engine_name = ENGINES[kind_of_command][0] if kind_of_command else (
        ENGINES[next(iter(by_engine))][0] if len(by_engine) == 1 else "another")
    said: set[Any] = set()
    for e in events:
        if e.get("event") == "window_skipped" and "another profiler" in str(e.get("reason", "")):
            pid = e.get("pid")
            if pid in said:
                continue
            said.add(pid)
            notes.append(f"pid {pid}: {engine_name}'s profiler held the process's profiler session; gpuscope's window "
                         "was skipped (one Kineto session per process)")
    if ingested:
        counts = {str(f.get("path")): f.get("events") for f in ingested if isinstance(f, Mapping)}
        window_pid = {str(w.get("path")): w.get("pid") for w in windows if w.get("path")}
        for kind, paths in sorted(by_engine.items()):
            for path in paths:
                pid = trace_pid(path)
                if pid is None or pid in said:
                    continue
                mine = [p for p, wp in window_pid.items() if wp == pid]
                engine_events = counts.get(path)
                window_counts = [counts.get(p) for p in mine]
                window_events = [n for n in window_counts if isinstance(n, int)]
                if not mine or not isinstance(engine_events, int) or len(window_events) != len(mine):
                    continue
                if engine_events > 0 and all(n == 0 for n in window_events):
                    winner = f"{ENGINES[kind][0]}'s profiler"
                elif engine_events == 0 and any(n > 0 for n in window_events):
                    winner = "gpuscope's window"
                else:
                    continue
                said.add(pid)
                notes.append(f"pid {pid}: {winner} held the process's profiler session (one Kineto session per "
                             "process: the other's trace recorded nothing)")
    return notes
