"""The claims of README.md and docs/*.md that a machine can check stay true (issue 33, "Docs
that match the behaviour"):

- every ``--flag`` a doc names for a ``gpuscope`` command (in a code span or a code block, up
  to the ``--`` that starts the wrapped command) is an option of that command's parser, as
  ``gpuscope.cli.build_parser`` builds it;
- a default a doc states in a form a machine can read (``[--hz 10]`` in a synopsis, "``--timeout``
  ... (default 60"; not "default 60 s on a GPU") is the parser's default;
- the keys docs/analysis.md lists for the ``analyze --json`` document are those of a real
  document (a synthetic H100 trace with a GEMM, a host copy and a collective), both ways;
- every repository path a doc names (``gpuscope/...``, ``tests/...``, links to ``*.md``) exists;
- every table and column docs/store.md names, and every ``table.column`` any doc names, is in
  the schema of a fresh store;
- and a behaviour docs/run.md states: after ``kill -9`` of ``gpuscope run``, the next command
  that writes the store (``ingest`` too) records the dead run as ``incomplete``.

Each check is a function from the docs' text to a list of problems, so each is also shown to
fail on a planted wrong claim.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import cpu_op, kernel, run_cli, runtime, write_trace

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _texts() -> dict[str, str]:
    return {str(p.relative_to(REPO)): p.read_text(encoding="utf-8") for p in DOCS}


def _subparsers() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    from gpuscope.cli import build_parser

    top = build_parser()
    for action in top._actions:
        if isinstance(action, argparse._SubParsersAction):
            return top, dict(action.choices)
    raise AssertionError("gpuscope's parser has no sub-commands")


# --------------------------------------------------------------------------------------------
# what a doc shows as a command line


_FENCE = re.compile(r"^```.*?^```", re.M | re.S)
_SPAN = re.compile(r"(?<!`)`([^`\n]+(?:\n[^`\n]+)?)`(?!`)")  # a code span, at most over one line break


def _code_blocks(text: str) -> Iterator[str]:
    """The command lines of a doc's code blocks (fenced, or indented by 4 spaces), one string per
    command: an indented continuation line (a synopsis' ``[--flag ...]`` on the next line) is
    joined to the line before; ``#`` comments are dropped."""
    blocks = [m.group(0) for m in _FENCE.finditer(text)]
    indented: list[str] = []
    for line in _FENCE.sub("", text).splitlines():
        if line.startswith("    ") and line.strip():
            indented.append(line)
        elif indented:
            blocks.append("\n".join(indented))
            indented = []
    if indented:
        blocks.append("\n".join(indented))
    for block in blocks:
        command = ""
        for line in block.splitlines():
            line = re.sub(r"(^|\s)#\s.*$", "", line)
            stripped = line.strip()
            if command and line[:1].isspace() and stripped.startswith(("[", "--", "|")):
                command += " " + stripped
                continue
            if command:
                yield command
            command = stripped
        if command:
            yield command


def _spans(text: str) -> Iterator[str]:
    """The code spans of a doc outside its fenced code blocks."""
    for m in _SPAN.finditer(_FENCE.sub("", text)):
        yield m.group(1).replace("\n", " ")


def command_lines(text: str, commands: set[str]) -> Iterator[tuple[str | None, str]]:
    """(sub-command or None for ``gpuscope`` itself, the rest of its command line) for every
    ``gpuscope COMMAND ...`` in a code block or span, and every span that starts with a command's
    name followed by a flag (``ingest --model``). The rest stops at a bare ``--`` (what follows
    is the command ``gpuscope run`` runs), a pipe, ``&&`` or ``;``."""
    for line in [*_code_blocks(text), *_spans(text)]:
        found = [(m.group(1), line[m.end():]) for m in re.finditer(r"(?:^|[\s(&;|])gpuscope\s+([a-z][a-z-]*|--[a-z-]+)", line)]
        if not found:
            m = re.match(r"([a-z]+)\s+(?=--?[a-z])", line)
            if m and m.group(1) in commands:
                found = [(m.group(1), line[m.end():])]
        for word, rest in found:
            # a pipe into another program (`| jq .`), not a synopsis' alternatives (`5 | --profile-when`)
            rest = re.split(r"\s--(?:\s|$)|\s\|\s+(?=[a-z])|&&|;\s", rest, maxsplit=1)[0]
            if word.startswith("--"):
                yield None, word + " " + rest
            else:
                yield word, rest


_FLAG = re.compile(r"(?<![\w/.=-])(--[a-z][a-z0-9-]*)")


def command_sections(text: str, commands: set[str]) -> Iterator[tuple[str, str]]:
    """(command, section) for each section of a doc about one command: its heading names it
    (`# gpuscope run -- CMD`, "## `gpuscope sql`"), else the doc's title does."""
    doc_command = None
    for section in re.split(r"^(?=#{1,3} )", text, flags=re.M):
        heading = re.match(r"#{1,3} .*?gpuscope ([a-z]+)", section)
        command = heading.group(1) if heading and heading.group(1) in commands else None
        if section.startswith("# "):
            doc_command = command
        command = command or doc_command
        if command is not None:
            yield command, section


def table_flags(text: str, commands: set[str]) -> Iterator[tuple[str, str]]:
    """(command, flag) for each row of an options table (its first cell a flag, ``| `--seconds N` |``,
    ``| `-q`, `--quiet` |``) in a section about one command."""
    for command, section in command_sections(text, commands):
        for cell in re.findall(r"^\| ((?:`-[^`]*`(?:,\s*|\s+or\s+)?)+) \|", section, re.M):
            for span in re.findall(r"`([^`]*)`", cell):
                yield command, span.split()[0].split("[")[0]


def flag_problems(texts: dict[str, str]) -> list[str]:
    """Flags the docs name for a command that its parser does not have."""
    top, subs = _subparsers()
    problems = []
    for doc, text in texts.items():
        for command, flag in table_flags(text, set(subs)):
            if flag.startswith("--") and flag not in subs[command]._option_string_actions:
                problems.append(f"{doc}: `gpuscope {command} {flag}` (options table): the parser has no {flag}")
        for command, rest in command_lines(text, set(subs)):
            if command is not None and command not in subs:
                if re.match(r"\s*(\[|--|[A-Z]|$)", rest):  # used as a command, not a word of prose
                    problems.append(f"{doc}: `gpuscope {command}`: no such command")
                continue
            parser = top if command is None else subs[command]
            for flag in _FLAG.findall(rest):
                if flag not in parser._option_string_actions:
                    problems.append(f"{doc}: `gpuscope {command or ''} {flag}`: the parser has no {flag}")
    return sorted(set(problems))


def stated_choices(text: str, commands: set[str]) -> Iterator[tuple[str, str, set[str]]]:
    """(command, flag, choices) for each ``--flag a|b|c`` (``a\\|b`` in a table) a doc shows."""
    for command, rest in command_lines(text, commands):
        for flag, alternatives in re.findall(r"(--[a-z][a-z0-9-]*)[ =]((?:[a-z0-9/._-]+\\?\|)+[a-z0-9/._-]+)", rest):
            if command is not None:
                yield command, flag, set(alternatives.replace("\\", "").split("|"))


def choice_problems(texts: dict[str, str]) -> list[str]:
    """Alternatives the docs list for a flag that differ from its parser's choices (where the
    parser has choices; ``export --format`` checks its own list, test below)."""
    _, subs = _subparsers()
    problems = []
    for doc, text in texts.items():
        for command, flag, choices in stated_choices(text, set(subs)):
            action = subs[command]._option_string_actions.get(flag)
            if action is not None and action.choices is not None and choices != set(action.choices):
                problems.append(f"{doc}: `gpuscope {command} {flag}` lists {'|'.join(sorted(choices))}, "
                                f"the parser takes {'|'.join(sorted(action.choices))}")
    return sorted(problems)


# --------------------------------------------------------------------------------------------
# defaults


_NUMBER = r"(-?\d+(?:\.\d+)?)"


def stated_defaults(text: str, commands: set[str]) -> Iterator[tuple[str, str, float]]:
    """(command, flag, default) where a doc states one in a form a machine can read: a synopsis'
    ``[--flag 10]`` in a code block, or a table row / sentence of a doc about one command that
    names ``--flag ...`` and then "default N" (not "default N s on a GPU": a default that
    depends on something is not the parser's)."""
    for command, rest in command_lines(text, commands):
        for flag, value in re.findall(r"\[(--[a-z][a-z0-9-]*) " + _NUMBER + r"\]", rest):
            if command is not None:
                yield command, flag, float(value)
    for command, section in command_sections(text, commands):
        yield from _prose_defaults(section, command)


def _prose_defaults(section: str, command: str) -> Iterator[tuple[str, str, float]]:
    for piece in re.split(r"\n\s*\n|\n\|", section):  # paragraphs and table rows
        for m in re.finditer(r"`(--[a-z][a-z0-9-]*)([^`=]*)`([^`]{0,120}?)\(?\bdefault:?\s+`?" + _NUMBER + r"`?"
                             r"(\s*(?:s|Hz|seconds|%))?(?=\s*[,;.)|]|\s*$)(?!\s*(?:on|when|with|for|per)\b)", piece):
            # (a span with `=`, `--profile-when busy[=UTIL]`, states its argument's default)
            yield command, m.group(1), float(m.group(4))


def default_problems(texts: dict[str, str]) -> list[str]:
    """Defaults the docs state that differ from the parser's."""
    _, subs = _subparsers()
    problems = []
    for doc, text in texts.items():
        for command, flag, value in stated_defaults(text, set(subs)):
            action = subs[command]._option_string_actions.get(flag)
            if action is None:
                continue  # flag_problems says so
            default = action.default
            if not isinstance(default, (int, float)) or isinstance(default, bool) or float(default) != value:
                problems.append(f"{doc}: `gpuscope {command} {flag}` default stated {value:g}, "
                                f"the parser's is {default!r}")
    return sorted(set(problems))


# --------------------------------------------------------------------------------------------
# the analyze --json contract


def contract_rows(text: str) -> dict[str, str]:
    """The top-level keys of docs/analysis.md's first table, each with its content cell."""
    table = text.split("| key | content |", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in table.splitlines()[2:]:
        cells = line.split(" | ", 1)
        if len(cells) != 2:
            continue
        for key in re.findall(r"`([a-z_]+)`", cells[0]):
            rows[key] = cells[1]
    return rows


def listed_keys(cell: str) -> set[str] | None:
    """The keys of a content cell that starts with its shape, ``{a, b}`` or ``[{a, b}]``."""
    m = re.match(r"\s*`\[?\{([a-z_0-9, ]+)\}\]?`", cell)
    return None if m is None else {k.strip() for k in m.group(1).split(",")}


def contract_problems(text: str, doc: dict[str, Any], strict: bool = True) -> list[str]:
    """Where docs/analysis.md's keys and a real ``analyze --json`` document disagree: the
    top-level keys both ways, and the keys of every object (or every entry of a list of objects)
    whose row gives its shape. Not ``strict``: a top-level key whose row says when it is there
    ("present when", "only with") may be absent, and a key the row's shape leaves out but its
    text names (the CPU-only trace's ``coverage.note``) may be present."""
    rows = contract_rows(text)
    conditional = {k for k, cell in rows.items() if not strict and re.match(r"\s*(present when|only with)", cell)}
    problems = [f"top-level key `{k}` is documented but not in the document"
                for k in sorted(set(rows) - set(doc) - conditional)]
    problems += [f"top-level key `{k}` is in the document but not documented" for k in sorted(set(doc) - set(rows))]
    for key, cell in rows.items():
        named = set() if strict else set(re.findall(r"`([a-z_]+)`", cell))
        keys = listed_keys(cell)
        value = doc.get(key)
        if keys is None or value is None:
            continue
        entries = value if isinstance(value, list) else [value]
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict):
                continue
            where = f"{key}[{i}]" if isinstance(value, list) else key
            problems += [f"`{where}.{k}` is documented but not in the document" for k in sorted(keys - set(entry))]
            problems += [f"`{where}.{k}` is in the document but not documented"
                         for k in sorted(set(entry) - keys - named)]
    return problems


H100_PROPS = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045870592, "computeMajor": 9,
               "computeMinor": 0, "numSms": 132, "warpSize": 32}]
