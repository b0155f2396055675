"""Text on assignment (:mod:`millpond.log.assign`), vectorized: text read into a column by its
type's input rules — as PostgreSQL reads a quoted literal in ``INSERT``, a parameter, a COPY
field — and a value written into a text column as PostgreSQL prints it.

Read: integers (``' 12 '``; ``value "3000000000" is out of range for type integer``), numerics
(``'2.675'`` rounded to the column's scale, ``'1e3'``), floats (``'NaN'``, ``'-Infinity'``),
booleans (``t``, ``yes``, ``on``, ``1`` and their prefixes), dates, timestamps and times in ISO
form, timestamptz with or without an offset (UTC, millpond's TimeZone), BYTEA in hex format
(``'\\x0a0b'``) or as plain text. Intervals, arrays and records are read from text in SQL only
(``'1 day'``, ``'{1,2}'`` in an ``INSERT``).

Written: numbers, booleans, dates, timestamps (without trailing zeros), timestamptz (``+00``),
times, JSONB and BYTEA (``\\x0a0b``) as PostgreSQL's text. A float's text (PostgreSQL's shortest
digits with its own exponent rule) is not written: store it as NUMERIC first.

    >>> from_text(pa.chunked_array([[" 12 ", "-3"]]), pa.int32(), "integer").to_pylist()
    [12, -3]
    >>> to_text(pa.chunked_array([[b"\\n\\x0b"]]), "bytea").to_pylist()
    ['\\\\x0a0b']
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from millpond.log.kinds import NAMES, Unassignable, bounds, first

__all__ = ["from_text", "to_text"]

_NUMBER = r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$"
_TRUE = ["t", "tr", "tru", "true", "y", "ye", "yes", "on", "1"]  # PostgreSQL's boolin: words and their prefixes
_FALSE = ["f", "fa", "fal", "fals", "false", "n", "no", "of", "off", "0"]
_FLOAT_WORDS = ["nan", "infinity", "+infinity", "-infinity", "inf", "+inf", "-inf"]
_ZONE = r"[0-9]:[0-9]{2}(:[0-9]{2}(\.[0-9]+)?)?\s*([zZ]|[+-][0-9]{1,2}(:?[0-9]{2})?)$"


def _syntax(kind: str, bad: pa.ChunkedArray | pa.Array, text: pa.ChunkedArray, sqlstate: str = "22P02",
            hint: str = "") -> None:
    row = first(bad)
    if row is not None:
        raise Unassignable(f'invalid input syntax for type {kind}: "{text[row].as_py()}"{hint}', sqlstate, row)


def from_text(col: pa.ChunkedArray, target: pa.DataType, dst: str) -> pa.ChunkedArray:
    """Text ``col`` read as values of ``target`` (of :func:`~millpond.log.kinds.kind` ``dst``); a
    NUMERIC's as its exact value (``decimal256(75, 37)``), which :func:`~millpond.log.assign.assign`
    rounds to the column's scale."""
    col = pc.cast(col, pa.string())
    if dst == "bytea":
        return pc.cast(_bytea_in(col.combine_chunks()), target)
    t = pc.utf8_trim_whitespace(col)
    valid = pc.is_valid(t)
    if dst == "integer":
        name = {16: "smallint", 32: "integer", 64: "bigint"}.get(target.bit_width, str(target))
        _syntax(name, pc.invert(pc.match_substring_regex(t, r"^[+-]?[0-9]+$")), col)
        long = pc.greater(pc.utf8_length(pc.utf8_ltrim(t, characters="+-0")), 38)  # past any decimal
        row = first(long)
        if row is None:
            wide = pc.cast(t, pa.decimal128(38, 0))
            low, high = bounds(target)
            row = first(pc.or_(pc.less(wide, pa.scalar(low).cast(wide.type)),
                               pc.greater(wide, pa.scalar(high).cast(wide.type))))
        if row is not None:  # PostgreSQL names the text
            raise Unassignable(f'value "{col[row].as_py()}" is out of range for type {name}', "22003", row)
        return pc.cast(wide, target)
    if dst == "numeric":
        special = pc.is_in(pc.utf8_lower(t), pa.array(_FLOAT_WORDS + ["+nan", "-nan"]))
        row = first(special)
        if row is not None:
            raise Unassignable("NUMERIC NaN and Infinity are not supported (Spark and DuckDB decimals have no such "
                               "values)", "0A000", row)
        _syntax("numeric", pc.invert(pc.match_substring_regex(t, _NUMBER)), col)
        try:
            wide = pc.cast(t, pa.decimal256(75, 37))
        except pa.ArrowInvalid:
            raise Unassignable("numeric field overflow (more than 37 digits after the point or 38 before it)", "22003",
                               _first_failing(t, pa.decimal256(75, 37))) from None
        return wide
    if dst == "float":
        word = pc.is_in(pc.utf8_lower(t), pa.array(_FLOAT_WORDS))
        name = "real" if target.bit_width == 32 else "double precision"
        _syntax(name, pc.invert(pc.or_(word, pc.match_substring_regex(t, _NUMBER))), col)
        wide = pc.cast(t, pa.float64())
        out = pc.cast(wide, target, safe=False)
        zero_text = pc.match_substring_regex(t, r"^[+-]?0*\.?0*([eE].*)?$")
        wrong = pc.or_(pc.and_(pc.invert(word), pc.invert(pc.is_finite(out))),
                       pc.and_(pc.invert(zero_text), pc.equal(out, 0)))
        row = first(wrong)
        if row is not None:
            raise Unassignable(f'"{col[row].as_py()}" is out of range for type {name}', "22003", row)
        return out
    if dst == "boolean":
        low = pc.utf8_lower(t)
        _syntax("boolean", pc.and_(valid, pc.invert(pc.is_in(low, pa.array(_TRUE + _FALSE)))), col)
        return pc.cast(pc.if_else(valid, pc.is_in(low, pa.array(_TRUE)), pa.scalar(None, pa.bool_())), target)
    if dst in ("date", "timestamp", "timestamptz", "time"):
        return pc.cast(_datetime_in(t, col, dst), target, safe=False)
    what = {"interval": "an interval ('1 day 02:00')", "array": "an array ('{1,2}')", "record": "a record",
            "map": "a map", "jsonb": "a JSON document"}.get(dst, f"a value of type {dst}")
    raise Unassignable(f"{what} is read from text in SQL only (an INSERT's string constant); give Arrow values "
                       "of the column's type", "42804")


