"""``to_char(date or timestamp, format)`` as PostgreSQL reads its format.

PostgreSQL reads a format left to right: at each position the longest of its keywords that starts
there (case-sensitive: ``MM`` and ``mm`` are both the month, ``Month``/``month``/``MONTH`` the name
in that case, ``Mm`` is a literal ``M`` then the month), else the character itself, copied. ``FM``
(fill mode) and ``TM`` before a keyword drop its padding, ``FX`` is accepted, ``TH``/``th`` after a
number add its ordinal suffix, ``SP`` after one is ignored (PostgreSQL's to_char does not spell);
text in double quotes is copied (a backslash there quotes the next character), and a backslash
before a double quote outside them copies the quote. The result is a concatenation of integer
fields of the timestamp (:func:`~millpond.sql.semantics.datetime.field`), padded, and names, in SQL
both engines share. millpond's TimeZone is UTC, so ``TZ`` is ``UTC`` for a TIMESTAMPTZ (empty for a
TIMESTAMP) and ``OF``/``TZH``/``TZM`` are ``+00``/``+00``/``00``. Every pattern is checked against
a PostgreSQL server in ``tests/sql/test_to_char.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from sqlglot import exp

from millpond.engine.expressions import mp
from millpond.sql.semantics import types as T
from millpond.sql.semantics.casts import cast
from millpond.sql.semantics.types import Typed, refuse

if TYPE_CHECKING:
    from millpond.sql.semantics.rewrite import Binder

__all__ = ["to_char", "TO_CHAR_PATTERNS"]

_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December"]
_DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]
_ROMAN = ["I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX", "X", "XI", "XII"]

# numeric keywords (both cases, as PostgreSQL's table has them) -> (field, zero-padded width; 0: none)
_NUMBERS = {"HH24": ("hour", 2), "HH12": ("hour12", 2), "HH": ("hour12", 2), "MI": ("minute", 2),
            "SS": ("second", 2), "MS": ("millis", 3), "US": ("micros", 6), "SSSSS": ("ssss", 0), "SSSS": ("ssss", 0),
            "YYYY": ("year", 4), "YYY": ("year3", 3), "YY": ("year2", 2), "Y": ("year1", 1),
            "IYYY": ("isoyear", 4), "IYY": ("isoyear3", 3), "IY": ("isoyear2", 2), "I": ("isoyear1", 1),
            "MM": ("month", 2), "DDD": ("doy", 3), "DD": ("day", 2), "D": ("dow1", 1), "IDDD": ("isodoy", 3),
            "ID": ("isodow", 1), "IW": ("week", 2), "WW": ("woy", 2), "W": ("wom", 1), "Q": ("quarter", 1),
            "CC": ("century", 2), "J": ("julian", 0),
            **{f"FF{n}": (f"ff{n}", n) for n in range(1, 7)}}
_NUMERIC = {**_NUMBERS, **{k.lower(): v for k, v in _NUMBERS.items()}}
_NAMES = {"MONTH", "Month", "month", "MON", "Mon", "mon", "DAY", "Day", "day", "DY", "Dy", "dy", "RM", "rm"}
_MERIDIEM = {"AM": ("AM", "PM"), "PM": ("AM", "PM"), "am": ("am", "pm"), "pm": ("am", "pm"),
             "A.M.": ("A.M.", "P.M."), "P.M.": ("A.M.", "P.M."), "a.m.": ("a.m.", "p.m."), "p.m.": ("a.m.", "p.m.")}
_ERA = {"AD": ("AD", "BC"), "BC": ("AD", "BC"), "ad": ("ad", "bc"), "bc": ("ad", "bc"),
        "A.D.": ("A.D.", "B.C."), "B.C.": ("A.D.", "B.C."), "a.d.": ("a.d.", "b.c."), "b.c.": ("a.d.", "b.c.")}
_ZONE = {"TZ", "tz", "OF", "TZH", "TZM", "tzh", "tzm"}
_OTHER = {"Y,YYY": "thousands", "y,yyy": "thousands", "FX": "fx", "fx": "fx"}
TO_CHAR_PATTERNS = sorted([*_NUMERIC, *_NAMES, *_MERIDIEM, *_ERA, *_ZONE, *_OTHER], key=lambda p: (-len(p), p))


def to_char(b: Binder, node: exp.Expression) -> Typed:
    args = node.expressions if isinstance(node, exp.Anonymous) else [node.this, node.args.get("format")]
    if len(args) != 2:
        raise refuse("to_char takes a value and a format", node)
    fmt = args[1]
    if not (isinstance(fmt, exp.Literal) and fmt.is_string):
        raise refuse("to_char needs a constant format", node)
    value, t = b.value(args[0])
    if t.number:
        raise refuse("to_char of a number is not supported (of a date or timestamp); use round() and casts",
                      node)
    if t.kind not in ("date", "timestamp", "timestamp with time zone"):
        raise refuse(f"to_char of {t} is not supported", node)
    ts = cast(value, t, T.TIMESTAMP, node)
    zoned = t.kind == "timestamp with time zone"
    pieces = [_piece(token, ts, zoned) for token in _tokens(fmt.this)]
    if not pieces:
        return exp.Literal.string(""), T.TEXT
    out = pieces[0]
    for p in pieces[1:]:
        out = exp.DPipe(this=out, expression=p, safe=False)
    # a constant format still yields NULL for a NULL timestamp
    return exp.Case(ifs=[exp.If(this=exp.Is(this=ts.copy(), expression=exp.Null()), true=exp.Null())],
                    default=out), T.TEXT


def _tokens(fmt: str) -> list[tuple[str, str, bool, str]]:
    """(kind, keyword or literal text, fill mode, suffix) tokens of a PostgreSQL datetime format."""
    out: list[tuple[str, str, bool, str]] = []
    i, mode = 0, ""
    while i < len(fmt):
        prefix = fmt[i:i + 2]
        if prefix in ("FM", "fm", "TM", "tm"):
            mode, i = mode or prefix.upper(), i + 2  # FM: no padding; TM: names without padding
            continue
        if fmt[i] == '"':
            i += 1
            text = []
            while i < len(fmt) and fmt[i] != '"':
                if fmt[i] == "\\" and i + 1 < len(fmt):
                    i += 1
                text.append(fmt[i])
                i += 1
            out.append(("text", "".join(text), False, ""))
            i += 1
            continue
        if fmt.startswith('\\"', i):
            out.append(("text", '"', False, ""))
            i += 2
            continue
        found = next((p for p in TO_CHAR_PATTERNS if fmt.startswith(p, i)), None)
        if found is None:
            out.append(("text", fmt[i], False, ""))
            i += 1
            continue
        i += len(found)
        suffix = ""
        if found in _NUMERIC and fmt[i:i + 2] in ("TH", "th"):
            suffix, i = fmt[i:i + 2], i + 2
        elif fmt[i:i + 2] in ("SP", "sp"):
            i += 2
        if _OTHER.get(found) != "fx":
            out.append(("pattern", found, mode == "FM" or (mode == "TM" and found in _NAMES), suffix))
        mode = ""
    return out


def field(name: str, ts: exp.Expression) -> exp.Expression:
    """An integer field of a TIMESTAMP (:func:`millpond.sql.semantics.datetime.field`)."""
    return mp("FIELD", exp.Literal.string(name), ts.copy())


def _piece(token: tuple[str, str, bool, str], ts: exp.Expression, zoned: bool) -> exp.Expression:
    kind, arg, fill, suffix = token
    if kind == "text":
        return exp.Literal.string(arg)
    if arg in _NUMERIC:
        name, width = _NUMERIC[arg]
        number = _field(name, ts)
        text: exp.Expression = exp.Cast(this=number, to=T.datatype(T.TEXT))
        if width and not fill:
            text = exp.Anonymous(this="LPAD", expressions=[text, exp.Literal.number(width), exp.Literal.string("0")])
        return exp.DPipe(this=text, expression=_ordinal(number.copy(), suffix), safe=False) if suffix else text
    if arg in _MERIDIEM or arg in _ERA:
        first, second = _MERIDIEM.get(arg) or _ERA[arg]
        test = exp.LT(this=field("hour", ts), expression=exp.Literal.number(12)) if arg in _MERIDIEM else \
            exp.GT(this=field("year", ts), expression=exp.Literal.number(0))
        return exp.Case(ifs=[exp.If(this=test, true=exp.Literal.string(first))], default=exp.Literal.string(second))
    if arg in _ZONE:
        shown = {"TZ": "UTC" if zoned else "", "OF": "+00", "TZH": "+00", "TZM": "00"}[arg.upper()]
        return exp.Literal.string(shown.lower() if arg == "tz" else shown)
    if _OTHER.get(arg) == "thousands":
        year = field("year", ts)
        return exp.DPipe(this=exp.DPipe(this=exp.Cast(this=_div(year, 1000), to=T.datatype(T.TEXT)),
                                        expression=exp.Literal.string(","), safe=False),
                         expression=exp.Anonymous(this="LPAD", expressions=[
                             exp.Cast(this=exp.Mod(this=year.copy(), expression=exp.Literal.number(1000)),
                                      to=T.datatype(T.TEXT)), exp.Literal.number(3), exp.Literal.string("0")]),
                         safe=False)
    return _name(arg, fill, ts)


def _name(arg: str, fill: bool, ts: exp.Expression) -> exp.Expression:
    """A month's or a day's name, or a month in Roman numerals, in the keyword's case."""
    roman = arg.upper() == "RM"
    month = roman or arg.upper().startswith("MON")
    names = _ROMAN if roman else _MONTHS if month else _DAYS
    index = field("month", ts) if month else field("dow", ts)
    base = 1 if month else 0
    short = arg.upper() in ("MON", "DY")
    pad = 4 if roman else 3 if short else 9
    ifs = []
    for i, n in enumerate(names):
        n = n[:3] if short else n
        n = n.upper() if arg.isupper() else n.lower() if arg.islower() else n
        if not fill and not short:
            n = n.ljust(pad)
        ifs.append(exp.If(this=exp.EQ(this=index.copy(), expression=exp.Literal.number(i + base)),
                          true=exp.Literal.string(n)))
    return exp.Case(ifs=ifs)


