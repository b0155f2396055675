"""``examples/postgres_cdc.py`` runs against a real PostgreSQL server and shows what its comments
say: two tables' snapshot joined in a view, then one transaction over both and a delete."""

from __future__ import annotations

import importlib.util
from decimal import Decimal
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "postgres_cdc.py"


def test_postgres_cdc_example(spark, postgres_cdc, tmp_path):
    spec = importlib.util.spec_from_file_location("postgres_cdc_example", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    user = postgres_cdc.user or __import__("getpass").getuser()
    seen = example.run(f"host=127.0.0.1 port={postgres_cdc.port} user={user} dbname=postgres",
                       str(tmp_path / "root"), spark=spark)
    assert seen["first"].to_pylist() == [
        {"tier": "gold", "orders": 2, "total": Decimal("19.75")},
        {"tier": "silver", "orders": 1, "total": Decimal("30.00")}]
    assert seen["after"].to_pylist() == [{"tier": "gold", "orders": 5, "total": Decimal("64.75")}]
    sources = seen["sources"].to_pylist()
    assert [s["table_name"] for s in sources] == ["customers", "orders"]
    # the snapshot, then the changes read: bob promoted and cy deleted; two orders inserted and one moved
    assert [s["rows"] for s in sources] == [3 + 2, 3 + 3]
    assert all(s["lag"] >= 0 for s in sources)
