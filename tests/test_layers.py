"""The map of the code holds: every import in ``src/millpond`` goes in an allowed direction (the
docs/code-map.md), only ``spark/`` imports pyspark, and no modules import each other in
a circle."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "millpond"

BASE = {"paths", "errors", "pgerrors", "faults", "columns", "duck", "pgnumeric", "pyfunctions", "keyhash", "jsonb", "work",
        "casemap", "crc", "defaults"}
# package -> the millpond packages it may import (besides itself and BASE)
ALLOWED = {
    "store": set(),
    "catalog": {"store"},
    "log": {"store"},
    "engine": {"store", "catalog", "log"},
    "connectors": {"store", "catalog", "log", "engine"},
    "serve": {"store", "catalog", "log", "engine"},
    "sql": {"store", "catalog", "log", "engine", "serve", "connectors"},
    "spark": {"store", "catalog", "log", "engine"},
    "nexmark": set(),
    "tpch": set(),
}
ENTRY = {"__init__", "api", "wiring", "cli", "shell", "progress", "pgwire", "pgparams", "pipelines", "pgcatalog", "readers",
         "metrics", "dashboard"}  # entry points: they wire everything, Spark included


def _package(module: str) -> str:
    """``millpond.engine.plan`` -> ``engine``; ``millpond.paths`` -> ``paths``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC.parent).with_suffix("")
        name = ".".join(rel.parts)
        out[name.removesuffix(".__init__")] = path
    return out


def _imports(path: Path, *, top_level_only: bool) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found = []
    for node in nodes:
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, node.lineno))
            found += [(f"{node.module}.{a.name}", node.lineno) for a in node.names]
    return found


def test_imports_follow_the_layers():
    bad = []
    for module, path in _modules().items():
        pkg = _package(module)
        if pkg in ENTRY:
            continue
        allowed = BASE | {pkg} | ALLOWED.get(pkg, set())
        for target, line in _imports(path, top_level_only=False):
            if target.split(".")[0] == "pyspark" and pkg != "spark":
                bad.append(f"{path.relative_to(SRC)}:{line} imports {target} (only spark/ may import pyspark)")
            if target.startswith("millpond.") and target.split(".")[1] in {*BASE, *ALLOWED, *ENTRY} \
                    and _package(target) not in allowed:
                bad.append(f"{path.relative_to(SRC)}:{line} imports {target} ({pkg} may import {sorted(allowed)})")
    assert bad == []


def test_every_package_is_on_the_map():
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    modules = {p.stem for p in SRC.glob("*.py")}
    assert packages <= set(ALLOWED), f"add {sorted(packages - set(ALLOWED))} to the map (docs/code-map.md and ALLOWED)"
    assert modules <= BASE | ENTRY, f"add {sorted(modules - BASE - ENTRY)} to the map (docs/code-map.md and BASE/ENTRY)"


def _type_checking(tree: ast.Module) -> set[int]:
    """The nodes inside ``if TYPE_CHECKING:`` blocks (annotations only: never run)."""
    return {id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
            for n in ast.walk(block)}


def test_no_module_imports_itself_in_a_circle():
    """Every import counts, a function's too (``TYPE_CHECKING`` aside): a function-level import
    hides a circle from a reader as well as from a top-level check."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for m, path in modules.items():
        tree = ast.parse(path.read_text())
        skip = _type_checking(tree)
        deps = set()
        for node in ast.walk(tree):
            if id(node) in skip or not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [f"{node.module}.{a.name}" for a in node.names] + [node.module] if node.module and node.level == 0 else []
            for name in names:
                while name and name not in modules:
                    name = name.rpartition(".")[0]
                if name and name != m:
                    deps.add(name)
        # a package imports its own submodules: not a circle
        graph[m] = {d for d in deps if not (d.startswith(m + ".") and path.name == "__init__.py")}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[set[str]] = []

    def strong(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(component)
    for m in sorted(graph):
        if m not in index:
            strong(m)
    assert [sorted(c) for c in circles] == []


def test_no_source_file_is_over_500_lines():
    long = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py") if (n := len(p.read_text().splitlines())) > 500}
    assert long == {}


def test_a_spark_worker_reading_the_log_imports_only_the_log():
    """Spark loads the ``millpond`` data source in a fresh Python process for every load: the
    package imports lazily, so that process pays for the log, not the engine and the SQL layer."""
    import subprocess
    import sys

    heavy = ("millpond.api", "millpond.engine.coordinator", "millpond.sql", "millpond.spark.executor", "sqlglot",
             "polars")
    code = ("import sys, millpond.spark.log_source; "
            f"print(','.join(m for m in {heavy!r} if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == ""


def test_every_millpond_name_a_benchmark_imports_exists():
    """``make bench`` is not run by CI: a benchmark importing a name millpond no longer has would
    go unnoticed (``nexmark.py`` did, for a session). Each ``from millpond… import name`` resolves."""
    import importlib
    import importlib.util

    missing = []
    for path in sorted((SRC.parent.parent / "benchmarks").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "millpond":
                module = importlib.import_module(node.module)
                missing += [f"{path.name}: {node.module}.{a.name}" for a in node.names
                            if not hasattr(module, a.name) and importlib.util.find_spec(f"{node.module}.{a.name}") is None]
    assert missing == []
