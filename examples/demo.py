"""The shopping example of "State Store in Streaming Systems", end to end.

Runs a first process that builds the view, deletes and updates rows, then is killed with
SIGKILL in the middle of an epoch (after its state files are written, before the commit).
A second process reopens the same root and shows the view resuming from the last committed
epoch, with the interrupted input applied exactly once.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

import millpond

ROOT = str(Path(__file__).resolve().parent.parent / "demo-data")

SCHEMA = """
CREATE TABLE info  (product VARCHAR PRIMARY KEY, category VARCHAR);
CREATE TABLE visit (product VARCHAR, "user" VARCHAR, length INT);
CREATE MATERIALIZED VIEW result AS
  SELECT category, MAX(length) AS max_length
  FROM info JOIN visit ON info.product = visit.product
  GROUP BY category;
"""


def show(title: str, table: pa.Table) -> None:
    print(f"\n{title}")
    print(table.to_pandas().to_string(index=False) if table.num_rows else "  (no rows)")


def flush(db: millpond.Database, what: str) -> None:
    for report in db.flush():
        change = report.changes.get("result")
        if change is not None:
            show(f"-- epoch {report.epoch}: changelog of result after {what} (_w: +1 insert, -1 delete)", change)


def first_process() -> None:
    db = millpond.connect(ROOT, interval=None)
    db.sql(SCHEMA)
    db.sql("INSERT INTO info VALUES ('Apple', 'Fruit'), ('Banana', 'Fruit'), "
           "('Carrot', 'Vegetable'), ('Potato', 'Vegetable')")
    db.insert("visit", pa.table({
        "product": ["Apple", "Apple", "Carrot", "Banana", "Potato"],
        "user": ["Alice", "Bob", "Bob", "Alice", "Eve"],
        "length": [10, 20, 50, 40, 60],
    }))
    flush(db, "the seed rows")
    show("SELECT * FROM result  -- expect Fruit 40, Vegetable 60",
         db.sql("SELECT * FROM result ORDER BY category"))

    db.sql("""DELETE FROM visit WHERE product = 'Banana' AND "user" = 'Alice'""")
    flush(db, "deleting Alice's Banana visit")
    show("SELECT * FROM result  -- Fruit falls back to 20 (MAX with retraction)",
         db.sql("SELECT * FROM result ORDER BY category"))

    db.sql("UPDATE info SET category = 'Vegetable' WHERE product = 'Apple'")
    flush(db, "moving Apple to Vegetable")
    show("SELECT * FROM result  -- no Fruit visits are left", db.sql("SELECT * FROM result ORDER BY category"))

    db.sql("INSERT INTO visit VALUES ('Potato', 'Bob', 70), ('Banana', 'Carol', 30)")
    print(f"\n== committed epoch {db.epoch}; appended 2 more visits; killing this process in the middle "
          "of the next epoch (state written, manifest not) ==", flush=True)
    os.environ["MILLPOND_CRASH_AT"] = "epoch.after_job"
    db.flush()
    print("not reached")


def second_process() -> None:
    db = millpond.connect(ROOT, interval=None)
    print(f"\n== restarted: the root's last committed epoch is {db.epoch} ==")
    show("SELECT * FROM result  -- as committed before the crash", db.sql("SELECT * FROM result ORDER BY category"))
    flush(db, "replaying the interrupted input")
    show("SELECT * FROM result  -- Vegetable 70 and Fruit 30 appear once",
         db.sql("SELECT * FROM result ORDER BY category"))
    show("SELECT product, count(*) FROM visit  -- every visit exactly once",
         db.sql("SELECT product, count(*) AS visits FROM visit GROUP BY product ORDER BY product"))
    db.close()


def main() -> None:
    if sys.argv[1:] == ["first"]:
        first_process()
        return
    shutil.rmtree(ROOT, ignore_errors=True)
    child = subprocess.run([sys.executable, __file__, "first"])
    if child.returncode != -signal.SIGKILL:
        sys.exit(f"the first process ended with {child.returncode}, expected SIGKILL")
    print("\n== the first process was killed with SIGKILL ==")
    second_process()


if __name__ == "__main__":
    main()
