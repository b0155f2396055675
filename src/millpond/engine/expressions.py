"""Plan expressions as engine SQL.

A plan's expressions are bound by :mod:`millpond.sql.semantics`: where PostgreSQL's meaning needs
a different expression in each engine, the tree holds an internal call ``MP_<NAME>(args)`` (a
plain sqlglot call, so a stored plan encodes it as any function, and its meaning is part of the
plan format). Here each internal call expands to the expression that evaluates it in Spark or in
DuckDB; the rest prints as sqlglot prints it.

    >>> to_duckdb(mp("ROUND_EVEN", exp.column("x")))
    '(ROUND_EVEN(x, 0))'
    >>> to_spark(mp("ROUND_EVEN", exp.column("x")))
    '(BROUND(x))'
"""

from __future__ import annotations

from typing import Callable

from sqlglot import exp

from millpond.engine import array_rules as arrays, numerics
from millpond import casemap
from millpond.jsonb import FIELD as JSONB_FIELD, udf_name as jsonb_udf
from millpond.pyfunctions import Spec, udf_name

__all__ = ["to_spark", "to_duckdb", "generate", "mp", "is_mp", "null_on_error", "python_calls", "for_types", "spelled",
           "PREFIX"]

PREFIX = "MP_"


def mp(name: str, *args: exp.Expression) -> exp.Anonymous:
    """The internal call ``MP_<name>(args)``."""
    return exp.Anonymous(this=f"{PREFIX}{name}", expressions=list(args))


def is_mp(node: exp.Expression, name: str | None = None) -> bool:
    if not isinstance(node, exp.Anonymous) or not isinstance(node.this, str):
        return False
    return node.this.upper() == f"{PREFIX}{name}" if name else node.this.upper().startswith(PREFIX)

Render = Callable[[list[str], list[exp.Expression]], str]


def to_spark(e: exp.Expression) -> str:
    return generate(e, "spark")


def for_types(e: exp.Expression) -> exp.Expression:
    """``e`` for Spark's analysis only (a DataFrame whose types are read, never run): each call
    that divides a quotient, ~9 KB of nested lambdas in Spark whose analysis takes seconds in a
    fresh JVM, becomes a NULL of its type (:mod:`millpond.engine.numerics`)."""
    def visit(n: exp.Expression) -> exp.Expression:
        if is_mp(n, "NUMERIC_TEXT"):
            return exp.cast(exp.null(), "STRING", dialect="spark")
        if is_mp(n, "NUMERIC_VALUE"):
            return exp.cast(exp.null(), f"DECIMAL({n.expressions[1].sql()}, {n.expressions[2].sql()})", dialect="spark")
        if is_mp(n, "NUMERIC_FINAL"):
            return exp.cast(exp.null(), f"STRUCT<{numerics.FIELD}: STRING, {numerics.DIVISOR}: STRING>",
                            dialect="spark")
        return n
    return e.transform(visit) if any(is_mp(n) for n in e.walk()) else e


def to_duckdb(e: exp.Expression) -> str:
    """DuckDB SQL of ``e``; it may call millpond's DuckDB functions (:mod:`millpond.duck` has them)."""
    return generate(e, "duckdb")


def generate(e: exp.Expression, dialect: str) -> str:
    if not any(_expands(n, dialect) for n in e.walk()):  # nothing to expand: no copy (a big VALUES list)
        return e.sql(dialect=dialect)
    tree = e.copy()
    nodes = [n for n in tree.walk() if _expands(n, dialect)]
    nodes.sort(key=_depth, reverse=True)  # innermost first: an outer node prints its arguments' expansion
    for node in nodes:
        text = exp.Var(this=f"({_expand(node, dialect)})")
        if node is tree:
            tree = text
        else:
            node.replace(text)
    return tree.sql(dialect=dialect)


def _expands(node: exp.Expression, dialect: str) -> bool:
    if is_mp(node):
        return not is_mp(node, "WINDOW")
    if dialect == "spark":  # sqlglot writes TIME as Spark's TIMESTAMP
        return isinstance(node, exp.Cast) and node.args["to"].this == exp.DataType.Type.TIME
    # DuckDB answers NULL or infinity where PostgreSQL (and Spark) raise "division by zero", and
    # divides decimals as doubles
    return isinstance(node, (exp.IntDiv, exp.Div, exp.Mod))