def _div(a: exp.Expression, n: int) -> exp.Expression:
    return exp.Cast(this=exp.IntDiv(this=exp.Paren(this=a) if isinstance(a, exp.Binary) else a,
                                    expression=exp.Literal.number(n)), to=T.datatype(T.BIGINT))


def _ordinal(number: exp.Expression, suffix: str) -> exp.Expression:
    """PostgreSQL's ordinal suffix of ``number`` (``st nd rd th``; ``th`` for 11-13), in ``suffix``'s case."""
    n = exp.Literal.number
    last2 = exp.Mod(this=exp.Paren(this=number), expression=n(100))
    last = exp.Mod(this=exp.Paren(this=number.copy()), expression=n(10))
    words = ("st", "nd", "rd", "th") if suffix == "th" else ("ST", "ND", "RD", "TH")
    return exp.Case(ifs=[exp.If(this=exp.Between(this=last2, low=n(11), high=n(13)), true=exp.Literal.string(words[3])),
                         *[exp.If(this=exp.EQ(this=last.copy(), expression=n(d)), true=exp.Literal.string(words[d - 1]))
                           for d in (1, 2, 3)]],
                    default=exp.Literal.string(words[3]))


def _field(name: str, ts: exp.Expression) -> exp.Expression:
    """The integer a numeric keyword shows."""
    n = exp.Literal.number
    derived: dict[str, Callable[[], exp.Expression]] = {
        "hour12": lambda: exp.Add(this=exp.Paren(this=exp.Mod(this=exp.Paren(this=exp.Add(
            this=field("hour", ts), expression=n(11))), expression=n(12))), expression=n(1)),
        "millis": lambda: _div(field("micros", ts), 1000),
        "year3": lambda: exp.Mod(this=field("year", ts), expression=n(1000)),
        "year2": lambda: exp.Mod(this=field("year", ts), expression=n(100)),
        "year1": lambda: exp.Mod(this=field("year", ts), expression=n(10)),
        "isoyear3": lambda: exp.Mod(this=field("isoyear", ts), expression=n(1000)),
        "isoyear2": lambda: exp.Mod(this=field("isoyear", ts), expression=n(100)),
        "isoyear1": lambda: exp.Mod(this=field("isoyear", ts), expression=n(10)),
        "dow1": lambda: exp.Add(this=field("dow", ts), expression=n(1)),
        "isodoy": lambda: exp.Add(this=exp.Mul(this=exp.Paren(this=exp.Sub(this=field("week", ts), expression=n(1))),
                                               expression=n(7)), expression=field("isodow", ts)),
        "woy": lambda: exp.Add(this=_div(exp.Sub(this=field("doy", ts), expression=n(1)), 7), expression=n(1)),
        "wom": lambda: exp.Add(this=_div(exp.Sub(this=field("day", ts), expression=n(1)), 7), expression=n(1)),
        "century": lambda: _div(exp.Add(this=field("year", ts), expression=n(99)), 100),
        "ssss": lambda: exp.Add(this=exp.Add(this=exp.Mul(this=field("hour", ts), expression=n(3600)),
                                             expression=exp.Mul(this=field("minute", ts), expression=n(60))),
                                expression=field("second", ts)),
        "julian": lambda: _julian(ts),
        **{f"ff{k}": (lambda k=k: _div(field("micros", ts), 10 ** (6 - k))) for k in range(1, 7)},
    }
    return derived[name]() if name in derived else field(name, ts)


def _julian(ts: exp.Expression) -> exp.Expression:
    """The Julian day of ``ts``'s date: days since 1970-01-01 plus 2,440,588."""
    day = exp.Cast(this=ts.copy(), to=T.datatype(T.DATE))
    epoch = exp.Cast(this=exp.Literal.string("1970-01-01"), to=T.datatype(T.DATE))
    return exp.Add(this=mp("DATE_DIFF", day, epoch), expression=exp.Literal.number(2440588))
