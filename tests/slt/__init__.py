"""sqllogictest for millpond: ``tests/slt/*.slt``, one pytest test per file (``test_slt.py``).

Each file runs on a fresh millpond ``Database`` (no background epochs: views change at ``FLUSH``)
and, where a PostgreSQL server is installed (``tests/pg.py``), on a fresh PostgreSQL database
too, the oracle: every statement is mirrored there (``mirror.py``: a materialized view is a plain
view, ``FLUSH`` does nothing, millpond's own statements are not run), and every query's expected
block must be what each engine answers. Without PostgreSQL the files run on millpond alone.

The format (sqllogictest's; records are separated by blank lines, ``#`` starts a comment line)::

    statement ok                      the SQL must succeed
    CREATE TABLE t (k INT, v TEXT)

    statement error <regex>           it must fail; on millpond the message (with the error's
    SELECT 1 / 0                      class name: "SqlError: …") must match the regex (re.search);
                                      PostgreSQL need only fail. ``query error <regex>`` is the same.

    query IT rowsort                  one type letter per column, then nosort (the default),
    SELECT k, v FROM t                rowsort or valuesort, then an optional label (ignored)
    ----
    1 one                             one row per line, values separated by whitespace
    2 (empty)

    hash-threshold 40                 completion hashes results of more values; checking takes
                                      either form, e.g. ``96 values hashing to <md5>``
    skipif postgresql                 conditions before a record: skipif/onlyif ENGINE, where the
    onlyif millpond                   engines are ``millpond`` and ``postgresql``
    halt                              stop the file here

    load nexmark 0 500 seed 7 rate 50 an extension: insert the Nexmark events [0, 500) of
                                      ``millpond.nexmark.generate(0, 500, seed=7,
                                      events_per_second=50)`` into the tables person, auction and
                                      bid (which the file creates), on every engine

Values are compared as PostgreSQL prints them (``values.py``): ``NULL``; ``(empty)`` for an
empty string; booleans ``t``/``f``; timestamps ``2024-03-05 00:07:09.1`` (with a time zone: in
UTC, ``+00``); intervals ``21 days 23:59:59``; floats with the shortest exact digits. By the type letter: ``R`` is a number with 3 decimals (``1.500``; numerics whose
scales differ by design between the engines compare here), ``I`` prints an integral number as an
integer, ``T`` is the text as is. The classic layout, one value per line, is accepted too.

A record that shows a millpond bug keeps PostgreSQL's answer and gets, only until the bug is fixed,
a ``# BUG: …`` comment and ``skipif millpond``.

Writing a file: records with empty expected blocks, then ``python -m tests.slt.complete FILE``
fills them from PostgreSQL (``--engine millpond --only-empty`` for ``onlyif millpond`` records);
read what it wrote. ``nexmark_*.slt`` are written by ``python -m tests.slt.nexmark_slt``.
"""