def _expand(node: exp.Expression, dialect: str) -> str:
    if dialect == "spark" and isinstance(node, exp.Cast):
        return f"{'TRY_CAST' if isinstance(node, exp.TryCast) else 'CAST'}({node.this.sql('spark')} AS TIME(6))"
    if not is_mp(node):
        return _duckdb_arithmetic(node)
    name = node.this.upper()[len(PREFIX):]
    rules = _SPARK if dialect == "spark" else _DUCKDB
    rule = rules.get(name) or _SHARED.get(name)
    if rule is None:
        raise ValueError(f"no {dialect} expansion for internal function {node.this}")
    return rule([_atom(a, dialect) for a in node.expressions], node.expressions)


def _duckdb_arithmetic(node: exp.Expression) -> str:
    a, b = _atom(node.this, "duckdb"), _atom(node.expression, "duckdb")
    if isinstance(node, exp.IntDiv):
        return _guard("error", b, f"{a} // {b}", a)
    if isinstance(node, exp.Mod):
        return _guard("error", b, f"{a} % {b}", a)
    scales = _decimal_division(node)
    if scales is not None:
        return _duckdb_numeric_div([a, b], scales)
    return _guard("error", b, f"{a} / {b}", a)


def _decimal_scale(node: exp.Expression) -> tuple[int, int] | None:
    """(precision, scale) of a CAST to DECIMAL(p,s)."""
    if isinstance(node, exp.Cast) and node.args["to"].this == exp.DataType.Type.DECIMAL:
        params = node.args["to"].expressions
        if len(params) == 2:
            return int(params[0].name), int(params[1].name)
    return None


def _decimal_division(node: exp.Expression) -> tuple[int, int, int, int] | None:
    """(s1, s2, p, s) of the bound form a numeric quotient had in plans stored before quotients kept
    PostgreSQL's display scale (``MP_NUMERIC_DIV``; such a view runs with ``plans="stored"``):
    CAST(CAST(a AS DECIMAL(p1,s1)) / CAST(b AS DECIMAL(p2,s2)) AS DECIMAL(p,s))."""
    left, right, out = _decimal_scale(node.this), _decimal_scale(node.expression), _decimal_scale(node.parent)
    if left is None or right is None or out is None:
        return None
    return left[1], right[1], out[0], out[1]


def _atom(node: exp.Expression, dialect: str) -> str:
    """An argument's SQL, parenthesized unless it cannot be split by an operator around it."""
    text = node.sql(dialect=dialect)
    if isinstance(node, (exp.Column, exp.Literal, exp.Null, exp.Boolean, exp.Paren)) or (
            isinstance(node, exp.Var) and text.startswith("(")):
        return text
    return f"({text})"


def _depth(node: exp.Expression) -> int:
    d = 0
    while node.parent is not None:
        node, d = node.parent, d + 1
    return d


def _int(node: exp.Expression) -> int:
    if isinstance(node, exp.Neg):
        return -_int(node.this)
    return int(node.this)


def _str(node: exp.Expression) -> str:
    return node.this


def _guard(raise_fn: str, divisor: str, value: str, dividend: str | None = None) -> str:
    """``value``, or PostgreSQL's error when ``divisor`` is zero (DuckDB answers NULL or infinity);
    NULL when the dividend is NULL (PostgreSQL's operators are strict: ``NULL / 0`` is NULL)."""
    if divisor.lstrip("-").replace(".", "", 1).isdigit() and float(divisor) != 0:
        return value
    null = f"WHEN {dividend} IS NULL THEN NULL " if dividend is not None else ""
    return f"CASE {null}WHEN {divisor} = 0 THEN {raise_fn}('division by zero') ELSE {value} END"


# -- regular expression replacements --------------------------------------------------------------
def _java_replacement(r: str, shift: int, whole: int) -> str:
    out, i = [], 0
    while i < len(r):
        c = r[i]
        if c == "\\" and i + 1 < len(r):
            n = r[i + 1]
            if n.isdigit():
                out.append(f"${int(n) + shift}" if n != "0" else f"${whole}")
            elif n == "&":
                out.append(f"${whole}")
            else:
                out.append("\\\\" if n == "\\" else n)
            i += 2
            continue
        out.append("\\$" if c == "$" else "\\\\" if c == "\\" else c)
        i += 1
    return "".join(out)


