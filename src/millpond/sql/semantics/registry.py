"""The SQL functions millpond evaluates with PostgreSQL's meaning: one entry each, and nothing else.

An entry (:class:`Function`) holds a function's PostgreSQL name (and the other names PostgreSQL
gives it), the sqlglot nodes its call parses to, its binding rule and the internal calls
(``MP_<NAME>``) the rule may emit, each spelled for Spark and for DuckDB by
:mod:`millpond.engine.expressions` (:func:`~millpond.engine.expressions.spelled`). Everything else
is derived from the entries: the allow-list docs/sql.md shows (a call of any other function is
refused by name), the binder's dispatch, and the name PostgreSQL gives an unnamed output column.

Each family's module registers its entries beside its rules (``functions.py`` strings,
``numbers.py``, ``datetime.py``, ``aggregates.py``, ``nested.py``, ``jsonb.py``, ``regex.py``,
``operators.py``); :mod:`millpond.sql.semantics.functions` imports them all. Adding a function
is its rule, its entry and its test (docs/contributing.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Literal

from sqlglot import exp

from millpond.sql.semantics.types import Typed

if TYPE_CHECKING:
    from millpond.sql.semantics.rewrite import Binder

__all__ = ["Function", "register", "by_node", "by_name", "names", "entries", "Rule"]

Rule = Callable[["Binder", exp.Expression], Typed]
Kind = Literal["scalar", "aggregate", "window"]


@dataclass(frozen=True)
class Function:
    name: str                                  # PostgreSQL's name: the allow-list, an unnamed column's name
    rule: Rule                                 # binds a call: arguments typed as PostgreSQL resolves it
    nodes: tuple[type[exp.Expression], ...] = ()  # what sqlglot parses a call to (none: a call by name)
    aliases: tuple[str, ...] = ()              # its other names (``char_length`` of ``length``)
    kind: Kind = "scalar"
    forms: tuple[str, ...] = ()                # internal calls its rule emits (spelled in engine/expressions.py)
    names_output: bool = True                  # an unnamed output column is called ``name`` (not an operator's)


_BY_NAME: dict[str, Function] = {}
_BY_NODE: dict[type, Function] = {}
_ENTRIES: list[Function] = []


def register(*functions: Function) -> None:
    """Add entries; a name or a node registered twice is a mistake, refused at import (and nothing
    of that entry is added)."""
    for f in functions:
        for name in (f.name, *f.aliases):
            if name in _BY_NAME:
                raise ValueError(f"function {name} is registered twice")
        for node in f.nodes:
            if node in _BY_NODE:
                raise ValueError(f"sqlglot node {node.__name__} is registered twice ({_BY_NODE[node].name}, {f.name})")
        _BY_NAME.update(dict.fromkeys((f.name, *f.aliases), f))
        _BY_NODE.update(dict.fromkeys(f.nodes, f))
        _ENTRIES.append(f)


def by_node(node: type) -> Function | None:
    return _BY_NODE.get(node)


def by_name(name: str) -> Function | None:
    return _BY_NAME.get(name.lower())


def entries() -> tuple[Function, ...]:
    return tuple(_ENTRIES)


def names(kind: Kind) -> tuple[str, ...]:
    """The PostgreSQL names of a kind's functions, aliases included, in registration order."""
    return tuple(n for f in _ENTRIES if f.kind == kind for n in (f.name, *f.aliases))
