"""What the commands share: the parser class and exit codes, argument types, the store path
(--db), a RUN argument that may be a trace path, and printing a JSON document.

Argument types refuse a value out of range in the parser, with exit 2 and one line (``--limit -1``
must not drop the oldest run, ``--top -3`` must not print "Top 25 of 28").

Imports no command module (they import this one), and only the standard library at module level
(``gpuscope --help`` stays light).
"""
from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from ..paths import default_db_path
from ..textsafe import visible

if TYPE_CHECKING:
    from ..otel.otlp import OtlpTarget

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """argparse with gpuscope's one-line, exit-2 usage errors, and no abbreviated options
    (``--model`` must not silently mean ``--model-bytes``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        # a mistyped command or choice gets the nearest one (`gpuscope anlyze`: did you mean
        # 'analyze'?) instead of the whole list; argparse's own message where nothing is near
        if action.choices is not None and value not in action.choices:
            import difflib

            near = difflib.get_close_matches(str(value), [str(c) for c in action.choices], n=1)
            if near:
                raise argparse.ArgumentError(action, f"invalid choice: {value!r}: did you mean {near[0]!r}?")
        super()._check_value(action, value)

    def error(self, message: str) -> None:  # type: ignore[override]
        from ..redact import redact_command
        from ..textsafe import visible

        # the message quotes the arguments as typed (an invalid choice, a bad number): one line,
        # their control characters shown, secrets in them redacted (`unrecognized arguments:
        # --api-key K`)
        self.exit(EXIT_USAGE, f"{self.prog}: {visible(redact_command(message) or message)} (see {self.prog} --help)\n")


def positive_int(text: str) -> int:
    """A whole number >= 1 (``--top``, ``--limit``, counts)."""
    return _int(text, 1, "a whole number of at least 1")


def non_negative_int(text: str) -> int:
    """A whole number >= 0 (indexes, token counts)."""
    return _int(text, 0, "a whole number of at least 0")


def positive_float(text: str) -> float:
    """A finite number > 0 (seconds, rates, ratios)."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a number greater than 0")
    return value


def float_between(low: float, high: float, unit: str) -> Callable[[str], float]:
    """An argument type: a finite number from ``low`` to ``high`` (the message names the range,
    for nan and the infinities too)."""
    def bounded_float(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and low <= value <= high):
            raise argparse.ArgumentTypeError(f"{text!r} must be a number from {low:g} to {high:g} {unit}")
        return value

    return bounded_float


def non_negative_float(text: str) -> float:
    """A finite number >= 0 (a delay, seconds that may be none)."""
    value = finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a number of at least 0")
    return value