def _re2_replacement(r: str) -> str:
    out, i = [], 0
    while i < len(r):
        c = r[i]
        if c == "\\" and i + 1 < len(r):
            n = r[i + 1]
            out.append(f"\\{n}" if n.isdigit() else "\\0" if n == "&" else "\\\\" if n == "\\" else n)
            i += 2
            continue
        out.append("\\\\" if c == "\\" else c)
        i += 1
    return "".join(out)


def _lit(text: str, dialect: str) -> str:
    return exp.Literal.string(text).sql(dialect=dialect)


def _spark_regexp_replace(a: list[str], e: list[exp.Expression]) -> str:
    s = a[0]
    prefixed, replacement, every = _str(e[1]), _str(e[2]), _int(e[3])
    if every:
        return f"REGEXP_REPLACE({s}, {a[1]}, {_lit(_java_replacement(replacement, 0, 0), 'spark')})"
    flags, body = prefixed.split(")", 1)
    # only the first match: match the text before it lazily, and keep it
    pattern = f"{flags})^(.*?)({body})"
    return (f"REGEXP_REPLACE({s}, {_lit(pattern, 'spark')}, "
            f"{_lit('$1' + _java_replacement(replacement, 2, 2), 'spark')})")


def _duckdb_regexp_replace(a: list[str], e: list[exp.Expression]) -> str:
    options = "'g'" if _int(e[3]) else "''"
    return f"REGEXP_REPLACE({a[0]}, {a[1]}, {_lit(_re2_replacement(_str(e[2])), 'duckdb')}, {options})"


# -- numeric quotients in DuckDB ------------------------------------------------------------------
def _duckdb_numeric_div(a: list[str], scales: tuple[int, int, int, int]) -> str:
    """``a / b`` exactly, rounded half away from zero to the result scale (DuckDB divides decimals
    as doubles): the unscaled integers are divided as HUGEINTs and the digits placed again."""
    s1, s2, p, s = scales
    k = s - s1 + s2

    def unscaled(v: str) -> str:
        return f"CAST(REPLACE(CAST({v} AS VARCHAR), '.', '') AS HUGEINT)"
    num, den = unscaled(a[0]), unscaled(a[1])
    if k >= 0:
        num = f"({num} * CAST('1{'0' * k}' AS HUGEINT))"
    else:
        den = f"({den} * CAST('1{'0' * -k}' AS HUGEINT))"
    q = (f"({num} // {den} + CASE WHEN 2 * ABS({num} % {den}) >= ABS({den}) "
         f"THEN SIGN({num}) * SIGN({den}) ELSE 0 END)")
    # the unscaled quotient times 10^-s: an exact decimal product (a quotient would be a double)
    value = f"CAST(CAST({q} AS DECIMAL(38,0))" + (f" * CAST('0.{'0' * (s - 1)}1' AS DECIMAL({s},{s}))" if s else "") \
        + f" AS DECIMAL({p},{s}))"
    return f"CASE WHEN {a[1]} IS NULL OR {a[0]} IS NULL THEN NULL ELSE {_guard('error', den, value)} END"


# -- dates and times ------------------------------------------------------------------------------
_SPARK_FIELDS = {
    "year": "YEAR({0})", "month": "MONTH({0})", "day": "DAY({0})", "hour": "HOUR({0})", "minute": "MINUTE({0})",
    "second": "SECOND({0})", "micros": "CAST(EXTRACT(SECOND FROM {0}) * 1000000 AS INT) % 1000000",
    "second_micros": "CAST(EXTRACT(SECOND FROM {0}) * 1000000 AS INT)", "dow": "DAYOFWEEK({0}) - 1",
    "isodow": "WEEKDAY({0}) + 1", "doy": "DAYOFYEAR({0})", "week": "WEEKOFYEAR({0})", "quarter": "QUARTER({0})",
    "isoyear": "EXTRACT(YEAROFWEEK FROM {0})",
    "epoch_us": "TIMESTAMPDIFF(MICROSECOND, TIMESTAMP_NTZ '1970-01-01 00:00:00', {0})",
}
_DUCKDB_FIELDS = {
    "year": "YEAR({0})", "month": "MONTH({0})", "day": "DAY({0})", "hour": "HOUR({0})", "minute": "MINUTE({0})",
    "second": "SECOND({0})", "micros": "MICROSECOND({0}) % 1000000", "second_micros": "MICROSECOND({0})",
    "dow": "DAYOFWEEK({0})", "isodow": "ISODOW({0})", "doy": "DAYOFYEAR({0})", "week": "WEEK({0})",
    "quarter": "QUARTER({0})", "isoyear": "ISOYEAR({0})", "epoch_us": "EPOCH_US({0})",
}


