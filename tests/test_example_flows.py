"""``examples/flows.py`` runs and shows what its comments say."""

from __future__ import annotations

import importlib.util
from datetime import datetime
from decimal import Decimal
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "flows.py"


def test_flows_example(spark, tmp_path):
    spec = importlib.util.spec_from_file_location("flows_example", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    seen = example.run(str(tmp_path / "root"), spark=spark)
    at = datetime(2026, 11, 24, 10, 0)
    assert seen["first"].to_pylist()[:2] == [
        {"host": "web-1", "minute": at, "avg_cpu": 30.0, "max_cpu": 40.0, "n": 2, "procs": 2},
        {"host": "web-1", "minute": datetime(2026, 11, 24, 10, 1), "avg_cpu": 30.0, "max_cpu": 30.0, "n": 1,
         "procs": 1}]
    assert seen["late"].to_pylist() == [
        {"host": "web-1", "minute": at, "avg_cpu": 50.0, "max_cpu": 90.0, "n": 3, "procs": 3}]
    assert seen["flows"].to_pylist() == [
        {"name": "cpu_per_hour", "sink": "cpu_1h", "watermark": None, "expired": None},
        {"name": "cpu_per_min", "sink": "cpu_1m", "watermark": datetime(2026, 11, 24, 10, 15), "expired": 1}]
    minutes = {(r["host"], r["minute"]): r for r in seen["minutes"].to_pylist()}
    assert minutes[("web-1", at)]["max_cpu"] == 90.0  # the expired window kept its row
    assert minutes[("web-2", datetime(2026, 11, 24, 10, 15))]["n"] == 2  # after the restart
    assert ("web-2", datetime(2026, 11, 24, 10, 1)) not in minutes  # only a bad reading there
    assert seen["hours"].to_pylist() == [
        {"host": "web-1", "hour": at, "max_cpu": 90.0, "n": Decimal(4)},
        {"host": "web-2", "hour": at, "max_cpu": 70.0, "n": Decimal(3)}]