def _first_failing(t: pa.ChunkedArray, target: pa.DataType) -> int | None:
    lo, hi = 0, len(t)  # the first row whose cast fails: binary search over prefixes
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            pc.cast(t.slice(0, mid), target)
            lo = mid
        except pa.ArrowInvalid:
            hi = mid
    return lo


def _datetime_in(t: pa.ChunkedArray, col: pa.ChunkedArray, dst: str) -> pa.ChunkedArray:
    """ISO dates, timestamps and times; a timestamptz without an offset is in UTC (millpond's TimeZone)."""
    name = {"date": "date", "timestamp": "timestamp", "timestamptz": "timestamp with time zone",
            "time": "time"}[dst]
    def parse(text: pa.ChunkedArray) -> pa.ChunkedArray:
        if dst == "time":  # 'HH:MM[:SS[.ffffff]]' as the time of day of a timestamp
            if first(pc.invert(pc.match_substring_regex(text, r"^[0-9]{1,2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?$"))) \
                    is not None:
                raise pa.ArrowInvalid("not a time of day")
            stamped = pc.cast(pc.binary_join_element_wise("1970-01-01T", text, ""), pa.timestamp("us"))
            return pc.cast(stamped, pa.time64("us"))
        if dst == "timestamptz":
            zoned = pc.match_substring_regex(text, _ZONE)
            local = pc.cast(pc.cast(pc.if_else(zoned, pa.scalar(None, pa.string()), text), pa.timestamp("us")),
                            pa.timestamp("us", tz="UTC"))
            return pc.if_else(zoned, pc.cast(pc.if_else(zoned, text, pa.scalar(None, pa.string())),
                                             pa.timestamp("us", tz="UTC")), local)
        return pc.cast(text, pa.date32() if dst == "date" else pa.timestamp("us"))
    try:
        return parse(t)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        lo, hi = 0, len(t)  # the first row that does not parse
        while hi - lo > 1:
            mid = (lo + hi) // 2
            try:
                parse(t.slice(0, mid))
                lo = mid
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                hi = mid
        raise Unassignable(f'invalid input syntax for type {name}: "{col[lo].as_py()}" (millpond reads the ISO '
                           f"form{' and an offset' if dst == 'timestamptz' else ''}: "
                           f"{'YYYY-MM-DD' if dst == 'date' else 'HH:MM:SS' if dst == 'time' else 'YYYY-MM-DD HH:MM:SS'})",
                           "22007", lo) from None


