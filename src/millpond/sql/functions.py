"""SQL scalar functions: ``CREATE FUNCTION name(args) RETURNS type LANGUAGE SQL AS 'SELECT expr'``
(or ``... RETURN expr``), inlined wherever they are called.

A call ``f(a, b)`` becomes ``CAST((body with each parameter replaced by its argument) AS type)``,
each argument converted by PostgreSQL's implicit casts only (``f(1.5)`` for an ``INT`` parameter
is refused, as PostgreSQL finds no such function)
before a query is bound, in views and in ad-hoc queries alike, so a function means exactly its
body. A function's body is one expression over its parameters (named, or ``$1``, ``$2``...); a
body that reads a table, or any other language than SQL, is refused at CREATE. A view records the
functions it calls (``f()`` in its ``depends_on``), so a function cannot be dropped or replaced
under a view whose stored plan inlined it.

    >>> from millpond.sql.statements import parse
    >>> f = define(parse("CREATE FUNCTION add1(x INT) RETURNS INT LANGUAGE SQL AS 'SELECT x + 1'")[0])
    >>> inline(parse("SELECT add1(k) FROM t")[0], {"add1": f})[0].sql("postgres")
    "SELECT CAST((MP_ARG(k, 'INT', 'add1') + 1) AS INT) FROM t"
"""

from __future__ import annotations

import textwrap
from typing import Mapping

import sqlglot
from sqlglot import exp

from millpond.catalog import FunctionDef
from millpond.catalog.types import normalize_type
from millpond.engine.expressions import mp
from millpond.errors import MillpondError, SqlError
from millpond.pyfunctions import PARAM_TYPES, Spec, check_source
from millpond.sql.statements import source

__all__ = ["define", "inline"]

MAX_DEPTH = 16  # nested calls of SQL functions (a function calling itself is refused sooner)


def define(s: exp.Create) -> FunctionDef:
    """The definition a ``CREATE FUNCTION`` statement makes, or a SqlError naming what is refused."""
    udf = s.this
    name = udf.this.name if isinstance(udf, exp.UserDefinedFunction) else udf.name
    props = {type(p).__name__: p for p in (s.args.get("properties").expressions if s.args.get("properties") else [])}
    language = props.get("LanguageProperty")
    lang = language.name.lower() if language is not None else "sql"
    if lang not in ("sql", "python"):
        raise SqlError(f"function {name!r}: LANGUAGE {language.name} is not supported (LANGUAGE SQL: a body that "
                       "is one SQL expression; LANGUAGE python: a Python function)")
    returns = next((p for p in (s.args.get("properties").expressions if s.args.get("properties") else [])
                    if isinstance(p, exp.ReturnsProperty) and p.this is not None), None)
    if returns is None or returns.args.get("is_table") or not isinstance(returns.this, exp.DataType):
        raise SqlError(f"function {name!r} needs RETURNS <type> (a scalar type; set-returning functions are "
                       "not supported)")
    if sqlglot.parse_one(f"{name}(1)", dialect="postgres").__class__ is not exp.Anonymous:
        raise SqlError(f"function {name!r}: the name is a built-in function's; choose another name")
    params = []
    for i, p in enumerate(udf.expressions if isinstance(udf, exp.UserDefinedFunction) else []):
        if isinstance(p, exp.ColumnDef):
            if any(isinstance(c.args.get("kind"), exp.DefaultColumnConstraint) for c in p.args.get("constraints") or []):
                raise SqlError(f"function {name!r}: parameter defaults are not supported")
            params.append((p.name, p.args["kind"].sql("postgres")))
        elif isinstance(p, exp.Identifier):  # an unnamed parameter: its type
            params.append(("", exp.DataType.build(p.name, dialect="postgres").sql("postgres")))
        elif isinstance(p, exp.DataType):
            params.append(("", p.sql("postgres")))
        else:
            raise SqlError(f"function {name!r}: cannot read parameter {i + 1} ({p.sql('postgres')})")
    if lang == "python":
        return _python(name, s, params, returns.this.sql("postgres"), props)
    if "CalledOnNullInputProperty" in props or "StrictProperty" in props:
        raise SqlError(f"function {name!r}: a SQL function's body decides what NULL arguments give; "
                       "STRICT / CALLED ON NULL INPUT apply to LANGUAGE python")
    body = _body(name, s.expression)
    names = {n for n, _ in params if n}
    for col in body.find_all(exp.Column):
        if col.table or col.name not in names:
            raise SqlError(f"function {name!r}: its body may only use its parameters "
                           f"({', '.join(sorted(names)) or 'none named'}), not {col.sql('postgres')!r}")
    for p in body.find_all(exp.Parameter):
        if not (p.this.is_int and 1 <= int(p.this.name) <= len(params)):
            raise SqlError(f"function {name!r} has {len(params)} parameters: ${p.this.name} is not one")
    return FunctionDef(name, source(s), tuple(params), returns.this.sql("postgres"), body.sql("postgres"))


