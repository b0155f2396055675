"""The registry of SQL functions (:mod:`millpond.sql.semantics.registry`) is the one place a
function is written: every name in it reaches its entry's rule, every internal call an entry names
is spelled for both engines, and a name outside it is refused."""

from __future__ import annotations

import pytest
from sqlglot import exp

from millpond.engine.expressions import spelled
from millpond.errors import SqlError
from millpond.sql.semantics import FUNCTIONS, bind, registry
from millpond.sql.semantics import types as T
from millpond.sql.statements import parse

_ARGS = ("t.s", "t.s, 1", "t.s, 1, 2", "")
_SYNTAX = {"extract": "extract(year FROM t.s)", "position": "position('a' IN t.s)",
           "current_timestamp": "current_timestamp", "current_date": "current_date"}  # PostgreSQL's own syntax


def _call(name: str) -> exp.Expression:
    """``name(...)`` as millpond parses it, with the first number of arguments that parses."""
    for args in _ARGS:
        try:
            return parse(f"SELECT {name}({args}) FROM t AS t")[0].selects[0]
        except Exception:  # noqa: BLE001  another arity
            continue
    raise AssertionError(f"{name}(...) does not parse with any of {_ARGS}")


def test_every_name_of_an_entry_reaches_that_entry():
    """A call by any of an entry's names parses to a node of that entry, or to a call by name that
    finds it: no name is listed that the dispatch cannot reach (or reaches elsewhere)."""
    wrong = []
    for f in registry.entries():
        for name in (f.name, *f.aliases):
            node = parse(f"SELECT {_SYNTAX[name]} FROM t AS t")[0].selects[0] if name in _SYNTAX else _call(name)
            found = registry.by_name(node.name) if isinstance(node, exp.Anonymous) else registry.by_node(type(node))
            if found is not f:
                wrong.append(f"{name}: parsed to {type(node).__name__}, which reaches "
                             f"{found.name if found else 'no entry'}")
    assert wrong == []


def test_every_name_binds_through_the_dispatch():
    """Binding a call by each name reaches a rule: whatever its arguments make of it (a wrong type,
    a wrong count), it is a SqlError naming the problem, never a crash, and never a refusal as
    unknown (the dispatch and the allow-list are the same entries)."""
    refused = []
    for f in registry.entries():
        for name in (f.name, *f.aliases):
            for args in _ARGS:
                text = _SYNTAX.get(name, f"{name}({args})")
                try:
                    q = parse(f"SELECT {text} AS x FROM t AS t")[0]
                except Exception:  # noqa: BLE001  another arity
                    continue
                try:
                    bind(q, {"t": {"s": T.TEXT}}, view=False)
                except SqlError as exc:
                    if "is not supported (see the list" in str(exc):
                        refused.append(f"{text}: {exc}")
    assert refused == []


def test_every_internal_call_an_entry_names_is_spelled_for_both_engines():
    missing = {f"{f.name}: MP_{form}": sorted({"spark", "duckdb"} - spelled(form))
               for f in registry.entries() for form in f.forms if spelled(form) != {"spark", "duckdb"}}
    assert missing == {}


def test_the_allow_list_is_the_registry():
    assert set(FUNCTIONS) == {n for f in registry.entries() if f.kind == "scalar" for n in (f.name, *f.aliases)}
    assert len(FUNCTIONS) == len(set(FUNCTIONS))


def test_a_name_or_node_registered_twice_is_refused():
    with pytest.raises(ValueError, match="function length is registered twice"):
        registry.register(registry.Function("length", lambda b, n: (n, T.INTEGER)))
    with pytest.raises(ValueError, match="node Length is registered twice"):
        registry.register(registry.Function("my_length", lambda b, n: (n, T.INTEGER), (exp.Length,)))
    assert registry.by_name("my_length") is None  # nothing of a refused entry is added


def test_a_function_outside_the_registry_is_refused_by_name():
    q = parse("SELECT soundex(t.s) FROM t AS t")[0]
    with pytest.raises(SqlError, match=r"function soundex\(\) is not supported"):
        bind(q, {"t": {"s": T.TEXT}}, view=False)
