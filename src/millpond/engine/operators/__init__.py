"""Stateful operators, pure over Arrow/polars batches. Each implements
:class:`~millpond.engine.operators.base.Operator`: it declares its state parts and applies one
epoch's delta for one partition to them, returning its output changelog and the state rows to
write for this epoch (puts and tombstones, or count changes)."""

from millpond.engine.operators.aggregate import HashAggregate
from millpond.engine.operators.base import Operator, Part, lookup
from millpond.engine.operators.join import Arrange, HashJoin
from millpond.engine.operators.materialize import Materialize
from millpond.engine.operators.over import Over
from millpond.engine.operators.topn import TopN

__all__ = ["Operator", "Part", "lookup", "HashAggregate", "HashJoin", "Arrange", "TopN", "Over", "Materialize"]
