"""``millpond sql ROOT``: a SQL shell over a database.

    $ millpond sql ./data
    millpond> SELECT category, max_length
         ...> FROM result;
    ┏━━━━━━━━━━┳━━━━━━━━━━━━┓
    ┃ category ┃ max_length ┃
    ...
    $ millpond sql ./data -c "SHOW TABLES; SELECT count(*) FROM visit"
    $ millpond sql ./data --read-only --format json < report.sql

Interactive: a statement may span lines and runs when a line ends it with ``;`` (outside quotes);
history is kept in ``~/.millpond_history`` (``$MILLPOND_HISTORY``) through the standard library's
readline; ``\\d`` lists tables and views, ``\\d NAME`` describes one, ``\\q`` quits; Ctrl-C
abandons the line being typed. An error is printed as one line and the shell goes on.

One-shot (``-c SQL``, or a script on standard input): the statements run in order; the first
error stops the script, is printed as one line saying which statements were applied, and the exit
code is 1. Each query's result is printed as a table (``--format table``, the default), CSV or
JSON lines; other statements print what they did (``CREATE TABLE``). A ``FLUSH`` shows a progress
display on a terminal (:mod:`millpond.progress`).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import pyarrow as pa
import sqlglot
from sqlglot.errors import TokenError
from sqlglot.tokens import TokenType

from millpond.errors import MillpondError, unexpected
from millpond.serve.display import as_texts
from millpond.sql.session import locate, statements, verb

if TYPE_CHECKING:
    from millpond.api import Database

__all__ = ["run_script", "interactive", "one_line", "MAX_ROWS"]

MAX_ROWS = 1000  # rows of one result printed as a table (the rest are counted)
FORMATS = ("table", "csv", "json")
HELP = """\
statements end with ';' and may span lines. SQL: SELECT, CREATE TABLE / MATERIALIZED VIEW, INSERT,
UPDATE, DELETE, DROP, FLUSH, SHOW TABLES, SHOW MATERIALIZED VIEWS, DESCRIBE name, EXPLAIN CREATE
MATERIALIZED VIEW ... (and millpond_views, millpond_epochs, millpond_source_errors as tables to
SELECT from).
\\d             tables and materialized views
\\d NAME        describe a table or view
\\q             quit (also: quit, exit, Ctrl-D)"""


def one_line(exc: BaseException) -> str:
    """An error as one line (a DuckDB or Spark message may span several)."""
    return " ".join(line.strip() for line in str(exc).splitlines() if line.strip()) or type(exc).__name__


class Printer:
    """Prints results to ``out`` (tables with rich; CSV; JSON lines) and errors to ``err``."""

    def __init__(self, out: TextIO, err: TextIO, *, fmt: str = "table", prefix: str = "error: "):
        from rich.console import Console

        self.out, self.err, self.fmt, self.prefix = out, err, fmt, prefix
        self.console = Console(file=out, highlight=False, soft_wrap=False)

    def result(self, table: pa.Table | None, what: str) -> None:
        if table is None:
            if self.fmt == "table":
                print(what, file=self.out)
            return
        numeric = [pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
                   for t in table.schema.types]
        table = as_texts(table)  # numerics as PostgreSQL prints them (a quotient at its own display scale)
        if self.fmt == "csv":
            self.out.write(_csv(table))
        elif self.fmt == "json":
            for row in table.to_pylist():
                print(json.dumps(row, default=str), file=self.out)
        elif table.column_names == ["plan"]:  # EXPLAIN: the lines as they are
            for line in table.column("plan").to_pylist():
                print(line, file=self.out)
        else:
            self._table(table, numeric)
        self.out.flush()

    def _table(self, table: pa.Table, numeric: list[bool]) -> None:
        from rich.table import Table
        from rich.text import Text

        view = Table(show_lines=False, header_style="bold")
        for name, right in zip(table.column_names, numeric):
            view.add_column(name, justify="right" if right else "left", overflow="fold")
        for row in table.slice(0, MAX_ROWS).to_pylist():
            view.add_row(*[Text("NULL", style="dim") if v is None else Text(_cell(v)) for v in row.values()])
        self.console.print(view)
        more = table.num_rows - MAX_ROWS
        rows = f"({table.num_rows} row{'s' * (table.num_rows != 1)}" + (f", the first {MAX_ROWS} shown)" if more > 0
                                                                          else ")")
        print(rows, file=self.out)

    def error(self, exc: BaseException) -> None:
        print(f"{self.prefix}{one_line(exc)}", file=self.err)
        self.err.flush()


def run_script(db: Database, text: str, printer: Printer, *, progress: bool = False) -> bool:
    """Run the statements of ``text`` in order, printing each result; False (after printing the
    error) at the first failure."""
    try:
        parsed = statements(text)
    except MillpondError as exc:
        printer.error(exc)
        return False
    for i, statement in enumerate(parsed, 1):
        try:
            result = db.sql(statement.meta.get("sql") or statement.sql("postgres"),
                            progress=progress and verb(statement) == "FLUSH")
        except Exception as exc:  # noqa: BLE001 - every error is printed as one line
            error = unexpected(exc)
            if len(parsed) > 1:
                locate(error, i, len(parsed))
            printer.error(error)
            return False
        printer.result(result, verb(statement))
    return True


def interactive(db: Database, printer: Printer, *, stdin: TextIO = sys.stdin) -> int:
    """The read-eval-print loop (history through readline where the platform has it)."""
    _history()
    print(f"millpond SQL shell on {db.root}{' (read-only)' if db.read_only else ''}: "
          "statements end with ';', \\? for help, \\q to quit", file=printer.out)
    buffer: list[str] = []
    while True:
        try:
            line = _input("millpond> " if not buffer else "     ...> ", stdin)
        except EOFError:
            print(file=printer.out)
            return 0
        except KeyboardInterrupt:
            print("^C", file=printer.out)
            buffer = []
            continue
        if not buffer and line.strip().startswith(("\\", "quit", "exit", "help")):
            if _meta(db, line.strip(), printer):
                return 0
            continue
        buffer.append(line)
        text = "\n".join(buffer)
        if not text.strip():
            buffer = []
        elif _complete(text):
            buffer = []
            try:
                run_script(db, text, printer, progress=sys.stderr.isatty())
            except KeyboardInterrupt:
                printer.error(MillpondError("interrupted"))


def _meta(db: Database, line: str, printer: Printer) -> bool:
    """A backslash command; True to quit."""
    word, _, arg = line.partition(" ")
    if word in ("\\q", "\\quit", "quit", "exit", "quit;", "exit;"):
        return True
    if word == "\\d" and arg.strip():
        run_script(db, f"DESCRIBE {arg.strip().rstrip(';')}", printer)
    elif word == "\\d":
        run_script(db, "SHOW TABLES; SHOW MATERIALIZED VIEWS", printer)
    else:
        print(HELP, file=printer.out)
    return False


def _complete(text: str) -> bool:
    """Whether ``text`` ends a statement: its last token is a ``;`` (a quote still open: not yet)."""
    try:
        tokens = sqlglot.Dialect.get_or_raise("postgres").tokenize(text)
    except (TokenError, ValueError):
        return False
    return bool(tokens) and tokens[-1].token_type == TokenType.SEMICOLON


def _input(prompt: str, stdin: TextIO) -> str:
    if stdin is sys.stdin:
        return input(prompt)
    line = stdin.readline()
    if not line:
        raise EOFError
    return line.rstrip("\n")


def _history() -> None:
    try:
        import atexit
        import readline
    except ImportError:  # no readline on this platform: no history, lines still edit
        return
    path = Path(os.environ.get("MILLPOND_HISTORY") or Path.home() / ".millpond_history")
    try:
        readline.read_history_file(path)
    except OSError:
        pass
    readline.set_history_length(1000)

    def save() -> None:
        try:
            readline.write_history_file(path)
        except OSError:
            pass
    atexit.register(save)


def _cell(v: object) -> str:
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _csv(table: pa.Table) -> str:
    import io

    import pyarrow.csv as pcsv

    buf = io.BytesIO()
    pcsv.write_csv(table, buf)
    return buf.getvalue().decode()
