"""Stateful operators, pure over Arrow/polars batches: each takes an epoch's delta for one
partition and its state tables read at the previous epoch, and returns its output changelog
plus the state rows to write for this epoch (puts and tombstones)."""
