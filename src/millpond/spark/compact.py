"""Remote compaction: the store's compaction tasks as one Spark job over the same root.

Each task (a frozen, picklable :class:`millpond.store.compaction.Task`) runs on an executor with
the same code as in-process compaction; the driver gets the outputs' manifest entries back and
the store applies them in a new version, exactly as for a local run. A failed job loses nothing:
its outputs are unreferenced files that garbage collection removes.
"""

from __future__ import annotations

import uuid

from pyspark.sql import SparkSession


from millpond.spark.job_groups import group_tasks, grouped
from millpond.store import compaction
from millpond.store.objects import ObjectStore
from millpond.store.sst import SstRef
from millpond.work import current_work

__all__ = ["spark_runner"]


def spark_runner(spark: SparkSession):  # noqa: ANN201
    def run(store: ObjectStore, tasks: list[compaction.Task]) -> list[tuple[SstRef, ...]]:
        root, options = store.root, dict(store.options)
        group = f"millpond-compaction-{uuid.uuid4().hex}"  # the round's progress (SHOW JOBS): its tasks
        current_work().follow(lambda: group_tasks(spark, group))
        with grouped(spark, group, f"millpond compaction: {len(tasks)} task(s)"):
            rdd = spark.sparkContext.parallelize(list(enumerate(tasks)), len(tasks))
            done = dict(rdd.map(lambda it: (it[0], compaction.run_remote_task(root, options, it[1]))).collect())
        return [done[i] for i in range(len(tasks))]
    return run
