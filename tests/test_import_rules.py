"""The house rules of docs/architecture.md, checked on the source (the way import-linter checks
harlequin's layers): who may import whom, who writes which table, how big a file may grow.

The graph is read with ``ast`` from every product module, imports inside functions included
(a deferred import is still a dependency; only ``if TYPE_CHECKING:`` blocks are left out), so a
circle hidden behind a function-level import is found too.
"""
from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Where each installed package's sources live (pyproject's package-dir).
ROOTS = {"gpuscope": REPO / "gpuscope", "gpuscope.collectors": REPO / "collectors",
         "gpuscope.analyzers": REPO / "analyzers", "gpuscope.tui": REPO / "tui"}
HEAVY = ("duckdb", "_duckdb", "pyarrow", "torch", "numpy", "pandas", "textual", "opentelemetry", "psutil")
MAX_LINES = 900
# No exception: the op cost model became a package by op family (issue 28, point 8).
MAX_LINES_EXCEPT: set[str] = set()


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for pkg, root in ROOTS.items():
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            if any(p in ("__pycache__",) for p in rel.parts):
                continue
            name = ".".join([pkg, *parts]) if parts else pkg
            if pkg == "gpuscope" and parts and parts[0] in ("collectors", "analyzers", "tui"):
                continue  # not a real location (the package-dir mapping owns these names)
            found[name] = path
    return found


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                for n in ast.walk(sub):
                    if hasattr(n, "lineno"):
                        lines.add(n.lineno)
    return lines