def _field(fields: dict[str, str]) -> Render:
    return lambda a, e: fields[_str(e[0])].format(a[1])


def _spark_interval(months: int, days: int, micros: int) -> str:
    parts = []
    if months:
        parts.append(f"INTERVAL '{months}' MONTH")
    total = days * 86_400_000_000 + micros
    if total or not parts:
        sign, total = ("-" if total < 0 else ""), abs(total)
        d, rest = divmod(total, 86_400_000_000)
        h, rest = divmod(rest, 3_600_000_000)
        m, rest = divmod(rest, 60_000_000)
        sec, us = divmod(rest, 1_000_000)
        parts.append(f"INTERVAL '{sign}{d} {h:02d}:{m:02d}:{sec:02d}.{us:06d}' DAY TO SECOND")
    return " + ".join(parts)


def _duckdb_interval(months: int, days: int, micros: int) -> str:
    return f"TO_MONTHS({months}) + TO_DAYS({days}) + TO_MICROSECONDS({micros})"


# An INTERVAL value is the struct (months INT, days INT, micros BIGINT) in both engines
# (millpond.sql.semantics.intervals): MP_IV(months, days, micros) builds one, MP_IV_PART(iv, 'days')
# reads a field. MP_INTERVAL (an engine interval constant) and MP_TS_DIFF (the engine's own
# timestamp difference) are the forms of plans bound before intervals were values; they keep
# their meaning there.
def _strict(a: list[str], e: list[exp.Expression], value: str) -> str:
    """``value``, or NULL when the fields are NULL (fields of one interval are NULL together: one
    is tested, the shortest that is not a constant)."""
    fields = [t for t, n in zip(a, e) if not isinstance(n.this if isinstance(n, exp.Neg) else n, exp.Literal)]
    if not fields:
        return value
    return f"CASE WHEN {min(fields, key=len)} IS NULL THEN NULL ELSE {value} END"


def _spark_iv(a: list[str], e: list[exp.Expression]) -> str:
    # the cast makes the fields nullable, as a stored interval's are (a constant's would not be)
    return _strict(a, e, f"CAST(NAMED_STRUCT('months', CAST({a[0]} AS INT), 'days', CAST({a[1]} AS INT), "
                         f"'micros', CAST({a[2]} AS BIGINT)) AS STRUCT<months: INT, days: INT, micros: BIGINT>)")


def _duckdb_iv(a: list[str], e: list[exp.Expression]) -> str:
    return _strict(a, e, f"{{'months': CAST({a[0]} AS INTEGER), 'days': CAST({a[1]} AS INTEGER), "
                         f"'micros': CAST({a[2]} AS BIGINT)}}")


def _iv_key(render: Render) -> Render:
    """MP_IV_KEY(span): the interval of a span of microseconds, normalized (whole days, and the time
    under a day with the days' sign): the key equal intervals share."""
    def rule(a: list[str], e: list[exp.Expression]) -> str:
        s = a[0]
        day = "86400000000"
        div = "DIV" if render is _spark_iv else "//"
        return render(["0", f"({s} {div} {day})", f"({s} % {day})"], [exp.Literal.number(0), e[0], e[0]])
    return rule


def _spark_ts_add(a: list[str]) -> str:
    """``ts + (months, days, micros)``: months first (the day clamped to the month's end), then days,
    then the time, as PostgreSQL adds an interval."""
    return (f"TIMESTAMPADD(MICROSECOND, CAST({a[3]} AS BIGINT), TIMESTAMPADD(DAY, CAST({a[2]} AS INT), "
            f"TIMESTAMPADD(MONTH, CAST({a[1]} AS INT), {a[0]})))")


