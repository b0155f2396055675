"""The dashboard (``millpond serve --http``, ``millpond ui``, ``db.serve_dashboard``) in a real
headless browser (Debian's Chromium, driven by Playwright): the page loads, shows every view of the
root with its state (a failed one in red, with its error), draws the dataflow graph and the
epochs' plots, updates after an epoch without a reload, shows a view's SQL and plan on a click and
a backfill's progress while it runs; read-only opens and HTTP Basic authentication too. A
screenshot is kept: in the test's folder, and in ``$MILLPOND_ARTIFACTS`` when set
(docs/images/dashboard.png was taken so)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pyarrow as pa
import pytest

import millpond

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "Debian's chromium is not installed: make setup installs it"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def _slow(v: int) -> int:
    import time

    time.sleep(0.005)
    return v


def _json(url: str, auth: str | None = None) -> dict:
    request = urllib.request.Request(url, headers={"Authorization": auth} if auth else {})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def _fill(db: millpond.Database, start: int, n: int) -> None:
    ids = list(range(start, start + n))
    db.insert("orders", pa.table({"id": pa.array(ids, pa.int64()), "region": [f"r{i % 4}" for i in ids],
                                  "amount": pa.array([i % 50 for i in ids], pa.int64())}))


def test_the_dashboard_shows_every_view_and_follows_the_epochs_in_a_browser(open_db, root, browser, tmp_path):
    db = open_db()
    db.sql("""CREATE TABLE orders (id BIGINT PRIMARY KEY, region TEXT, amount BIGINT);
              CREATE TABLE regions (region TEXT PRIMARY KEY, name TEXT);
              CREATE MATERIALIZED VIEW revenue AS SELECT region, sum(amount) AS total, count(*) AS n
                FROM orders GROUP BY region;
              CREATE MATERIALIZED VIEW named AS SELECT r.name, v.total FROM revenue v JOIN regions r ON r.region = v.region;
              CREATE MATERIALIZED VIEW broken AS SELECT region, total / (n - n) AS r FROM revenue""")
    db.sql(f"CREATE SINK revenue_out FROM revenue WITH (connector = 'deltalake', location = '{tmp_path / 'out'}', "
           "type = 'upsert')")
    db.sql("INSERT INTO regions VALUES ('r0', 'north'), ('r1', 'south'), ('r2', 'east'), ('r3', 'west')")
    _fill(db, 0, 200)
    db.flush()
    _fill(db, 200, 100)
    db.flush()
    with db.serve_dashboard(port=0) as dashboard:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(dashboard.url)
        page.wait_for_function("document.querySelectorAll('#views tbody tr').length === 3")
        shown = {r["view"]: r for r in page.eval_on_selector_all("#views tbody tr", """rows => rows.map(r => ({
            view: r.dataset.view, cells: [...r.cells].map(c => c.textContent), failed: r.classList.contains('failed')}))""")}
        assert sorted(shown) == ["broken", "named", "revenue"]
        assert shown["revenue"]["cells"][1] == "running" and shown["revenue"]["cells"][2] == "4"  # rows, counted
        assert shown["named"]["cells"][1] == "running" and not shown["named"]["failed"]
        assert shown["broken"]["failed"] and shown["broken"]["cells"][1] == "failed"
        assert "division by zero" in shown["broken"]["cells"][7]
        assert page.inner_text("#health") == "1 failed"
        # the graph: every relation and sink a node, the reads its edges, drawn on a canvas
        state = page.evaluate("window.lastState")
        assert {n["id"] for n in state["nodes"]} == {"table:orders", "table:regions", "view:revenue", "view:named",
                                                    "view:broken", "sink:revenue_out"}
        assert {(e["source"], e["target"]) for e in state["edges"]} == {
            ("table:orders", "view:revenue"), ("view:revenue", "view:named"), ("table:regions", "view:named"),
            ("view:revenue", "view:broken"), ("view:revenue", "sink:revenue_out")}
        assert page.evaluate("cy.nodes().length") == 6 and page.locator("#graph canvas").count() > 0
        assert page.evaluate("cy.getElementById('view:broken').data('failed')") == 1
        assert len(state["epochs"]) == db.epoch and all(e["seconds"] > 0 for e in state["epochs"])
        assert page.locator("#plot-duration canvas").count() == 1 and page.locator("#plot-rows canvas").count() == 1
        # a view's SQL and plan on a click
        page.click("#views tbody tr[data-view='named']")
        page.wait_for_function("document.querySelector('#detail-explain') !== null")
        assert "JOIN regions" in page.inner_text("#detail-sql")
        assert "Join" in page.inner_text("#detail-explain") and "state o" in page.inner_text("#detail-explain")
        # an epoch later, the page shows it without a reload
        before = db.epoch
        _fill(db, 300, 100)
        db.flush()
        page.wait_for_function(f"Number(document.body.dataset.epoch) > {before}", timeout=20_000)
        page.wait_for_function(
            f"[...document.querySelectorAll('#views tbody tr[data-view=revenue] td')][4].textContent === '{db.epoch}'")
        # a backfill's progress while it runs
        db.create_function(_slow, params=["BIGINT"], returns="BIGINT", name="slow")
        failure: list[BaseException] = []

        def backfill() -> None:
            try:
                db.sql("CREATE MATERIALIZED VIEW slowly AS SELECT id, slow(amount) AS a FROM orders")
                db.flush()
            except BaseException as exc:  # noqa: BLE001 - said below
                failure.append(exc)

        worker = threading.Thread(target=backfill)
        worker.start()
        try:
            page.wait_for_selector("#jobs tr.job", timeout=120_000)
            job = page.inner_text("#jobs tr.job")
            assert "backfill" in job and "slowly" in job and "400 records" in job
            assert page.locator("#jobs .bar").count() == 1
        finally:
            worker.join(300)
        assert not failure, failure
        page.wait_for_function("document.querySelectorAll('#views tbody tr').length === 4", timeout=20_000)
        page.wait_for_selector("#jobs p.muted", timeout=20_000)
        page.click("#views tbody tr[data-view='broken']")
        page.wait_for_selector("#detail-error")
        shot = tmp_path / "dashboard.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000
        if os.environ.get("MILLPOND_ARTIFACTS"):
            shutil.copy(shot, Path(os.environ["MILLPOND_ARTIFACTS"]) / "dashboard.png")
        page.close()

    # the read-only open of the root shows the same views (millpond ui ROOT)
    reader = millpond.connect(root, read_only=True)
    try:
        with reader.serve_dashboard(port=0) as dashboard:
            state = _json(dashboard.url + "api/state")
            assert state["read_only"] and state["epoch"] == db.epoch
            views = {n["name"]: n["status"] for n in state["nodes"] if n["kind"] == "view"}
            assert views == {"revenue": "running", "named": "running", "broken": "failed", "slowly": "running"}
            assert len(state["epochs"]) == db.epoch  # from the changes the root keeps, not this process's
    finally:
        reader.close()


def test_the_dashboard_asks_for_the_servers_password(open_db):
    db = open_db()
    db.sql("CREATE TABLE t (k INT PRIMARY KEY)")
    with db.serve_dashboard(port=0, password="s3cret") as dashboard:
        for auth in (None, "Basic " + base64.b64encode(b"ada:wrong").decode()):
            with pytest.raises(urllib.error.HTTPError) as refused:
                _json(dashboard.url + "api/state", auth)
            assert refused.value.code == 401
        state = _json(dashboard.url + "api/state", "Basic " + base64.b64encode(b"ada:s3cret").decode())
        assert [n["id"] for n in state["nodes"]] == ["table:t"]
        with pytest.raises(urllib.error.HTTPError) as missing:
            _json(dashboard.url + "api/views/nope", "Basic " + base64.b64encode(b"ada:s3cret").decode())
        assert missing.value.code == 404


def test_millpond_ui_serves_a_roots_dashboard_read_only(open_db, root):
    import re
    import subprocess
    import sys
    import time

    db = open_db()
    db.sql("CREATE TABLE t (k INT PRIMARY KEY); CREATE MATERIALIZED VIEW n AS SELECT count(*) AS c FROM t")
    db.sql("INSERT INTO t VALUES (1), (2)")
    db.flush()
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(repo / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "millpond.cli", "ui", root, "--port", "0"], env=env,
                            stderr=subprocess.PIPE, text=True)
    try:
        line, deadline = "", time.monotonic() + 120
        while "dashboard of" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline()
            assert line or proc.poll() is None, "millpond ui exited"
        url = re.search(r"(http://\S+/)", line).group(1)
        state = _json(url + "api/state")
        assert state["read_only"] and [n["name"] for n in state["nodes"] if n["kind"] == "view"] == ["n"]
        assert next(n for n in state["nodes"] if n["kind"] == "view")["rows"] == 1
        with urllib.request.urlopen(url, timeout=30) as page:
            assert b"/static/vendor/cytoscape.min.js" in page.read()
    finally:
        proc.terminate()
        proc.wait(30)