def _resolve(module: str, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    base = module if _is_package(module) else module.rpartition(".")[0]
    for _ in range(level - 1):
        base = base.rpartition(".")[0]
    return f"{base}.{target}" if target else base


def imports_of(name: str) -> Iterator[tuple[str, int, bool]]:
    """(imported module, line, at module level) for every import in module ``name``; a
    ``from package import submodule`` names the submodule."""
    tree = ast.parse(MODULES[name].read_text(), str(MODULES[name]))
    skip = _type_checking_lines(tree)
    top_level = {id(n) for n in tree.body}
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno, id(node) in top_level
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(name, node.level, node.module)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield (sub if sub in MODULES else base), node.lineno, id(node) in top_level


def _product_edges() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for m in MODULES:
        for target, _, _ in imports_of(m):
            if target in MODULES and target != m:
                # importing a package's submodule from inside that package is not a dependency
                # on the package's __init__ (Python has already run it)
                graph[m].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def test_the_module_list_is_the_product() -> None:
    # the rules below are only as good as the list they run on
    assert "gpuscope.store.runs" in MODULES and "gpuscope.analyzers.breakdown" in MODULES
    assert "gpuscope.collectors.nvml" in MODULES and len(MODULES) > 40


def test_no_import_circle_among_product_modules() -> None:
    graph = _product_edges()
    # A package's __init__ that re-exports its submodules and a submodule that imports a
    # sibling through the package would be a circle by name only; there are none to excuse.
    cycles = _cycles(graph)
    assert not cycles, "import circles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_circle_finder_finds_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def _violations(from_prefix: str, forbidden: tuple[str, ...]) -> list[str]:
    bad = []
    for m in MODULES:
        if not _within(m, from_prefix):
            continue
        for target, line, _ in imports_of(m):
            if any(_within(target, f) for f in forbidden):
                bad.append(f"{MODULES[m].relative_to(REPO)}:{line} imports {target}")
    return bad


def test_collectors_know_nothing_of_store_sinks_cli_or_tui() -> None:
    bad = _violations("gpuscope.collectors", ("gpuscope.store", "gpuscope.sinks", "gpuscope.cli", "gpuscope.tui",
                                              "gpuscope.render", "gpuscope.run", "textual", "duckdb", "_duckdb"))
    assert not bad, "\n".join(bad)


def test_analyzers_never_import_cli_tui_render_or_textual() -> None:
    bad = _violations("gpuscope.analyzers", ("gpuscope.cli", "gpuscope.tui", "gpuscope.render", "gpuscope.sinks",
                                             "gpuscope.run", "textual"))
    assert not bad, "\n".join(bad)


def test_analyzers_never_print() -> None:
    bad = []
    for m, path in MODULES.items():
        if not _within(m, "gpuscope.analyzers"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("print", "input"):
                bad.append(f"{path.relative_to(REPO)}:{node.lineno} calls {node.func.id}()")
            if isinstance(node, ast.Attribute) and ast.unparse(node) in ("sys.stdout", "sys.stderr"):
                bad.append(f"{path.relative_to(REPO)}:{node.lineno} uses {ast.unparse(node)}")
    assert not bad, "\n".join(bad)


def test_only_tui_imports_textual() -> None:
    bad = []
    for m in MODULES:
        if _within(m, "gpuscope.tui"):
            continue
        bad += [f"{MODULES[m].relative_to(REPO)}:{line}" for target, line, _ in imports_of(m) if _within(target, "textual")]
    assert not bad, "textual imported outside tui/: " + ", ".join(bad)


def test_renderers_take_data_not_the_store_or_the_command_line() -> None:
    bad = _violations("gpuscope.render", ("gpuscope.store", "gpuscope.cli", "gpuscope.ingest", "gpuscope.run",
                                          "gpuscope.sinks", "duckdb", "_duckdb", "argparse", "textual"))
    assert not bad, "\n".join(bad)


def _command_modules() -> list[str]:
    """gpuscope/cli/<command>.py: every module of the CLI package but the parser, the shared
    helpers and ``python -m gpuscope.cli``."""
    return [m for m in MODULES if _within(m, "gpuscope.cli")
            and m not in ("gpuscope.cli", "gpuscope.cli.common", "gpuscope.cli.__main__")]


def test_shared_cli_helpers_import_no_command() -> None:
    if "gpuscope.cli.common" not in MODULES:
        pytest.fail("gpuscope/cli/common.py (the shared argument helpers) is missing")
    commands = _command_modules()
    assert commands, "no command modules under gpuscope/cli/"
    bad = _violations("gpuscope.cli.common", tuple(commands))
    # and no command module imports the CLI package (the parser) back
    for m in commands:
        bad += [f"{MODULES[m].relative_to(REPO)}:{line} imports gpuscope.cli"
                for target, line, _ in imports_of(m) if target == "gpuscope.cli"]
    assert not bad, "\n".join(bad)


def test_each_command_module_has_the_same_two_functions() -> None:
    commands = _command_modules()
    missing = []
    for m in commands:
        names = {n.name for n in ast.parse(MODULES[m].read_text()).body if isinstance(n, ast.FunctionDef)}
        if not {"add_arguments", "run"} <= names:
            missing.append(f"{m}: has {sorted(names & {'add_arguments', 'run'})}")
    assert not missing, "\n".join(missing)


def test_heavy_packages_are_imported_only_inside_functions() -> None:
    """``gpuscope --help`` and the child's bootstrap stay light: no product module imports a
    heavy package at module level (``_db`` is the one place that names DuckDB's native module,
    and is itself imported only inside functions)."""
    bad = []
    for m in MODULES:
        for target, line, top in imports_of(m):
            if not top:
                continue
            # tui/ is imported only inside `gpuscope tui`'s run() (the next test), so Textual
            # at the top of its modules costs nothing anywhere else
            if _within(m, "gpuscope.tui") and _within(target, "textual"):
                continue
            if any(_within(target, h) for h in HEAVY) and m != "gpuscope._db":
                bad.append(f"{MODULES[m].relative_to(REPO)}:{line} imports {target} at module level")
            if target == "gpuscope._db":
                bad.append(f"{MODULES[m].relative_to(REPO)}:{line} imports gpuscope._db at module level")
    assert not bad, "\n".join(bad)


def test_only_the_tui_command_imports_tui_and_only_when_it_runs() -> None:
    bad = []
    for m in MODULES:
        if _within(m, "gpuscope.tui"):
            continue
        for target, line, top in imports_of(m):
            if _within(target, "gpuscope.tui") and (m != "gpuscope.cli.tui" or top):
                bad.append(f"{MODULES[m].relative_to(REPO)}:{line} imports {target}" + (" at module level" if top else ""))
    assert not bad, "\n".join(bad)
    assert any(_within(t, "gpuscope.tui") for t, _, _ in imports_of("gpuscope.cli.tui")), "gpuscope tui runs the TUI"


_RUNS_WRITE = re.compile(r"\b(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+(\w+\.)?runs\b", re.I)
_TABLE_SQL = re.compile(
    r"\b(FROM|JOIN|INTO|UPDATE)\s+(\w+\.)?(runs|devices|samples|kernels|ops|annotations|traces|ceilings|"
    r"sampler_stats|meta)\b", re.I)


_SQL_START = re.compile(r"^\s*\(?\s*(SELECT|INSERT|UPDATE|DELETE|WITH|CREATE|ALTER|DROP)\b", re.I)


def _is_store_sql(text: str) -> bool:
    """A SQL statement (starts with a SQL verb, not prose that mentions one) that names a
    store table."""
    return bool(_SQL_START.match(text) and _TABLE_SQL.search(text))


def _string_constants(path: Path) -> Iterator[tuple[int, str]]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def test_only_the_run_lifecycle_writes_runs() -> None:
    allowed = {"gpuscope.store.runs", "gpuscope.store.schema"}  # the schema's migrations rewrite old rows
    bad = [f"{MODULES[m].relative_to(REPO)}:{line}" for m in MODULES if m not in allowed
           for line, text in _string_constants(MODULES[m]) if _RUNS_WRITE.search(text)]
    assert not bad, "runs written outside gpuscope/store/runs.py: " + ", ".join(bad)


def test_sql_against_the_store_only_where_the_architecture_allows_it() -> None:
    """SQL naming the store's tables lives in store/ (schema, the writer of each table, the
    read layer) and in analyzers' documented queries (and `gpuscope sql`, the user's own); ingest,
    the sinks, the wrapper, the CLI, the renderers, the TUI and the exporters go through store/."""
    allowed = ("gpuscope.store", "gpuscope.analyzers", "gpuscope.user_query")
    bad = [f"{MODULES[m].relative_to(REPO)}:{line}: {text.strip()[:60]!r}" for m in MODULES
           if not any(_within(m, a) for a in allowed)
           for line, text in _string_constants(MODULES[m]) if _is_store_sql(text)]
    assert not bad, "\n".join(bad)


def test_no_product_file_over_the_size_limit() -> None:
    big = [f"{MODULES[m].relative_to(REPO)}: {n} lines" for m in MODULES if m not in MAX_LINES_EXCEPT
           and (n := len(MODULES[m].read_text().splitlines())) > MAX_LINES]
    assert not big, f"over {MAX_LINES} lines:\n" + "\n".join(big)


def test_the_rules_catch_what_they_forbid(tmp_path: Path) -> None:
    """The regular expressions see the statements they are meant to see."""
    assert _RUNS_WRITE.search("UPDATE runs SET status = ?")
    assert _RUNS_WRITE.search("insert into gs.runs (id) values (1)")
    assert not _RUNS_WRITE.search("SELECT * FROM runs")
    assert _TABLE_SQL.search("SELECT id FROM runs WHERE id = ?")
    assert not _TABLE_SQL.search("the runs of a store")
    assert _is_store_sql("SELECT count(*) FROM samples WHERE run_id = ?")
    assert _is_store_sql("\n  INSERT INTO annotations VALUES (?)")
    assert not _is_store_sql("Run a SQL query over the store: SELECT * FROM runs")


def test_errors_outside_the_cli_speak_of_quantities_not_flags() -> None:
    """An error raised outside gpuscope/cli names the input or quantity (``ParameterError
    ("hz", ...)``); only the CLI spells it as a flag, so the TUI and exporters can reuse it."""
    bad = []
    for m, path in MODULES.items():
        if _within(m, "gpuscope.cli"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id.endswith("Error")
                    and node.args):
                continue
            first = node.args[0]
            text = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else \
                ast.unparse(first) if isinstance(first, ast.JoinedStr) else ""
            if text.lstrip("f'\"").startswith("--"):
                bad.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.func.id}({text[:40]!r}, ...)")
    assert not bad, "\n".join(bad)


def test_only_gpuscope_device_asks_the_spec_database_which_entry_a_device_is() -> None:
    """One way from a device to its spec entry: ``gpuscope.device.match_spec`` /
    ``match_trace_device``; the spec package itself and its user-facing ``find`` (a key or
    name the user typed) are the exceptions."""
    bad = []
    for m, path in MODULES.items():
        if m == "gpuscope.device" or _within(m, "gpuscope.specs"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("identify", "identify_trace_device") \
                    and isinstance(node.ctx, ast.Load):
                bad.append(f"{path.relative_to(REPO)}:{node.lineno}: .{node.attr}")
    assert not bad, "\n".join(bad)
