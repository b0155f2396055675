"""sqllogictest's completion mode: fill the expected blocks of files from an engine's answers.

    python -m tests.slt.complete tests/slt/nexmark_after.slt                     # PostgreSQL's answers
    python -m tests.slt.complete --engine millpond --only-empty tests/slt/repros.slt

Writing a file: put the records in with empty expected blocks (``----`` then a blank line), fill
them from PostgreSQL (the oracle), read what it wrote, then ``pytest tests/slt`` checks millpond
against it. A record that runs on millpond only (``onlyif millpond``) is filled with
``--engine millpond --only-empty`` (without ``--only-empty`` it rewrites every query millpond
runs); review what it wrote.
"""

from __future__ import annotations

import argparse
import sys
import tempfile

from tests import pg
from tests.slt.engines import Millpond, Postgres
from tests.slt.runner import complete


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.slt.complete", description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--engine", choices=("postgresql", "millpond"), default="postgresql")
    parser.add_argument("--only-empty", action="store_true", help="fill only the expected blocks that are empty")
    args = parser.parse_args(argv)
    problems: list[str] = []
    if args.engine == "postgresql":
        reason = pg.unavailable()
        if reason:
            print(f"cannot complete from PostgreSQL: {reason}", file=sys.stderr)
            return 2
        with pg.server() as server:
            for name in args.files:
                engine = Postgres(server)
                try:
                    problems += complete(name, engine, only_empty=args.only_empty)
                finally:
                    engine.close()
    else:
        import millpond

        for name in args.files:  # each on a session millpond starts (quiet) and stops
            with tempfile.TemporaryDirectory() as root:
                engine = Millpond(millpond.connect(root, parallelism=2, interval=None))
                try:
                    problems += complete(name, engine, only_empty=args.only_empty)
                finally:
                    engine.close()
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
