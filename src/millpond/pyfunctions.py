"""Python functions in SQL: ``CREATE FUNCTION f(x BIGINT, rate DOUBLE) RETURNS DOUBLE LANGUAGE
python AS $$ def f(x, rate): ... $$``, or :meth:`millpond.Database.create_function` with a function
object.

A call carries the function whole (:class:`Spec`: name, source, types): a view's stored plan keeps
the body it was created with, and a Spark worker or a DuckDB connection needs nothing else to run
it. The source is compiled once per process (by its digest) in a namespace of its own; the
function named like the SQL function is called once per row, with Python values (``int``,
``float``, ``str``, ``bool``, ``decimal.Decimal``, ``datetime.date``/``datetime``), NULL in, NULL
out unless the function is declared ``CALLED ON NULL INPUT``. Rows travel in Arrow batches both
ways: in Spark as an Arrow UDF (:mod:`millpond.spark.functions`), in DuckDB as an Arrow function
(:func:`register_duckdb`) — no server, no py4j per row.

A call that raises is a data error (SQLSTATE 38000, "external routine exception") naming the
function, the exception and the arguments; in an ``on_error = 'null'`` view it is NULL. So is a
value that is not of the declared return type.

    >>> s = Spec("twice", "def twice(x):\\n    return 2 * x", "BIGINT", ("BIGINT",))
    >>> evaluate(s, "fail", [pa.array([1, None, 3])], pa.int64()).to_pylist()
    [2, None, 6]
    >>> try:
    ...     evaluate(s, "fail", [pa.array(["a"])], pa.int64())
    ... except PythonFunctionError as exc:
    ...     print(exc)
    [PYTHON_FUNCTION_ERROR] function twice('a') returned 'aa', which is not a BIGINT SQLSTATE: 38000
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import threading
import weakref
from dataclasses import dataclass
from typing import Callable

import pyarrow as pa

from millpond.errors import SqlError

__all__ = ["Spec", "PythonFunctionError", "check_source", "evaluate", "raised", "PYTHON_ERROR", "udf_name", "register_duckdb",
           "statement", "PARAM_TYPES"]

# the SQL types a Python function takes and returns: those with one obvious Python value
PARAM_TYPES = ("BOOLEAN", "SMALLINT", "INT", "BIGINT", "REAL", "DOUBLE", "VARCHAR", "DATE", "TIMESTAMP",
               "TIMESTAMPTZ", "DECIMAL")
SQLSTATE = "38000"
# its text in another error's; a JSONB operation's error (millpond.jsonb) is read back the same way
PYTHON_ERROR = re.compile(r"\[(?:PYTHON_FUNCTION_ERROR|INVALID_JSON_TEXT|JSONB_[A-Z_]+)\] (.*?) SQLSTATE: (\w{5})")


class PythonFunctionError(ValueError):
    """A Python function's call raised, or returned a value of another type than declared. Its
    text has Spark's error shape (``[CLASS] message SQLSTATE: 38000``), which the coordinator's fault
    isolation reads back from a failed Spark task (:func:`millpond.engine.failures.data_error`)."""


@dataclass(frozen=True)
class Spec:
    """A Python function as a call carries it."""

    name: str
    source: str
    returns: str  # SQL type
    params: tuple[str, ...]  # SQL types
    strict: bool = True  # NULL in, NULL out (RETURNS NULL ON NULL INPUT)

    def encode(self) -> str:
        return json.dumps([self.name, self.source, self.returns, list(self.params), self.strict])

    @classmethod
    def decode(cls, text: str) -> "Spec":
        name, source, returns, params, strict = json.loads(text)
        return cls(name, source, returns, tuple(params), strict)

    @property
    def digest(self) -> str:
        text = "\0".join((self.name, self.source, self.returns, *self.params, str(self.strict)))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def check_source(name: str, source: str, arity: int) -> None:
    """``source`` compiles and defines ``name`` taking ``arity`` positional arguments; else a
    ValueError saying what is wrong (the module's top level is run, as at every first call)."""
    try:
        tree = ast.parse(source, filename=f"<function {name}>")
    except SyntaxError as exc:
        raise ValueError(f"syntax error in its Python body, line {exc.lineno}: {exc.msg}") from None
    try:
        fn = _compile(Spec(name, source, "", ()))
    except PythonFunctionError as exc:
        raise ValueError(PYTHON_ERROR.search(str(exc)).group(1)) from None
    if not callable(fn):
        found = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
        raise ValueError(f"its Python body defines no function named {name!r} (the function called is the one "
                         f"named like the SQL function; defined: {', '.join(found) or 'none'})")
    import inspect

    try:
        inspect.signature(fn).bind(*range(arity))
    except TypeError:
        raise ValueError(f"its Python function {name}{inspect.signature(fn)} cannot take the {arity} "
                         f"argument{'s' * (arity != 1)} the SQL function declares") from None


def raised(exc: BaseException) -> str | None:
    """The error of a Python function inside another error's text (DuckDB's, Spark's), as
    ``function f(0) raised ZeroDivisionError: division by zero (SQLSTATE 38000)``; or None."""
    m = PYTHON_ERROR.search(str(exc))
    return f"{m.group(1)} (SQLSTATE {m.group(2)})" if m else None


_HINTS = {"int": "BIGINT", "float": "DOUBLE", "str": "VARCHAR", "bool": "BOOLEAN", "date": "DATE",
          "datetime": "TIMESTAMP", "Decimal": "DECIMAL"}


def statement(fn: Callable, params: list[str] | None, returns: str | None, name: str | None = None,
              strict: bool = True, replace: bool = False) -> str:
    """The ``CREATE FUNCTION ... LANGUAGE python`` statement of a function object: its source as
    written (decorators dropped; it runs in a namespace of its own, so what it uses must be defined or
    imported in it), its types as given or read from its annotations (``int`` BIGINT, ``float``
    DOUBLE, ``str`` VARCHAR, ``bool``, ``date``, ``datetime`` TIMESTAMP, ``Decimal``); a function it
    cannot make one of is refused with a :class:`~millpond.errors.SqlError`."""
    import inspect
    import textwrap

    if not callable(fn) or getattr(fn, "__name__", "<lambda>") == "<lambda>" or not inspect.isfunction(fn):
        raise SqlError("create_function needs a function defined with def (a lambda or a callable object has no "
                       "source of its own)")
    try:
        text = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        raise SqlError(f"create_function: the source of {fn.__name__} cannot be read (a function typed at an "
                       "interactive prompt?): pass it as SQL, CREATE FUNCTION ... LANGUAGE python AS $$ ... $$") \
            from None
    node = ast.parse(text).body[0]
    lines = text.splitlines()[node.lineno - 1:]  # without its decorators
    if node.col_offset:
        raise SqlError(f"create_function: {fn.__name__} must be defined at its block's top level")
    closure = inspect.getclosurevars(fn)
    # (an import inside it names a module as a global does; an attribute named like a global counts too)
    outside = sorted({*closure.nonlocals, *closure.globals} - set(fn.__code__.co_varnames))
    if outside:
        raise SqlError(f"create_function: {fn.__name__} uses {', '.join(outside)} from outside its own body; a "
                       "function in SQL runs alone in a Spark worker or DuckDB: import or define them inside it")
    sig = inspect.signature(fn)

    def hint(what: str, annotation: object) -> str:
        label = getattr(annotation, "__name__", annotation)
        if label not in _HINTS:
            raise SqlError(f"create_function: {fn.__name__}: give the SQL type of {what} (params=[...], "
                           f"returns=...): its annotation {label!r} is not one of {', '.join(_HINTS)}")
        return _HINTS[label]

    if params is None:
        params = [hint(f"parameter {p}", p.annotation) for p in sig.parameters.values()]
    if returns is None:
        returns = hint("its result", sig.return_annotation)
    sql_name = name or fn.__name__
    source = "\n".join(lines)
    if sql_name != fn.__name__:
        source += f"\n\n{sql_name} = {fn.__name__}\n"
    tag = "$millpond$" if "$$" in source else "$$"
    args = ", ".join(f"{p} {t}" for p, t in zip(sig.parameters, params))
    return (f"CREATE {'OR REPLACE ' if replace else ''}FUNCTION {sql_name}({args}) RETURNS {returns} LANGUAGE python"
            f"{'' if strict else ' CALLED ON NULL INPUT'} AS {tag}\n{source}\n{tag}")


_compiled: dict[tuple[str, str], Callable] = {}
_lock = threading.Lock()


def _compile(spec: Spec) -> Callable:
    key = (spec.name, spec.source)
    fn = _compiled.get(key)
    if fn is None:
        with _lock:
            if (fn := _compiled.get(key)) is None:
                namespace: dict = {"__name__": f"millpond_function_{spec.name}"}
                try:
                    exec(compile(spec.source, f"<function {spec.name}>", "exec"), namespace)  # noqa: S102 - the user's function
                except Exception as exc:  # noqa: BLE001 - its top level raised: the call's error
                    raise PythonFunctionError(f"[PYTHON_FUNCTION_ERROR] function {spec.name}: its source raised "
                                              f"{type(exc).__name__}: {exc} when loaded SQLSTATE: {SQLSTATE}") from None
                fn = namespace.get(spec.name)
                if callable(fn):
                    _compiled[key] = fn
    return fn


def evaluate(spec: Spec, mode: str, columns: list[pa.Array], out: pa.DataType) -> pa.Array:
    """The function over the rows of ``columns``, as an array of ``out`` (the engine's Arrow type
    of the declared return type). ``mode`` ``'null'``: a row whose call raises is NULL."""
    fn = _compile(spec)
    rows = list(zip(*(c.to_pylist() for c in columns)))
    results = []
    for row in rows:  # the user's function is per row: this loop is its cost
        if spec.strict and None in row:
            results.append(None)
            continue
        try:
            results.append(fn(*row))
        except Exception as exc:  # noqa: BLE001 - a data error of this row
            if mode != "null":
                raise PythonFunctionError(f"[PYTHON_FUNCTION_ERROR] function {_call(spec, row)} raised "
                                          f"{type(exc).__name__}: {exc} SQLSTATE: {SQLSTATE}") from None
            results.append(None)
    try:
        return pa.array(results, type=out)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        pass
    for i, (row, value) in enumerate(zip(rows, results)):  # which value does not fit
        try:
            pa.array([value], type=out)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            if mode != "null":
                raise PythonFunctionError(f"[PYTHON_FUNCTION_ERROR] function {_call(spec, row)} returned {value!r}, "
                                          f"which is not a {spec.returns} SQLSTATE: {SQLSTATE}") from None
            results[i] = None
    return pa.array(results, type=out)


def _call(spec: Spec, row: tuple) -> str:
    return f"{spec.name}({', '.join(repr(v) for v in row)})"


def udf_name(spec: Spec, mode: str) -> str:
    """The name a call of ``spec`` has in an engine's SQL (a Spark temporary function, a DuckDB function)."""
    return f"mp_py_{spec.digest}{'_n' if mode == 'null' else ''}"


_registered: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # a DuckDB connection: names


def register_duckdb(con, spec: Spec, mode: str, out: pa.DataType) -> str:  # noqa: ANN001
    """Register ``spec`` on a DuckDB connection as an Arrow function returning ``out`` (once); its name."""
    import duckdb
    from sqlglot import exp

    name = udf_name(spec, mode)
    if name in _registered.setdefault(con, set()):
        return name

    def duck(t: str):  # noqa: ANN202
        return duckdb.sqltype(exp.DataType.build(t, dialect="postgres").sql("duckdb"))

    def go(columns: list) -> pa.Array:
        return evaluate(spec, mode, [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in columns], out)

    names = ", ".join(f"a{i}" for i in range(len(spec.params)))  # DuckDB counts the parameters it is given
    run = eval(f"lambda {names}: go([{names}])", {"go": go})  # noqa: S307 - generated from a count
    con.create_function(name, run, [duck(t) for t in spec.params], duck(spec.returns), type="arrow",
                        null_handling="special", side_effects=False)
    _registered[con].add(name)
    return name