def _python(name: str, s: exp.Create, params: list[tuple[str, str]], returns: str, props: dict) -> FunctionDef:
    """A ``LANGUAGE python`` function: its source compiles, defines ``name`` for its parameters, and
    its types are ones a Python value stands for (:data:`millpond.pyfunctions.PARAM_TYPES`)."""
    for what, t in [*((f"parameter {n or i + 1}", t) for i, (n, t) in enumerate(params)), ("RETURNS", returns)]:
        try:
            base = normalize_type(t).split("(")[0]
        except MillpondError:
            base = t
        if base not in PARAM_TYPES:
            raise SqlError(f"function {name!r}: {what} is {t}; a Python function takes and returns "
                           f"{', '.join(PARAM_TYPES)}")
    if not params:
        raise SqlError(f"function {name!r}: a Python function needs a parameter (a constant is a SQL function)")
    body = s.expression
    if not isinstance(body, (exp.Literal, exp.Heredoc)) or (isinstance(body, exp.Literal) and not body.is_string):
        raise SqlError(f"function {name!r}: LANGUAGE python needs its source as AS $$ def {name}(...): ... $$")
    text = textwrap.dedent((body.name if isinstance(body, exp.Literal) else body.this).strip("\n"))
    try:
        check_source(name, text, len(params))
    except ValueError as exc:
        raise SqlError(f"function {name!r}: {exc}") from None
    strict = "CalledOnNullInputProperty" not in props
    return FunctionDef(name, source(s), tuple(params), returns, text, "python", strict)


def _body(name: str, body: exp.Expression | None) -> exp.Expression:
    if isinstance(body, exp.Return):
        return body.this
    if isinstance(body, (exp.Literal, exp.Heredoc)):
        text = body.name if isinstance(body, exp.Literal) else body.this
        try:
            parsed = sqlglot.parse(text, dialect="postgres")
        except sqlglot.errors.ParseError as exc:
            raise SqlError(f"function {name!r}: syntax error in its body: {exc.errors[0]['description'] if exc.errors else exc}") from None
        parsed = [p for p in parsed if p is not None]
        if len(parsed) == 1 and isinstance(parsed[0], exp.Select) and len(parsed[0].expressions) == 1 and \
                not any(parsed[0].args.get(a) for a in ("from_", "where", "group", "having", "order", "limit", "with_")):
            return parsed[0].expressions[0].unalias()
    raise SqlError(f"function {name!r}: the body must be one expression, as 'SELECT <expression>' or "
                   "RETURN <expression> (a body that reads tables, or several statements, is not supported)")


def inline(query: exp.Expression, functions: Mapping[str, FunctionDef]) -> tuple[exp.Expression, set[str]]:
    """``query`` with every call of a SQL function replaced by its body; and the functions called."""
    used: set[str] = set()
    if not functions:
        return query, used
    for _ in range(MAX_DEPTH):
        calls = [c for c in query.find_all(exp.Anonymous) if c.name.lower() in functions]
        if not calls:
            return query, used
        for call in calls:
            f = functions[call.name.lower()]
            used.add(f.name)
            replacement = _expand(f, call)
            if call is query:
                query = replacement
            else:
                call.replace(replacement)
    raise SqlError(f"SQL functions nested deeper than {MAX_DEPTH} calls (does {', '.join(sorted(used))} call itself?)")


def _expand(f: FunctionDef, call: exp.Anonymous) -> exp.Expression:
    args = call.expressions
    if len(args) != len(f.params):
        raise SqlError(f"function {f.name} takes {len(f.params)} argument{'s' * (len(f.params) != 1)} "
                       f"({f.signature}), got {len(args)}")
    # each argument converted as PostgreSQL passes it: by an implicit cast only (bound in semantics)
    typed = [mp("ARG", a.copy(), exp.Literal.string(t), exp.Literal.string(f.name)) for a, (_, t) in zip(args, f.params)]
    if f.language == "python":  # the call carries the function whole: a stored plan keeps its body
        spec = Spec(f.name, f.body, f.returns, tuple(t for _, t in f.params), f.strict)
        return mp("PY", exp.Literal.string(spec.encode()), exp.Literal.string("fail"), *typed)
    by_name = {n: a for (n, _), a in zip(f.params, typed) if n}
    body = sqlglot.parse_one(f.body, dialect="postgres")

    def substitute(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and not node.table and node.name in by_name:
            return by_name[node.name].copy()
        if isinstance(node, exp.Parameter) and node.this.is_int:
            return typed[int(node.this.name) - 1].copy()
        return node

    body = body.transform(substitute)
    return exp.Cast(this=exp.paren(body, copy=False), to=exp.DataType.build(f.returns, dialect="postgres"))
