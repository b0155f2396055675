"""Reserved column names: every hidden column millpond adds to rows is named here, and nowhere else.

User columns may not start with ``_`` (``CREATE TABLE`` refuses them), so none of these can clash
with a user's column. Operator-internal columns (running sums, the join side) are named by the
operator that owns them.
"""

from __future__ import annotations

__all__ = ["W", "ROW_ID", "KH", "VN", "EP", "DEL", "COUNT", "SEQ", "TICK", "EPOCH", "RESERVED_PREFIX", "DEFAULT", "FILL"]

RESERVED_PREFIX = "_"

W = "_w"  # changelog weight: +1 insert, -1 delete (every changelog is a Z-set)
ROW_ID = "_row_id"  # hidden identity of a row of a table without a primary key
KH = "_kh"  # 64-bit hash of a state row's key: SSTs are sorted by it
VN = "_vn"  # virtual node of a row (KH mod VNODES): exchanges partition by it
EP = "_ep"  # the epoch that wrote a state row
DEL = "_del"  # tombstone flag of a row of a newest-wins state table
COUNT = "_count"  # count change of a row of an additive state table (a read sums them)
SEQ = "_seq"  # a log record's sequence number in its channel
TICK = "_tick"  # the time tick of the group commit that made a log record durable
EPOCH = "_epoch"  # the epoch that committed a change (subscriptions, a view read as a Spark stream)

# Arrow field metadata (millpond.defaults) of a column an insert may leave out: its DEFAULT's value,
# as JSON (null: NULL; ALTER ... SET DEFAULT changes it) ...
DEFAULT = b"millpond.default"
# ... and of a column added to a table: the value of the rows stored before it (its DEFAULT then)
FILL = b"millpond.fill"