def _bytea_in(arr: pa.StringArray) -> pa.BinaryArray:
    """PostgreSQL's BYTEA input: ``\\x`` and hex digits, or the text's own bytes (the escape format
    without backslashes)."""
    hex_rows = pc.fill_null(pc.starts_with(arr, "\\x"), False)
    escaped = pc.and_(pc.invert(hex_rows), pc.fill_null(pc.match_substring(arr, "\\"), False))
    row = first(escaped)
    if row is not None:
        raise Unassignable("the escape format with backslashes ('\\\\', '\\141') is read in SQL only (an INSERT's "
                           "string constant); give bytes, or the hex format '\\x0a0b'", "22P02", row)
    bad_digit = pc.and_(hex_rows, pc.invert(pc.match_substring_regex(arr, r"^\\x[0-9a-fA-F]*$")))
    row = first(bad_digit)
    if row is not None:
        digit = pc.replace_substring_regex(pa.array([arr[row].as_py()[2:]]), r"[0-9a-fA-F]", "")[0].as_py()[0]
        raise Unassignable(f'invalid hexadecimal digit: "{digit}"', "22023", row)
    odd = pc.and_(hex_rows, pc.equal(pc.bit_wise_and(pc.binary_length(arr), 1), 1))
    row = first(odd)
    if row is not None:
        raise Unassignable("invalid hexadecimal data: odd number of digits", "22023", row)
    binary = arr.cast(pa.binary())
    if first(hex_rows) is None:
        return binary
    n = len(binary)
    offsets = np.frombuffer(binary.buffers()[1], np.int32, n + 1, binary.offset * 4).astype(np.int64)
    data = np.frombuffer(binary.buffers()[2], np.uint8) if binary.buffers()[2] is not None else np.zeros(0, np.uint8)
    is_hex = hex_rows.to_numpy(zero_copy_only=False)
    lengths = np.diff(offsets)
    out_lengths = np.where(is_hex, (lengths - 2) // 2, lengths)
    out_lengths[~binary.is_valid().to_numpy(zero_copy_only=False)] = 0
    out_offsets = np.concatenate([[0], np.cumsum(out_lengths)])
    row_of = np.repeat(np.arange(n), out_lengths)
    k = np.arange(out_offsets[-1]) - out_offsets[row_of]
    hexed = is_hex[row_of]
    pos = offsets[row_of] + np.where(hexed, 2 + 2 * k, k)
    nibble = np.zeros(256, np.uint8)
    for i, c in enumerate(b"0123456789abcdef"):
        nibble[c] = nibble[ord(chr(c).upper())] = i
    hi = data[pos]
    lo = data[np.where(hexed, pos + 1, pos)]
    out = np.where(hexed, nibble[hi] * 16 + nibble[lo], hi).astype(np.uint8)
    result = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(out_offsets.astype(np.int32).tobytes()),
                                                    pa.py_buffer(out.tobytes())])
    return pc.if_else(binary.is_valid(), result, pa.scalar(None, pa.binary()))


# -- writing text ---------------------------------------------------------------------------------------
def to_text(col: pa.ChunkedArray, src: str) -> pa.ChunkedArray:
    """``col`` (of :func:`~millpond.log.assign.kind` ``src``) as PostgreSQL's text of its values."""
    if src in ("integer", "numeric", "boolean", "date"):
        return pc.cast(col, pa.string())
    if src in ("timestamp", "timestamptz", "time"):
        unit = pa.time64("us") if src == "time" else pa.timestamp("us", tz=col.type.tz)
        text = pc.cast(pc.cast(col, unit, safe=False), pa.string())  # always six digits after the point
        text = pc.replace_substring_regex(text, r"Z$", "")
        text = pc.replace_substring_regex(pc.replace_substring_regex(text, r"(\.[0-9]*[1-9])0+$", r"\1"),
                                          r"\.0+$", "")
        return pc.binary_join_element_wise(text, "+00", "") if src == "timestamptz" else text
    if src == "jsonb":
        return pc.struct_field(col, 0)
    if src == "bytea":
        return pa.chunked_array([_bytea_out(col.combine_chunks().cast(pa.binary()))], pa.string())
    what = "a double precision value's text (PostgreSQL's shortest digits) is" if src == "float" else \
        f"a value of type {NAMES.get(src, src)} is"
    raise Unassignable(f"{what} not written into a text column (cast it in SQL first: a float to NUMERIC(p,s))",
                       "0A000")


def _bytea_out(arr: pa.BinaryArray) -> pa.StringArray:
    """BYTEA as PostgreSQL's hex text: ``\\x`` and two hex digits a byte."""
    n = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], np.int32, n + 1, arr.offset * 4).astype(np.int64)
    data = np.frombuffer(arr.buffers()[2], np.uint8) if arr.buffers()[2] is not None else np.zeros(0, np.uint8)
    body = data[offsets[0]:offsets[-1]]
    table = np.frombuffer(b"".join(b"%02x" % i for i in range(256)), np.uint8).reshape(256, 2)
    out_offsets = (offsets - offsets[0]) * 2 + 2 * np.arange(n + 1)
    out = np.empty(out_offsets[-1], np.uint8)
    prefix = np.zeros(len(out), bool)
    prefix[out_offsets[:-1]] = prefix[out_offsets[:-1] + 1] = True
    out[prefix] = np.tile(np.frombuffer(b"\\x", np.uint8), n)
    out[~prefix] = table[body].reshape(-1)
    text = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(out_offsets.astype(np.int32).tobytes()),
                                                  pa.py_buffer(out.tobytes())])
    return pc.if_else(arr.is_valid(), text, pa.scalar(None, pa.string()))
