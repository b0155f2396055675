"""Deletion vectors written into a Delta table's log, as Spark's Delta (and Databricks) write them
for a ``DELETE``: delta-rs reads them but does not write them, and no JVM with the Delta package runs
here. A test-only writer of the format the Delta protocol specifies (``PROTOCOL.md``: "Deletion
Vector Format"): a RoaringBitmapArray of the deleted rows' positions in a ``.bin`` file named by
absolute path (storage type ``p``), and a commit that removes the file and adds it back with it."""

from __future__ import annotations

import json
import struct
import time
import uuid
import zlib

import pyarrow as pa
from deltalake import DeltaTable

__all__ = ["delete_positions"]

_MAGIC = 1681511377  # RoaringBitmapArray's
_COOKIE = 12346  # a 32-bit portable Roaring bitmap without run containers


def _bitmap(positions: list[int]) -> bytes:
    """The portable serialization of a RoaringBitmapArray of ``positions`` (array containers)."""
    high: dict[int, list[int]] = {}
    for p in sorted(set(positions)):
        high.setdefault(p >> 32, []).append(p & 0xFFFFFFFF)
    out = struct.pack("<iq", _MAGIC, len(high))
    for key, lows in sorted(high.items()):
        containers: dict[int, list[int]] = {}
        for v in lows:
            containers.setdefault(v >> 16, []).append(v & 0xFFFF)
        assert all(len(v) <= 4096 for v in containers.values()), "array containers only"
        head = struct.pack("<II", _COOKIE, len(containers)) + b"".join(
            struct.pack("<HH", k, len(v) - 1) for k, v in sorted(containers.items()))
        at, offsets, bodies = len(head) + 4 * len(containers), [], []
        for _, v in sorted(containers.items()):
            offsets.append(struct.pack("<I", at))
            bodies.append(struct.pack(f"<{len(v)}H", *v))
            at += len(bodies[-1])
        out += struct.pack("<i", key) + head + b"".join(offsets) + b"".join(bodies)
    return out


def delete_positions(location: str, deletes: dict[str, list[int]]) -> int:
    """One commit marking rows of data files deleted: ``deletes`` maps a file's path (as the log's
    add action has it) to the positions of its rows now deleted — with those it had deleted before,
    which this vector replaces. Returns the new version."""
    t = DeltaTable(location)
    version = t.version() + 1
    records = {a["path"]: a["num_records"] for a in pa.table(t.get_add_actions(flatten=True)).to_pylist()}
    adds = _adds(location, version)
    now = int(time.time() * 1000)
    actions: list[dict] = [{"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                                         "readerFeatures": ["deletionVectors"],
                                         "writerFeatures": ["deletionVectors"]}}]
    for path, rows in deletes.items():
        data = _bitmap(rows)
        dv = f"{location}/deletion_vector_{uuid.uuid4()}.bin"
        with open(dv, "wb") as f:
            f.write(b"\x01" + struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data)))
        was = adds[path]
        # a file is its path and its deletion vector: the remove names the vector it had
        actions.append({"remove": {"path": path, "deletionTimestamp": now, "dataChange": True, "size": was["size"],
                                   "partitionValues": was.get("partitionValues", {}),
                                   **({"deletionVector": was["deletionVector"]} if was.get("deletionVector") else {})}})
        actions.append({"add": {"path": path, "partitionValues": was.get("partitionValues", {}), "size": was["size"],
                                "modificationTime": now, "dataChange": True,
                                "stats": json.dumps({"numRecords": records[path]}),
                                "deletionVector": {"storageType": "p", "pathOrInlineDv": f"file://{dv}", "offset": 1,
                                                   "sizeInBytes": len(data), "cardinality": len(set(rows))}}})
    actions.append({"commitInfo": {"timestamp": now, "operation": "DELETE"}})
    with open(f"{location}/_delta_log/{version:020}.json", "x") as f:  # the commit: created once
        f.write("\n".join(json.dumps(a) for a in actions) + "\n")
    return version


def _adds(location: str, version: int) -> dict[str, dict]:
    """Each data file's add action in force before ``version`` (the log's JSON commits replayed)."""
    adds: dict[str, dict] = {}
    for v in range(version):
        with open(f"{location}/_delta_log/{v:020}.json") as f:
            for line in f:
                action = json.loads(line)
                if "add" in action:
                    adds[action["add"]["path"]] = action["add"]
                elif "remove" in action:
                    adds.pop(action["remove"]["path"], None)
    return adds
