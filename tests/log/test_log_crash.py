"""SIGKILL during concurrent appends (and torn tails on top): nothing acknowledged is lost, no
record is applied twice, and sequence numbers stay dense.

A worker process runs four producer threads; each appends ``x = k * 1_000_000 + pseq`` with the
idempotent producer ``(k, pseq)`` and prints every acknowledgement. The test kills it at a
random moment, sometimes appends garbage to the open segment (a torn write), checks the log,
and starts the next worker at each producer's next unacknowledged pseq, so the append that was
in flight is retried and must apply exactly once."""

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np

from millpond.log import Log
from millpond.store.objects import ObjectStore

PRODUCERS = 4
WORKER = textwrap.dedent("""
    import sys, threading
    import pyarrow as pa
    from millpond.log import Log
    from millpond.store.objects import ObjectStore
    root, starts = sys.argv[1], [int(s) for s in sys.argv[2].split(",")]
    log = Log(ObjectStore(root), segment_bytes=20_000)  # small segments: kills land in rolls and flushes too
    schema = pa.schema([("x", pa.int64()), ("pad", pa.string())])
    try:
        ch = log.channel("c")
    except Exception:
        ch = log.create_channel("c", schema)
    lock = threading.Lock()
    def produce(k):
        pseq = starts[k]
        while True:
            n = 1 + pseq % 7
            x = [k * 1_000_000 + pseq] * n
            r = ch.append({"x": x, "pad": ["p" * 20] * n}, producer=(f"p{k}", pseq))
            with lock:
                print(k, pseq, r.first, r.end, int(r.duplicate), flush=True)
            pseq += 1
    for k in range(len(starts)):
        threading.Thread(target=produce, args=(k,), daemon=True).start()
    threading.Event().wait()
""")


def test_sigkill_during_appends_loses_nothing_and_applies_once(tmp_path):
    root = str(tmp_path / "root")
    rng = random.Random(7)
    acked: dict[tuple[int, int], tuple[int, int]] = {}
    starts = [1] * PRODUCERS
    kills = 0
    for cycle in range(6):
        proc = subprocess.Popen([sys.executable, "-c", WORKER, root, ",".join(map(str, starts))],
                                stdout=subprocess.PIPE, text=True)
        lines = [proc.stdout.readline()]  # appends are flowing (a slow start is not a crash test) ...
        time.sleep(rng.random() * 0.5)  # ... then a kill at a random moment
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate()
        kills += 1
        for line in (lines[0] + out).split("\n")[:-1]:  # whole lines: the kill may cut the last one
            k, pseq, first, end, dup = (int(v) for v in line.split())
            if not dup:
                acked[(k, pseq)] = (first, end)
        if cycle % 2:  # a torn write on top of the kill
            segs = sorted(Path(root, "log").glob("p*/wal/*.wal"), key=lambda p: p.stat().st_mtime)
            if segs:
                with open(segs[-1], "ab") as f:
                    f.write(b"MPW1" + rng.randbytes(rng.randrange(1, 64)))
        table = Log(ObjectStore(root)).channel("c").read(hidden=True)
        xs, seqs = table.column("x").to_numpy(), table.column("_seq").to_numpy()
        assert np.array_equal(seqs, np.arange(len(seqs)))  # dense, in order
        for (k, pseq), (first, end) in acked.items():  # every acknowledged append, where it was acknowledged
            assert (xs[first:end] == k * 1_000_000 + pseq).all(), (cycle, k, pseq)
        values, counts = np.unique(xs, return_counts=True)
        for k in range(PRODUCERS):  # each producer's records: pseq 1..n, each exactly once
            mine = values[(values >= k * 1_000_000) & (values < (k + 1) * 1_000_000)] - k * 1_000_000
            assert np.array_equal(mine, np.arange(1, len(mine) + 1)), (cycle, k)
            assert (counts[np.isin(values, mine + k * 1_000_000)] == 1 + mine % 7).all(), (cycle, k)
            starts[k] = max([p for (q, p) in acked if q == k], default=0) + 1  # retry the one in flight
    assert kills == 6 and len(acked) >= 6, len(acked)
    assert not os.path.exists(Path(root, "log", "staging"))