def _duckdb_ts_add(a: list[str]) -> str:
    return (f"((({a[0]} + TO_MONTHS(CAST({a[1]} AS INTEGER))) + TO_DAYS(CAST({a[2]} AS INTEGER))) "
            f"+ TO_MICROSECONDS(CAST({a[3]} AS BIGINT)))")


def _spark_trunc(a: list[str], e: list[exp.Expression]) -> str:
    unit = {"microseconds": "MICROSECOND", "milliseconds": "MILLISECOND"}.get(_str(e[0]), _str(e[0]).upper())
    return f"CAST(DATE_TRUNC('{unit}', {a[1]}) AS TIMESTAMP_NTZ)"


_SHARED: dict[str, Render] = {
    # millpond.jsonb's Arrow functions, registered under these names in both engines
    "JSONB": lambda a, e: f"{jsonb_udf(_str(e[0]))}({', '.join(a[1:])})",
    "POWER": lambda a, e: f"POWER({a[0]}, {a[1]})",
    "TS_DIFF": lambda a, e: f"{a[0]} - {a[1]}",
}


def _numeric(rule: Callable[[list[str], str], str], dialect: str) -> Render:
    return lambda a, e: rule(a, dialect)


# a quotient (a NUMERIC with its own display scale) is its PostgreSQL text (millpond.engine.numerics);
# Spark keeps the operands of a division, DuckDB divides (by numerics.UDF: millpond.duck registers it)
_NUMERIC = {"NUMERIC_OF": numerics.numeric_of, "NUMERIC_TEXT": numerics.text_of, "NUMERIC_FINAL": numerics.final,
            "NUMERIC_VALUE": numerics.value_of, "NUMERIC_NEG": numerics.negate, "NUMERIC_ABS": numerics.absolute}

_SPARK: dict[str, Render] = {
    # arrays, records and maps (millpond.sql.semantics.nested): 1-based, NULL out of range
    **arrays.SPARK,
    "MAP_GET": lambda a, e: f"try_element_at({a[0]}, {a[1]})",
    "ATTR": lambda a, e: f"{a[0]}.`{_str(e[1]).replace('`', '``')}`",
    # registered on the session by the builder (millpond.spark.build), which sees every call first
    "PY": lambda a, e: f"{udf_name(Spec.decode(e[0].name), e[1].name)}({', '.join(a[2:])})",
    "JSONB_CONST": lambda a, e: f"named_struct('{JSONB_FIELD}', {a[0]})",
    "ROUND_EVEN": lambda a, e: f"BROUND({a[0]})",
    "ERROR": lambda a, e: f"RAISE_ERROR({a[0]})",
    "TEXT_TO_BOOL": lambda a, e: _text_to_bool(a[0], "RAISE_ERROR"),
    "OCTET_LENGTH": lambda a, e: f"OCTET_LENGTH({a[0]})",
    # PostgreSQL's case mapping: an Arrow function running DuckDB's (millpond.casemap; millpond.spark.functions registers it)
    "UPPER": lambda a, e: f"{casemap.udf_name('UPPER')}({a[0]})",
    "LOWER": lambda a, e: f"{casemap.udf_name('LOWER')}({a[0]})",
    "STRPOS": lambda a, e: f"LOCATE({a[1]}, {a[0]})",
    "REVERSE": lambda a, e: f"REVERSE({a[0]})",
    "TRIM": lambda a, e: f"TRIM({_str(e[2])} {a[1]} FROM {a[0]})",
    "CONCAT": lambda a, e: f"CONCAT_WS('', {', '.join(a)})",
    "REGEXP_REPLACE": _spark_regexp_replace,
    "REGEXP_EXTRACT": lambda a, e: f"CASE WHEN {a[0]} RLIKE {a[1]} THEN REGEXP_EXTRACT({a[0]}, {a[1]}, {a[2]}) END",
    "RANDOM": lambda a, e: "RAND()",
    "FIELD": _field(_SPARK_FIELDS),
    "DATE_DIFF": lambda a, e: f"DATEDIFF({a[0]}, {a[1]})",
    "DATE_TRUNC": _spark_trunc,
    "INTERVAL": lambda a, e: _spark_interval(*(_int(x) for x in e)),
    "ADD_INTERVAL": lambda a, e: f"{a[0]} + {_spark_interval(*(_int(x) for x in e[1:]))}",
    "IV": _spark_iv,
    "IV_KEY": lambda a, e: _iv_key(_spark_iv)(a, e),
    "IV_PART": lambda a, e: f"{a[0]}.{_str(e[1])}",
    "TS_ADD": lambda a, e: _spark_ts_add(a),
    "TRUNC_INT": lambda a, e: f"CAST({a[0]} AS BIGINT)",
    # a TIMESTAMPTZ (Spark's TIMESTAMP, a UTC instant) to and from the UTC wall clock, whatever the
    # session time zone is: millpond's TimeZone is UTC
    "TZ_TO_TS": lambda a, e: f"TIMESTAMPADD(MICROSECOND, UNIX_MICROS({a[0]}), TIMESTAMP_NTZ '1970-01-01 00:00:00')",
    "TS_TO_TZ": lambda a, e: f"TIMESTAMP_MICROS({_SPARK_FIELDS['epoch_us'].format(a[0])})",
    **{name: _numeric(rule, "spark") for name, rule in _NUMERIC.items()},
    "NUMERIC_DIV": _numeric(numerics.defer, "spark"),
    "NUMERIC_DEFER": _numeric(numerics.defer, "spark"),
}

