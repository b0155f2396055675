"""The documentation's runnable code: every fenced block marked ``python runnable`` (or ``sql
runnable``) in README.md and docs/*.md runs as written, in a fresh folder of its own — a
Python block as a script, a SQL block through ``millpond sql`` on a new root — and the links
between the documents lead somewhere."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```(python|sql) runnable\n(.*?)^```", re.M | re.S)


def _blocks() -> list:
    found = []
    for doc in DOCS:
        text = doc.read_text()
        for m in BLOCK.finditer(text):
            line = text[:m.start()].count("\n") + 1
            found.append(pytest.param(m.group(1), m.group(2), id=f"{doc.relative_to(REPO)}:{line}"))
    return found


def test_there_are_runnable_blocks():
    assert len(_blocks()) >= 2  # the README's tour at least


@pytest.mark.parametrize("language, code", _blocks())
def test_a_runnable_block_runs(language, code, tmp_path):
    if language == "python":
        done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    else:
        done = subprocess.run([sys.executable, "-m", "millpond.cli", "sql", str(tmp_path / "root"), "--interval",
                               "none", "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"stdout:\n{done.stdout[-2000:]}\nstderr:\n{done.stderr[-3000:]}"


def test_links_between_documents_lead_somewhere():
    broken = []
    for doc in DOCS:
        for target in re.findall(r"\]\(((?:docs/|\.\./|\./)?[\w./-]+\.(?:md|py))(?:#[\w-]+)?\)", doc.read_text()):
            if target.startswith("../shared"):
                continue
            if not (doc.parent / target).exists():
                broken.append(f"{doc.relative_to(REPO)} -> {target}")
    assert not broken, broken