GEMM_N = 4096
GEMM_US = 400.0
COPY_BYTES = 4 * 1024 * 1024
COPY_US = 200.0


def _contract_trace(path: Path) -> Path:
    """One H100 GEMM (costed: 2 N^3 FLOP), one host-to-device copy of known size, one
    collective without an op: a compute kernel, a copy and a collective in one document."""
    bf16 = "c10::BFloat16"
    return write_trace(path, [
        cpu_op("aten::mm", 100, 50, ext=1, dims=[[GEMM_N, GEMM_N], [GEMM_N, GEMM_N]], types=[bf16, bf16]),
        runtime("cudaLaunchKernel", 110, 5, corr=1, ext=1),
        kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 200, GEMM_US, corr=1),
        cpu_op("aten::copy_", 700, 50, ext=2, dims=[[1024, 1024], [1024, 1024], []], types=["float", "float", "Scalar"]),
        runtime("cudaMemcpyAsync", 710, 5, corr=2, ext=2),
        kernel("Memcpy HtoD (Pinned -> Device)", 800, COPY_US, corr=2, cat="gpu_memcpy", bytes=COPY_BYTES),
        kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)", 1100, 100, corr=99),
    ], deviceProperties=H100_PROPS)


@pytest.fixture(scope="module")
def analysis_doc(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``analyze --json --context 4096`` of the contract trace (``--context`` gives the
    ``model`` block, the collective the ``communication`` block: every top-level key is there)."""
    tmp = tmp_path_factory.mktemp("contract")
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("GPUSCOPE_SPECS", raising=False)  # the spec database as shipped
        mp.setenv("XDG_CONFIG_HOME", str(tmp / "xdg"))
        r = run_cli("analyze", _contract_trace(tmp / "t.json"), "--json", "--context", "4096",
                    "--db", tmp / "store.duckdb")
    assert r.code == 0, r.err
    return r.json()


# --------------------------------------------------------------------------------------------
# paths and the store's schema


_PATH = re.compile(r"(?<![\w/.-])((?:gpuscope|analyzers|collectors|tui|tests|bench|docs|fixtures|examples|\.ci)"
                   r"/[A-Za-z0-9_./<>*-]*[A-Za-z0-9_/*>])")
#: Paths of other projects that docs cite as sources (AMD device-metrics-exporter's metric list).
EXTERNAL_PATHS = {"docs/configuration/metricslist.md"}
#: collectors/, analyzers/ and tui/ install as gpuscope/collectors/... (docs/architecture.md)
_INSTALLED = re.compile(r"^gpuscope/(collectors|analyzers|tui)(?=/|$)")
_LINK = re.compile(r"\]\(([A-Za-z0-9_./-]+\.(?:md|svg|png|py|json))(?:#[\w-]*)?\)")


def path_problems(texts: dict[str, str]) -> list[str]:
    """Repository paths the docs name (in code spans, code blocks and relative links) that do not
    exist. Names with a placeholder (``<gpu>``, ``*``, ``NAME``, ``...``) are patterns, not paths."""
    problems = []
    for doc, text in texts.items():
        base = (REPO / doc).parent
        named = {(p, REPO) for span in [*_spans(text), *_code_blocks(text)] for p in _PATH.findall(span)}
        named |= {(p, base) for p in _LINK.findall(text) if "://" not in p}
        for path, root in named:
            if re.search(r"[<>*]|\.\.\.|[A-Z]{3,}", path.replace("README", "").replace("PERFORMANCE", "")):
                continue
            if path in EXTERNAL_PATHS:
                continue
            path = _INSTALLED.sub(r"\1", path)
            if not (root / path).exists() and not (REPO / path).exists():
                problems.append(f"{doc}: `{path}` does not exist")
    return sorted(set(problems))


def _schema() -> dict[str, set[str]]:
    """Table -> columns of a fresh store (and the keys of its key/value table ``meta``)."""
    import tempfile

    from gpuscope import store

    with tempfile.TemporaryDirectory() as tmp:
        con = store.connect(Path(tmp) / "s.duckdb")
        try:
            rows = con.execute("SELECT table_name, column_name FROM information_schema.columns").fetchall()
            meta_keys = {r[0] for r in con.execute("SELECT key FROM meta").fetchall()}
        finally:
            con.close()
    out: dict[str, set[str]] = {}
    for table, column in rows:
        out.setdefault(table, set()).add(column)
    out["meta"] |= meta_keys  # `meta.schema_version` names a key of the key/value table meta
    return out


def _top_level(paragraph: str) -> str:
    """``paragraph`` without what stands in parentheses (values and remarks, not column names)."""
    previous = None
    while previous != paragraph:
        previous, paragraph = paragraph, re.sub(r"\([^()]*\)", "", paragraph)
    return paragraph


def schema_problems(texts: dict[str, str], schema: dict[str, set[str]]) -> list[str]:
    """Tables and columns docs/store.md names that the schema lacks (its ``## table`` sections:
    the first cells of a column table, else the column names its first paragraph lists outside
    parentheses), and every ``table.column`` in any doc whose table exists but column does not."""
    problems = []
    store_md = texts.get("docs/store.md", "")
    for m in re.finditer(r"^## ([a-z_]+)\n(.*?)(?=^#|\Z)", store_md, re.M | re.S):
        table, body = m.group(1), m.group(2)
        if table not in schema:
            problems.append(f"docs/store.md: table `{table}` is not in the schema")
            continue
        if "| column |" in body:
            cells = re.findall(r"^\| ([^|]+) \|", body.split("| column |", 1)[1], re.M)
            names = {n for cell in cells for n in re.findall(r"`([a-z_0-9]+)`", cell)}
        else:
            # the first sentence of the first paragraph, outside parentheses, lists the columns
            first = re.split(r"\.\s+(?=[A-Z`])", _top_level(body.strip().split("\n\n", 1)[0]), maxsplit=1)[0]
            names = set(re.findall(r"`([a-z][a-z0-9_]*)`", first))
        problems += [f"docs/store.md: `{table}.{n}` is not a column" for n in sorted(names - schema[table])]
        if not re.search(r"see\s+`docs/", body) and "..." not in body.split("\n\n", 1)[0]:  # it lists them all
            problems += [f"docs/store.md: column `{table}.{n}` is not documented" for n in sorted(schema[table] - names)]
    # other docs' column tables of a store table ("## The `ceilings` table" in calibrate.md): both ways
    for doc, text in texts.items():
        for m in re.finditer(r"^#{2,3} The `([a-z_]+)` table\n(.*?)(?=^#|\Z)", text, re.M | re.S):
            table, body = m.group(1), m.group(2)
            if table not in schema:
                problems.append(f"{doc}: table `{table}` is not in the schema")
            elif "| column |" in body:
                cells = re.findall(r"^\| ([^|]+) \|", body.split("| column |", 1)[1], re.M)
                names = {n for cell in cells for n in re.findall(r"`([a-z_0-9]+)`", cell)}
                problems += [f"{doc}: `{table}.{n}` is not a column" for n in sorted(names - schema[table])]
                problems += [f"{doc}: column `{table}.{n}` is not documented" for n in sorted(schema[table] - names)]
    sections = set(re.findall(r"^## ([a-z_]+)$", store_md, re.M))
    if store_md:
        problems += [f"docs/store.md: table `{t}` has no section" for t in sorted(set(schema) - sections - {"meta"})]
    for doc, text in texts.items():
        for table, column in re.findall(r"`([a-z_]+)\.([a-z_0-9]+)`", text):
            if column in {"py", "md", "json", "jsonl", "gz", "csv", "parquet", "svg", "html", "toml", "sh"}:
                continue  # a file name (`runs.py`), not a column
            if table in schema and column not in schema[table]:
                problems.append(f"{doc}: `{table}.{column}` is not a column")
    return sorted(set(problems))


# --------------------------------------------------------------------------------------------
# the tests


def test_every_flag_the_docs_name_exists() -> None:
    texts = _texts()
    _, subs = _subparsers()
    # the check reads what it is meant to (it would pass vacuously if it found no flag)
    named = {(c, f) for t in texts.values() for c, rest in command_lines(t, set(subs)) for f in _FLAG.findall(rest)}
    assert {("run", "--profile-delay"), ("analyze", "--roof"), ("record", "--no-host"), ("ingest", "--model")} <= named
    tabled = {cf for t in texts.values() for cf in table_flags(t, set(subs))}
    assert {("monitor", "--seconds"), ("calibrate", "--dtypes")} <= tabled
    assert flag_problems(texts) == []


def test_a_planted_unknown_flag_or_command_is_caught() -> None:
    planted = {"docs/x.md": "Run `gpuscope analyze --roof spec --no-such-flag` or\n\n```bash\n"
                            "gpuscope ingest traces/ --name x --bogus 3   # comment --ignored\n"
                            "gpuscope frobnicate --json\n```\n"
                            "and `compare --nope`; `gpuscope run --hz 5 -- python x.py --seconds 10` is fine.\n",
               "docs/y.md": "# `gpuscope monitor`\n\n| flag | meaning |\n|---|---|\n| `--interval S` | x |\n"
                            "| `--color WHEN` | y |\n"}
    assert flag_problems(planted) == [
        "docs/x.md: `gpuscope analyze --no-such-flag`: the parser has no --no-such-flag",
        "docs/x.md: `gpuscope compare --nope`: the parser has no --nope",
        "docs/x.md: `gpuscope frobnicate`: no such command",
        "docs/x.md: `gpuscope ingest --bogus`: the parser has no --bogus",
        "docs/y.md: `gpuscope monitor --color` (options table): the parser has no --color",
    ]


def test_stated_choices_are_the_parsers() -> None:
    texts = _texts()
    _, subs = _subparsers()
    found = {(c, f) for t in texts.values() for c, f, _ in stated_choices(t, set(subs))}
    assert {("analyze", "--roof"), ("monitor", "--prometheus-names")} <= found
    assert choice_problems(texts) == []
    planted = {"docs/x.md": "`gpuscope analyze --roof spec|measured|guessed` and `gpuscope monitor "
                            "--prometheus-names otel\\|dcgm` and `gpuscope run --otlp-protocol grpc|http`"}
    assert choice_problems(planted) == [
        "docs/x.md: `gpuscope analyze --roof` lists guessed|measured|spec, the parser takes measured|spec",
        "docs/x.md: `gpuscope monitor --prometheus-names` lists dcgm|otel, the parser takes amd|dcgm|otel",
    ]


def test_export_formats_are_those_the_docs_and_the_error_name(db: Path) -> None:
    """README and docs/export.md list `--format perfetto|chrome|parquet|csv`; an unknown format
    is refused in one line that names every one of them."""
    from gpuscope.cli.export import FORMATS

    listed = [choices for t in _texts().values() for c, f, choices in stated_choices(t, {"export"})
              if (c, f) == ("export", "--format") and len(choices) > 2]
    assert listed and all(choices == set(FORMATS) for choices in listed)
    r = run_cli("export", "--format", "xlsx", "--out", str(db.parent / "x"))
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1
    assert "xlsx" in r.err and all(f in r.err for f in FORMATS), r.err


def test_stated_defaults_are_the_parsers() -> None:
    texts = _texts()
    _, subs = _subparsers()
    found = {(c, f) for text in texts.values() for c, f, _ in stated_defaults(text, set(subs))}
    # the check reads the defaults it is meant to (it would pass vacuously if it read none)
    assert {("run", "--hz"), ("run", "--top"), ("sql", "--timeout"), ("monitor", "--interval")} <= found, found
    assert default_problems(texts) == []


def test_a_planted_wrong_default_is_caught() -> None:
    planted = {"docs/run.md": "# `gpuscope run -- CMD`\n\n    gpuscope run [--hz 11] [--top 10] -- CMD\n\n"
                              "| `--profile-duration S` | a window's length (default 4) |\n"}
    assert default_problems(planted) == [
        "docs/run.md: `gpuscope run --hz` default stated 11, the parser's is 10.0",
        "docs/run.md: `gpuscope run --profile-duration` default stated 4, the parser's is 3.0",
    ]


def test_analysis_contract_keys_are_the_documents(analysis_doc: dict[str, Any]) -> None:
    text = (REPO / "docs" / "analysis.md").read_text(encoding="utf-8")
    assert {"ops", "kernels", "run", "devices", "time_us", "counts"} <= set(contract_rows(text))
    assert contract_problems(text, analysis_doc) == []
    # every kind of kernel entry is there: compute, copy and collective, each with every key
    assert {k["category"] for k in analysis_doc["kernels"]} == {"compute", "memory", "communication"}


def reason_problems(text: str) -> list[str]:
    """Coverage reasons docs/analysis.md lists against the analyzers' (``coverage.REASONS``),
    both ways."""
    from gpuscope.analyzers.coverage import REASONS

    listed = re.search(r"`reason` one of (.*?); `unjudged_us`", contract_rows(text).get("coverage", ""))
    if listed is None:
        return ["docs/analysis.md: the coverage row lists no reasons"]
    names = set(re.findall(r"`([a-z_]+)`", re.sub(r"\([^()]*(?:\([^()]*\)[^()]*)*\)", "", listed.group(1))))
    return ([f"coverage reason `{r}` is not documented" for r in sorted(set(REASONS) - names)]
            + [f"coverage reason `{r}` is documented but not a reason" for r in sorted(names - set(REASONS))])


def test_coverage_reasons_are_the_analyzers() -> None:
    text = (REPO / "docs" / "analysis.md").read_text(encoding="utf-8")
    assert reason_problems(text) == []
    planted = text.replace("`needs_context` (", "`needs_contxt` (")
    assert planted != text and reason_problems(planted) == ["coverage reason `needs_context` is not documented",
                                                            "coverage reason `needs_contxt` is documented but not a reason"]


def test_golden_documents_follow_the_contract() -> None:
    """The analyses of the shared real traces kept in fixtures/golden/ (tests/test_golden.py
    holds them to what analyze prints) have the keys docs/analysis.md lists."""
    text = (REPO / "docs" / "analysis.md").read_text(encoding="utf-8")
    goldens = sorted((REPO / "fixtures" / "golden").glob("analyze_*.json"))
    assert goldens
    for path in goldens:
        problems = contract_problems(text, json.loads(path.read_text(encoding="utf-8")), strict=False)
        assert problems == [], path.name


def test_a_planted_wrong_contract_key_is_caught(analysis_doc: dict[str, Any]) -> None:
    text = (REPO / "docs" / "analysis.md").read_text(encoding="utf-8")
    planted = text.replace("`{compute, communication, memory, idle}`", "`{compute, communication, memory, idle, gone}`")
    planted = planted.replace("| `skipped` |", "| `skipped`, `phantom` |")
    assert planted != text
    assert contract_problems(planted, analysis_doc) == [
        "top-level key `phantom` is documented but not in the document",
        "`time_us.gone` is documented but not in the document",
    ]
    doc = dict(analysis_doc, extra_key=1)
    assert contract_problems(text, doc) == ["top-level key `extra_key` is in the document but not documented"]


def test_kernels_carry_achieved_rates_computed_by_hand(analysis_doc: dict[str, Any]) -> None:
    """README and roofline.md: each kernel carries achieved FLOP/s and bytes/s (null where its
    op has no cost estimate), and every kernel entry has every key."""
    from gpuscope.analyzers.breakdown import KERNEL_KEYS

    k = {e["category"]: e for e in analysis_doc["kernels"]}
    gemm, copy, coll = k["compute"], k["memory"], k["communication"]
    flops = 2 * GEMM_N ** 3  # torch's count for mm: 2 M N K
    nbytes = 3 * GEMM_N * GEMM_N * 2  # two bf16 inputs read, one bf16 output written
    assert gemm["flops"] == pytest.approx(flops) and gemm["bytes"] == pytest.approx(nbytes)
    assert gemm["achieved_flops_per_s"] == pytest.approx(flops / (GEMM_US * 1e-6))
    assert gemm["achieved_bytes_per_s"] == pytest.approx(nbytes / (GEMM_US * 1e-6))
    assert copy["achieved_flops_per_s"] is None
    assert copy["achieved_bytes_per_s"] == pytest.approx(COPY_BYTES / (COPY_US * 1e-6))
    assert all(coll[key] is None for key in ("achieved_flops_per_s", "achieved_bytes_per_s", "bound_us", "roof_us",
                                              "pct_of_roof", "saved_us", "attribution"))
    assert copy["attribution"] is None and gemm["direction"] is None and gemm["twin"] is None
    assert all(list(e) == list(KERNEL_KEYS) for e in analysis_doc["kernels"])


def test_cpu_only_ops_carry_every_key_null_when_unknown(db: Path, tmp_path: Path) -> None:
    """docs/analysis.md: every op entry has every key, null where not known (a CPU-only trace's
    ops have no roof), as a GPU trace's do."""
    from gpuscope.analyzers.breakdown import OP_KEYS

    trace = write_trace(tmp_path / "cpu.json", [
        cpu_op("aten::mm", 10, 40, ext=1, dims=[[64, 32], [32, 16]], types=["float", "float"]),
        cpu_op("aten::relu", 60, 5, ext=2, dims=[[64, 16]], types=["float"])])
    doc = run_cli("analyze", trace, "--json").json()
    assert not doc["gpu_activity"] and len(doc["ops"]) == 2
    assert all(list(o) == list(OP_KEYS) for o in doc["ops"])
    mm = next(o for o in doc["ops"] if o["name"] == "aten::mm")
    assert mm["flops"] == 2 * 64 * 32 * 16  # costed all the same (2 M N K), but judged against no roof
    assert all(o["roof_us"] is None and o["pct_of_roof"] is None and o["achieved_flops_per_s"] is None
               for o in doc["ops"])


def test_every_path_the_docs_name_exists() -> None:
    assert path_problems(_texts()) == []


def test_a_planted_missing_path_is_caught() -> None:
    planted = {"docs/x.md": "See `gpuscope/no_such_module.py`, [the guide](nowhere.md), `tests/test_docs_claims.py` "
                            "and `fixtures/recordings/<gpu>_<what>.jsonl.gz`."}
    assert path_problems(planted) == ["docs/x.md: `gpuscope/no_such_module.py` does not exist",
                                      "docs/x.md: `nowhere.md` does not exist"]


@pytest.fixture(scope="module")
def schema() -> dict[str, set[str]]:
    return _schema()


def test_store_tables_and_columns_are_the_schemas(schema: dict[str, set[str]]) -> None:
    texts = _texts()
    assert schema_problems(texts, schema) == []
    from gpuscope.store.schema import SCHEMA_VERSION

    m = re.search(r"Schema version (\d+)", texts["docs/store.md"])
    assert m is not None and int(m.group(1)) == SCHEMA_VERSION


def test_a_planted_wrong_table_or_column_is_caught(schema: dict[str, set[str]]) -> None:
    planted = {"docs/store.md": "## runs\n| column | meaning |\n|---|---|\n| `id` | x |\n| `colour` | y |\n\n"
                                "## traces\nOne row per file: `run_id`, `trace_id`, `file_hash` (`a`, `b_c`).\n\n"
                                "## widgets\nnone\n",
               "docs/y.md": "See `kernels.attribution` and `kernels.flavour`; `model.spec` is no table.\n\n"
                            "## The `run_models` table\n\n| column | meaning |\n|---|---|\n| `run_id` | x |\n"
                            "| `spec_json`, `origin` | y |\n"}
    problems = schema_problems(planted, schema)
    assert [p for p in problems if "has no section" not in p and "is not documented" not in p] == [
        "docs/store.md: `runs.colour` is not a column",
        "docs/store.md: `traces.file_hash` is not a column",
        "docs/store.md: table `widgets` is not in the schema",
        "docs/y.md: `kernels.flavour` is not a column",
        "docs/y.md: `run_models.origin` is not a column",
    ]
    assert "docs/y.md: column `run_models.source` is not documented" in problems
    # the other way: a table without a section, a column a full list leaves out
    assert "docs/store.md: table `kernels` has no section" in problems
    assert "docs/store.md: column `runs.status` is not documented" in problems
    assert "docs/store.md: column `traces.path` is not documented" in problems


# --------------------------------------------------------------------------------------------
# docs/run.md, "Failures": the next command that writes the store records a dead run's status


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_ingest_records_a_killed_runs_status_as_incomplete(db: Path, tmp_path: Path) -> None:
    """A run left ``recording`` by a recorder that died (``kill -9``: its owner pid is gone)
    is finished ``incomplete`` by ``ingest``, ending at its last sample, as by every writer."""
    from gpuscope import store
    from gpuscope.store import runs

    con = store.connect(db)
    try:
        dead = runs.begin_recording(con, name="killed", source="run", started_ns=1_000, command=["python", "x.py"],
                                    info={"owner": {"pid": _dead_pid(), "host": store.hostname()}})
        alive = runs.begin_recording(con, name="alive", source="run", started_ns=1_000, command=None,
                                     info={"owner": {"pid": os.getpid(), "host": store.hostname()}})
        con.execute("INSERT INTO samples (run_id, device_id, ts_ns) VALUES (?, 0, 2000), (?, 0, 5000)", [dead, dead])
    finally:
        con.close()
    trace = write_trace(tmp_path / "t.json", [cpu_op("aten::add", 10, 5, ext=1)])
    r = run_cli("ingest", trace, "--db", db)
    assert r.code == 0, r.err
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        status = {r[0]: r[1:] for r in con.execute("SELECT id, status, ended_ns FROM runs").fetchall()}
    finally:
        con.close()
    assert status[dead] == ("incomplete", 5000)
    assert status[alive] == ("recording", None)
