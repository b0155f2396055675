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


# statement kind -> what executes it (queries return their result; the rest return None)
_EXECUTE = {
    exp.Create: ddl.create,
    exp.Drop: ddl.drop,
    exp.Set: ddl.set_,
    exp.Insert: dml.insert,
    exp.Delete: dml.delete,
    exp.Update: dml.update,
    exp.Select: answer,
    exp.Union: answer,
}


def execute(rt: Runtime, s: exp.Expression) -> pa.Table | None:
    if keyword(s) == "FLUSH":
        rt.flush()
        return None
    run_it = _EXECUTE.get(type(s))
    if run_it is None:
        raise SqlError(f"unsupported statement: {s.sql('postgres')[:80]!r}")
    return run_it(rt, s)