def _duckdb_python(a: list[str], e: list[exp.Expression]) -> str:
    from millpond import duck
    from millpond.catalog.types import arrow_type

    spec = Spec.decode(e[0].name)
    return f"{duck.python_function(spec, e[1].name, arrow_type(spec.returns))}({', '.join(a[2:])})"


_DUCKDB: dict[str, Render] = {
    **arrays.DUCKDB,
    "MAP_GET": lambda a, e: f"{a[0]}[{a[1]}]",
    "ATTR": lambda a, e: f"struct_extract({a[0]}, {a[1]})",
    "PY": _duckdb_python,  # registered on the process's DuckDB as its SQL is written
    "JSONB_CONST": lambda a, e: f"struct_pack({JSONB_FIELD} := {a[0]})",
    "ROUND_EVEN": lambda a, e: f"ROUND_EVEN({a[0]}, 0)",
    "ERROR": lambda a, e: f"error({a[0]})",
    "TEXT_TO_BOOL": lambda a, e: _text_to_bool(a[0], "error"),
    "OCTET_LENGTH": lambda a, e: f"STRLEN({a[0]})",
    "UPPER": lambda a, e: casemap.duckdb_sql("UPPER", a[0]),
    "LOWER": lambda a, e: casemap.duckdb_sql("LOWER", a[0]),
    "STRPOS": lambda a, e: f"CAST(STRPOS({a[0]}, {a[1]}) AS INTEGER)",
    # code points reversed, as PostgreSQL (DuckDB's REVERSE reverses grapheme clusters)
    "REVERSE": lambda a, e: f"ARRAY_TO_STRING(LIST_REVERSE(REGEXP_EXTRACT_ALL({a[0]}, '(?s).')), '')",
    "TRIM": lambda a, e: f"{ {'BOTH': 'TRIM', 'LEADING': 'LTRIM', 'TRAILING': 'RTRIM'}[_str(e[2])]}({a[0]}, {a[1]})",
    "CONCAT": lambda a, e: f"CONCAT({', '.join(a)})",
    "REGEXP_REPLACE": _duckdb_regexp_replace,
    "REGEXP_EXTRACT": lambda a, e: (f"CASE WHEN REGEXP_MATCHES({a[0]}, {a[1]}) "
                                    f"THEN REGEXP_EXTRACT({a[0]}, {a[1]}, {a[2]}) END"),
    "RANDOM": lambda a, e: "RANDOM()",
    "FIELD": _field(_DUCKDB_FIELDS),
    "DATE_DIFF": lambda a, e: f"CAST({a[0]} - {a[1]} AS INTEGER)",
    "DATE_TRUNC": lambda a, e: f"DATE_TRUNC('{_str(e[0])}', {a[1]})",
    "INTERVAL": lambda a, e: _duckdb_interval(*(_int(x) for x in e)),
    "ADD_INTERVAL": lambda a, e: f"{a[0]} + ({_duckdb_interval(*(_int(x) for x in e[1:]))})",
    "IV": _duckdb_iv,
    "IV_KEY": lambda a, e: _iv_key(_duckdb_iv)(a, e),
    "IV_PART": lambda a, e: f"STRUCT_EXTRACT({a[0]}, '{_str(e[1])}')",
    "TS_ADD": lambda a, e: _duckdb_ts_add(a),
    "TRUNC_INT": lambda a, e: f"CAST(TRUNC({a[0]}) AS BIGINT)",
    "TZ_TO_TS": lambda a, e: f"TIMEZONE('UTC', {a[0]})",
    "TS_TO_TZ": lambda a, e: f"TIMEZONE('UTC', {a[0]})",
    **{name: _numeric(rule, "duckdb") for name, rule in _NUMERIC.items()},
    "NUMERIC_DIV": _numeric(numerics.divide, "duckdb"),
    # the quotient as Spark keeps it (its operands): a view's rows made by DuckDB in a task (spark/local.py)
    "NUMERIC_DEFER": _numeric(numerics.defer, "duckdb"),
}


