"""Measure `gpuscope monitor --prometheus` under the issue-27 class-4 attack, on loopback only.

python bench/prometheus_flood.py [--old /tmp/c4old] [--conns 1100] [--aborts 200]

Starts `monitor --replay --interval 0.1 --prometheus PORT --db TMP` with RLIMIT_NOFILE 1024 (the
usual default), measures scrape latency and the monitor's CPU before and during a flood of
half-open connections, then cuts off scrapes with RST, stops it and counts stderr lines and the
samples stored per second during the flood.
"""
from __future__ import annotations

import argparse
import os
import resource
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REC = REPO / "fixtures" / "recordings" / "synthetic_h100_a100.jsonl"


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def scrape(port: int, timeout_s: float) -> tuple[float | None, int]:
    t0 = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
            s.settimeout(max(0.1, timeout_s - (time.monotonic() - t0)))
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
                if b"\r\n\r\n" in data:
                    head, _, body = data.partition(b"\r\n\r\n")
                    for line in head.split(b"\r\n"):
                        if line.lower().startswith(b"content-length:") and len(body) >= int(line.split(b":")[1]):
                            return time.monotonic() - t0, len(body)
        return (time.monotonic() - t0, len(data)) if data else (None, 0)
    except OSError:
        return None, 0


def cpu_pct(pid: int, window_s: float) -> float:
    c0, t0 = cpu_s(pid), time.monotonic()
    time.sleep(window_s)
    return 100.0 * (cpu_s(pid) - c0) / (time.monotonic() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", default=None, help="a tree of the code before the fix (PYTHONPATH)")
    ap.add_argument("--conns", type=int, default=1100)
    ap.add_argument("--aborts", type=int, default=200)
    ap.add_argument("--flood-s", type=float, default=20.0)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="c4-"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ)
    if a.old:
        env["PYTHONPATH"] = a.old
    db = tmp / "s.duckdb"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    err_path = tmp / "stderr"
    p = subprocess.Popen([sys.executable, "-m", "gpuscope", "monitor", "--replay", str(REC), "--interval", "0.1",
                          "--prometheus", str(port), "--db", str(db)], cwd="/tmp", env=env, preexec_fn=limit,
                         stdout=subprocess.DEVNULL, stderr=open(err_path, "w"))
    for _ in range(300):
        if scrape(port, 2)[0] is not None:
            break
        time.sleep(0.1)
    lat = sorted(scrape(port, 10)[0] or 99 for _ in range(5))
    base_cpu = cpu_pct(p.pid, 3.0)
    print(f"before: scrape median {lat[2] * 1000:.1f} ms, monitor CPU {base_cpu:.1f} %")
    flood: list[socket.socket] = []
    t_flood = time.time_ns()
    import threading

    lock = threading.Lock()
    failed = [0]

    def opener(n: int) -> None:
        for _ in range(n):
            try:
                c = socket.create_connection(("127.0.0.1", port), timeout=5)
            except OSError:
                with lock:
                    failed[0] += 1
                continue
            with lock:
                flood.append(c)

    threads = [threading.Thread(target=opener, args=(a.conns // 10,)) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"flood: {len(flood)} connections made, {failed[0]} failed, in {(time.time_ns() - t_flood) / 1e9:.1f} s")
    time.sleep(1.0)
    lats = [scrape(port, 10.0) for _ in range(3)]
    during_cpu = cpu_pct(p.pid, 5.0)
    fds = len(os.listdir(f"/proc/{p.pid}/fd"))
    shown = ", ".join("no answer in 10 s" if t is None else f"{t * 1000:.1f} ms ({n} B)" for t, n in lats)
    print(f"during {a.conns} half-open: scrapes {shown}; monitor CPU {during_cpu:.1f} %; monitor fds {fds}")
    # a storm on top: 4 threads opening connections that send nothing as fast as they can
    stop = threading.Event()
    made = [0]

    def storm() -> None:
        held: list[socket.socket] = []
        while not stop.is_set():
            try:
                held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
                made[0] += 1
            except OSError:
                pass
            if len(held) > 200:
                for c in held:
                    c.close()
                held.clear()
        for c in held:
            c.close()

    storms = [threading.Thread(target=storm) for _ in range(4)]
    c0, t0 = cpu_s(p.pid), time.monotonic()
    for t in storms:
        t.start()
    storm_lat = []
    while time.monotonic() - t0 < 10:
        storm_lat.append(scrape(port, 10.0)[0])
        time.sleep(0.25)
    stop.set()
    for t in storms:
        t.join()
    storm_cpu = 100.0 * (cpu_s(p.pid) - c0) / (time.monotonic() - t0)
    ok = sorted(x for x in storm_lat if x is not None)
    print(f"storm: {made[0]} connections in 10 s ({made[0] / 10:.0f}/s) on top of the flood; "
          f"{len(ok)}/{len(storm_lat)} scrapes answered, median {ok[len(ok) // 2] * 1000 if ok else 0:.1f} ms, "
          f"max {ok[-1] * 1000 if ok else 0:.1f} ms; monitor CPU {storm_cpu:.1f} %")
    rest = max(0.0, a.flood_s - (time.time_ns() - t_flood) / 1e9)
    time.sleep(rest)
    t_flood_end = time.time_ns()
    for s in flood:
        s.close()
    # scrapes cut off by their client with RST
    aborted = 0
    for _ in range(a.aborts):
        try:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.settimeout(5)
            s.connect(("127.0.0.1", port))
            s.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
            s.recv(100)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
            aborted += 1
        except OSError:
            pass
    after = scrape(port, 10.0)[0]
    time.sleep(2)
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    err = err_path.read_text()
    print(f"after: scrape {'no answer' if after is None else f'{after * 1000:.1f} ms'}; exit {p.returncode}; "
          f"{aborted} scrapes cut off with RST; stderr {len(err.splitlines())} lines, "
          f"{err.count('Traceback')} tracebacks")
    print("stderr (first 6 lines):\n  " + "\n  ".join(err.splitlines()[:6]))
    try:
        import duckdb

        con = duckdb.connect(str(db), read_only=True)
        n = con.execute("SELECT count(*) FROM samples s JOIN devices d USING (run_id, device_id) "
                        "WHERE d.key = 'host' AND s.ts_ns BETWEEN ? AND ?", [t_flood, t_flood_end]).fetchone()[0]
        secs = (t_flood_end - t_flood) / 1e9
        print(f"host samples stored during the flood: {n} in {secs:.1f} s = {n / secs:.1f}/s (10/s expected)")
    except Exception as exc:  # noqa: BLE001
        print(f"store not read: {exc}")


if __name__ == "__main__":
    main()
