"""The JVM class-data archive (millpond.spark.class_archive): one writer, settled into place once
written, mapped by later starts; off when asked, or when the JVM's options are the user's; and an
archive the JVM cannot use is ignored by a real JVM, which starts anyway."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from millpond.spark import class_archive
from millpond.spark.session import ensure_java


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv(class_archive.ARCHIVE_ENV, str(tmp_path / "jvm"))
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    ensure_java()
    return tmp_path / "jvm"


def _age(path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_one_start_writes_the_archive_and_later_starts_map_it_once_settled(folder):
    first = class_archive.java_options()
    assert "-XX:ArchiveClassesAtExit=" in first, first
    part = folder / first.split("-XX:ArchiveClassesAtExit=")[1].split()[0].rsplit("/", 1)[1]
    assert class_archive.java_options() == "", "a second start while the first one's claim stands writes none"
    part.write_bytes(b"\0" * (class_archive.SMALLEST + 1))  # what the first JVM writes as it exits
    assert class_archive.java_options() == "", "a write touched within the minute may be under way"
    _age(part, class_archive.SETTLED_S + 1)
    mapped = class_archive.java_options()
    final = folder / part.name.split(".")[0]
    assert mapped.startswith(f"-XX:SharedArchiveFile={final}.jsa"), mapped
    assert not part.exists() and not any(folder.glob("*.claim")), sorted(os.listdir(folder))


def test_a_write_cut_short_is_dropped_and_a_stale_claim_taken_over(folder):
    first = class_archive.java_options()
    part = folder / first.split("-XX:ArchiveClassesAtExit=")[1].split()[0].rsplit("/", 1)[1]
    part.write_bytes(b"\0" * 100)  # killed at the start of its dump
    _age(part, class_archive.SETTLED_S + 1)
    claim = next(folder.glob("*.claim"))
    assert class_archive.java_options() == ""  # the claim stands
    assert not part.exists(), "a write too small to be an archive is dropped"
    _age(claim, class_archive.CLAIM_S + 1)
    assert "-XX:ArchiveClassesAtExit=" in class_archive.java_options(), "a claim 15 minutes old is taken over"


def test_off_when_asked_or_when_the_jvm_options_are_the_users(folder, monkeypatch):
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--driver-java-options '-Xss4m' pyspark-shell")
    assert class_archive.java_options() == ""
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS")
    conf = folder.parent / "conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text("spark.driver.extraJavaOptions -Dmine=1\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    assert class_archive.java_options() == "", "the user's own driver options are not replaced"
    monkeypatch.delenv("SPARK_CONF_DIR")
    for off in ("0", "off"):
        monkeypatch.setenv(class_archive.ARCHIVE_ENV, off)
        assert class_archive.java_options() == ""
    assert not folder.exists()


def test_a_real_jvm_starts_with_an_archive_it_cannot_use_and_says_nothing(folder):
    folder.mkdir(parents=True)
    first = class_archive.java_options()
    part = folder / first.split("-XX:ArchiveClassesAtExit=")[1].split()[0].rsplit("/", 1)[1]
    part.write_bytes(os.urandom(class_archive.SMALLEST + 1))  # garbage of an archive's size
    _age(part, class_archive.SETTLED_S + 1)
    options = class_archive.java_options()
    assert options.startswith("-XX:SharedArchiveFile="), options
    java = shutil.which("java", path=os.path.join(os.environ["JAVA_HOME"], "bin")) if os.environ.get("JAVA_HOME") \
        else shutil.which("java")
    done = subprocess.run([java, *options.split(), "-version"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "cds" not in (done.stdout + done.stderr).lower().replace("openjdk", ""), done.stderr
