"""Statement dispatch: each parsed statement goes to the module that executes its kind."""

from __future__ import annotations

import pyarrow as pa
from sqlglot import exp

from millpond.engine.runtime import Runtime
from millpond.errors import SqlError
from millpond.serve import answer
from millpond.sql import ddl, dml
from millpond.sql.statements import keyword, parse

__all__ = ["run", "execute"]


def run(rt: Runtime, text: str) -> pa.Table | None:
    """Run one or more statements; return the result of the last query (None for DDL/DML)."""
    result = None
    for statement in parse(text):
        result = execute(rt, statement)
    return result


def execute(rt: Runtime, s: exp.Expression) -> pa.Table | None:
    if keyword(s) == "FLUSH":
        rt.flush()
    elif isinstance(s, exp.Create):
        ddl.create(rt, s)
    elif isinstance(s, exp.Drop):
        ddl.drop(rt, s)
    elif isinstance(s, exp.Set):
        ddl.set_(rt, s)
    elif isinstance(s, exp.Insert):
        dml.insert(rt, s)
    elif isinstance(s, exp.Delete):
        dml.delete(rt, s)
    elif isinstance(s, exp.Update):
        dml.update(rt, s)
    elif isinstance(s, (exp.Select, exp.Union)):
        return answer(rt, s)
    else:
        raise SqlError(f"unsupported statement: {s.sql('postgres')[:80]!r}")
    return None
