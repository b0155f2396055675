"""The ``millpond`` Spark data source reads a channel's sequence range on executors."""

import pyarrow as pa

import millpond
from millpond.log import Log
from millpond.store.objects import ObjectStore

SCHEMA = pa.schema([("x", pa.int64()), ("_w", pa.int64())])


def test_batch_read_of_a_sequence_range(spark, tmp_path):
    root = str(tmp_path)
    ch = Log(ObjectStore(root)).channel("t@1", SCHEMA)
    ch.append(pa.table({"x": [0, 1, 2], "_w": [1, 1, 1]}, schema=SCHEMA))
    ch.append(pa.table({"x": [3, 4], "_w": [1, 1]}, schema=SCHEMA))
    millpond.register(spark)
    df = (spark.read.format("millpond").option("root", root).option("channel", "t@1")
          .option("schema", "x BIGINT, _w BIGINT").option("from", 2).option("to", 4).load())
    assert sorted(r.x for r in df.collect()) == [2, 3]
    everything = (spark.read.format("millpond").option("root", root).option("channel", "t@1")
                  .option("schema", "x BIGINT, _w BIGINT").load())
    assert everything.count() == 5