def spelled(name: str) -> set[str]:
    """The engines the internal call ``MP_<name>`` is spelled for (each SQL function's entry names
    its calls: :mod:`millpond.sql.semantics.registry`)."""
    return {d for d, rules in (("spark", _SPARK), ("duckdb", _DUCKDB)) if name in rules or name in _SHARED}


def _text_to_bool(x: str, raise_fn: str) -> str:
    v = f"LOWER(TRIM({x}))"
    trues = "'t', 'tr', 'tru', 'true', 'y', 'ye', 'yes', 'on', '1'"
    falses = "'f', 'fa', 'fal', 'fals', 'false', 'n', 'no', 'of', 'off', '0'"
    return (f"CASE WHEN {x} IS NULL THEN NULL WHEN {v} IN ({trues}) THEN TRUE WHEN {v} IN ({falses}) THEN FALSE "
            f"ELSE {raise_fn}('invalid input syntax for type boolean') END")


_TRY = {exp.Add: "try_add", exp.Sub: "try_subtract", exp.Mul: "try_multiply", exp.Div: "try_divide",
        exp.Mod: "try_mod"}


def null_on_error(e: exp.Expression) -> exp.Expression:
    """``e`` with each operation that can raise a data error (division by zero, overflow, a bad
    cast) replaced by its form that yields NULL instead (RisingWave's non-strict mode)."""
    def fn(n: exp.Expression) -> exp.Expression:  # a replaced node's children are not visited: recurse
        if type(n) in _TRY:
            return exp.Anonymous(this=_TRY[type(n)], expressions=[null_on_error(n.this), null_on_error(n.expression)])
        if isinstance(n, exp.IntDiv):
            a, b = null_on_error(n.this), null_on_error(n.expression)
            return exp.If(this=exp.EQ(this=b, expression=exp.Literal.number(0)), true=exp.Null(),
                          false=exp.IntDiv(this=a, expression=b.copy()))
        if type(n) is exp.Cast:
            return exp.TryCast(this=null_on_error(n.this), to=n.args["to"], safe=True)
        if is_mp(n, "JSONB") and _str(n.expressions[-1]) == "fail":  # its data error gives NULL
            *args, _ = n.expressions
            return exp.Anonymous(this=n.this, expressions=[*map(null_on_error, args), exp.Literal.string("null")])
        if is_mp(n, "PY"):  # a Python function whose call raises gives NULL
            spec, _, *args = n.expressions
            return mp("PY", spec.copy(), exp.Literal.string("null"), *map(null_on_error, args))
        return n
    return e.copy().transform(fn)


def python_calls(e: exp.Expression) -> list[tuple[Spec, str]]:
    """The Python functions ``e`` calls (:mod:`millpond.pyfunctions`), with their error mode."""
    return [(Spec.decode(n.expressions[0].name), n.expressions[1].name) for n in e.walk() if is_mp(n, "PY")]

