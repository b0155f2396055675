"""``examples/kafka_source.py`` runs against a real broker and shows what its comments say: orders
and account upserts from Kafka joined in a view, through an update, a delete and a bad message."""

from __future__ import annotations

import importlib.util
from decimal import Decimal
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "kafka_source.py"


def test_kafka_source_example(spark, kafka, tmp_path):
    spec = importlib.util.spec_from_file_location("kafka_source_example", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    seen = example.run(kafka.bootstrap, str(tmp_path / "root"), spark=spark)
    assert seen["first"].to_pylist() == [
        {"tier": "gold", "orders": 2, "total": Decimal("19.75")},
        {"tier": "silver", "orders": 2, "total": Decimal("35.00")}]
    assert seen["after"].to_pylist() == [{"tier": "gold", "orders": 4, "total": Decimal("50.75")}]
    errors = seen["errors"].to_pylist()
    assert [(e["table_name"], e["kind"]) for e in errors] == [("orders", "message")]
    assert "JSON parse error" in errors[0]["error"]
    sources = seen["sources"].to_pylist()
    assert sorted(s["split"] for s in sources) == ["accounts/0", "accounts/1", "orders/0", "orders/1"]
    assert sum(s["rows"] for s in sources if s["table_name"] == "orders") == 5
    assert all(s["lag"] == 0 for s in sources)