def finite_float(text: str) -> float:
    """Any finite number: ``nan``, ``inf`` and ``-inf`` (which Python's ``float()`` takes) are
    refused, since no gpuscope argument means anything by them (``run --profile-delay nan``
    would compare false with every bound and pass each check)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def _int(text: str, least: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{text} is out of range: give {what}")
    return value


def add_inflate_argument(parser: argparse.ArgumentParser) -> None:
    """``--max-inflate-ratio``, for every command that ingests trace files."""
    parser.add_argument("--max-inflate-ratio", type=positive_float, default=None, metavar="N",
                        help="refuse a .gz trace that inflates more than N times its compressed size once past "
                             "256 MiB (default 200; real traces inflate about 20x: a gzip bomb ~1000x)")


def db_path(args: argparse.Namespace) -> Path:
    """The store a command works on: --db, else $GPUSCOPE_DB, else the user data directory."""
    db = getattr(args, "db", None)
    if db == "":  # not "the default": a script whose variable came out empty must not write elsewhere
        raise InputError("--db", "an empty path (leave --db out for the default store)")
    return Path(db).expanduser() if db else default_db_path()


def terminal_width() -> int:
    """The terminal's width ($COLUMNS first, 120 for a pipe or a file), at least 60 columns: text
    reports are fitted to it."""
    return max(60, shutil.get_terminal_size((120, 24)).columns)


def print_json(doc: Any) -> None:
    """Print one JSON document on stdout: indented for a terminal, compact for a pipe or a file."""
    from ..render.json import document

    sys.stdout.write(document(doc, indent=1 if sys.stdout.isatty() else None) + "\n")


def _looks_like_path(ref: str) -> bool:
    return os.sep in ref or ref.lower().endswith((".json", ".gz")) or Path(ref).is_dir()


def _already_ingested(db: Path, ref: str) -> tuple[int, str] | None:
    """The newest complete run ingested from traces with the same content as ``ref``, if any."""
    from .. import ingest, store

    store.check_store_path(db)  # a --db that cannot be a store is its own error, before any work
    if not store.store_exists(db):
        return None
    try:
        digest = ingest.inputs_digest(ingest.expand_paths([ref]))
    except (InputError, OSError):
        return None  # the ingest that follows says what is wrong with it
    con = store.connect(db, read_only=True)
    try:
        found = store.read.find_ingested_run(con, digest)
    finally:
        con.close()
    return (found.id, found.name) if found else None


def run_ref_or_ingest(db: Path, ref: str | None, name: str | None = None, announce: bool = False,
                      max_inflate_ratio: float | None = None) -> str | None:
    """A ``RUN`` argument as a run reference: a trace file or directory is ingested first and
    its new run id returned; a path-like argument that does not exist is an InputError."""
    return open_run_ref(db, ref, name, announce, keep_open=False, max_inflate_ratio=max_inflate_ratio)[0]


def open_run_ref(
    db: Path, ref: str | None, name: str | None = None, announce: bool = False, keep_open: bool = True,
    max_inflate_ratio: float | None = None,
) -> tuple[str | None, Any]:
    """:func:`run_ref_or_ingest`, and with ``keep_open`` the connection that wrote an ingested
    run (None when nothing was ingested): reading the run on it spares opening the store again."""
    if ref is not None and Path(ref).exists() and _looks_like_path(ref):
        from .. import ingest

        reused = _already_ingested(db, ref)
        if reused is not None:
            print(f"{visible(ref)}: already ingested as run {reused[0]} '{visible(reused[1])}' (same content): using it "
                  f"(gpuscope ingest makes a new run)", file=sys.stderr, flush=True)
            return str(reused[0]), None

        result = ingest.ingest(db, [ref], name=name, progress=ingest.stderr_progress(sys.stderr.isatty()),
                               keep_open=keep_open, max_inflate_ratio=max_inflate_ratio or ingest.MAX_INFLATE_RATIO)
        if announce:
            print(f"ingested {visible(ref)} as run {result.run_id} '{visible(result.name)}'", file=sys.stderr, flush=True)
        return str(result.run_id), result.connection
    if ref is not None and _looks_like_path(ref) and not Path(ref).exists() and os.sep in ref:
        raise InputError(visible(ref), "no such file or directory (and no run of that name)")
    return ref, None


#: Largest model config read (``--model``): a Hugging Face config.json is a few KiB.
MAX_MODEL_CONFIG_BYTES = 4 * 2**20


def add_model_arguments(parser: argparse.ArgumentParser, context: bool = False) -> None:
    """``--model CONFIG.json`` (and, with ``context``, ``--context TOKENS``): the model the run
    served, for the ops whose trace does not record it (issue 28, point 3)."""
    parser.add_argument("--model", metavar="CONFIG.json",
                        help="the Hugging Face config.json of the model the run served: fused MoE ops are costed "
                             "from its experts, top-k and weight quantization (stored with the run by ingest/run)")
    if context:
        parser.add_argument("--context", type=positive_int, metavar="TOKENS",
                            help="KV tokens per sequence, for attention ops whose trace records no context lengths")


def load_model(path: str) -> tuple[Any, str]:
    """The :class:`~gpuscope.analyzers.modelspec.ModelSpec` of the config file ``path`` and its
    source (the path as shown). Read bounded (4 MiB) and only from a regular file; strict JSON
    (no NaN); any problem is an :class:`InputError` naming the file, in one line."""
    import json

    from ..analyzers.modelspec import model_spec
    from ..fileio import read_regular

    shown = visible(path)
    try:
        data = read_regular(path, "model config", MAX_MODEL_CONFIG_BYTES)
    except OSError as exc:
        raise InputError(shown, f"cannot read the model config ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(shown, "not a model config: not UTF-8 text") from None

    def _no_constant(word: str) -> Any:
        raise ValueError(f"{word} is not JSON")

    try:
        config = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise InputError(shown, f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except ValueError as exc:
        raise InputError(shown, f"not valid JSON: {exc}") from None
    except RecursionError:
        raise InputError(shown, "not valid JSON: nested too deeply") from None
    stem = Path(path).name
    for suffix in (".json", ".config"):
        stem = stem.removesuffix(suffix)
    try:
        spec = model_spec(config, name=None if stem in ("", "config") else stem)
    except InputError as exc:
        raise InputError(shown, exc.message) from None
    return spec, shown


def store_model(db: Path, run_id: int, given: tuple[Any, str]) -> None:
    """Store the parsed model spec ``given`` (from :func:`load_model`) with run ``run_id``, in one
    write transaction."""
    from .. import store
    from ..store import runs

    with store.writing(db, retry_s=10.0) as con:
        runs.set_model(con, run_id, given[0].to_json(), given[1])


def otlp_target(url: str, protocol: str | None) -> OtlpTarget:
    """``--otlp [URL]`` and ``--otlp-protocol`` (``monitor``, ``run``) as a checked
    :class:`~gpuscope.otel.otlp.OtlpTarget`: a known protocol, an http(s) endpoint with a host
    (or none: the ``OTEL_EXPORTER_OTLP_*`` variables), the ``OTEL_METRIC_EXPORT_INTERVAL``.
    An error names the flag (or the variable) it came from."""
    from ..otel import otlp

    flags = {otlp.ENDPOINT_INPUT: "--otlp", otlp.PROTOCOL_INPUT: "--otlp-protocol"}
    try:
        proto = otlp.resolve_protocol(protocol)
        endpoint = otlp.check_endpoint(url) if url else None
        return otlp.OtlpTarget(endpoint, proto, otlp.export_interval_s())
    except InputError as exc:
        if exc.source not in flags:
            raise
        raise InputError(flags[exc.source], exc.message) from None


def check_otel_installed(protocol: str | None, prometheus: bool) -> None:
    """Refuse, before anything starts, an export whose packages are missing: the SDK, the OTLP
    exporter of ``protocol`` (None: no OTLP), the Prometheus reader (``prometheus``)."""
    from ..otel.otlp import missing_package

    why = missing_package(protocol, prometheus)
    if why is not None:
        raise InputError("monitor", why)  # the line both commands have always printed
