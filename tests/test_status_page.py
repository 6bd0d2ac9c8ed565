"""The tracker's status page in a real browser (headless Chromium through
Playwright): a cluster with a killed peer shows that peer failed and the
failure among the recent ones (docs/operations.md, "Status page").

``ST_UPDATE_SCREENSHOT=1`` saves the page as docs/status_page.png."""

from __future__ import annotations

import json
import os
import shutil
import urllib.request
from pathlib import Path

import pytest
from conftest import poll_for

CHROMIUM = os.environ.get("ST_CHROMIUM", "/usr/bin/chromium")
# The machines that run the tests have no internet: without these flags
# Chromium waits on network lookups (updates, sync, QUIC probes).
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREENSHOT = Path(__file__).resolve().parent.parent / "docs" / "status_page.png"


@pytest.fixture
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install "
                                   "storetorrent[test])")
    if not (os.access(CHROMIUM, os.X_OK) or shutil.which(CHROMIUM)):
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set ST_CHROMIUM)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=60_000)
        try:
            yield b
        finally:
            b.close()


def _status(addr: str) -> dict:
    with urllib.request.urlopen(f"http://{addr}/status.json", timeout=10) as r:
        return json.loads(r.read())


def test_status_page_shows_a_failed_peer(make_cluster, browser):
    cluster = make_cluster(4)
    c = cluster.client()
    for i, n in enumerate((40, 120, 25)):
        with c.create(f"/exp/run{i + 1}", "x2") as f:
            for j in range(n):
                f.queue_put(f"event-{j:05d}", os.urandom(2000))
    writing = c.create("/exp/run4", "x2", est_size=50_000_000)  # holds a space reservation while open
    addr = cluster.tracker.metrics_addr
    poll_for(lambda: sum(p["records"] for p in _status(addr)["peers"]) == 2 * (40 + 120 + 25),
             what="the peers to announce their records")
    dead = cluster.kill_peer(1)
    c.tracker.report_failure(dead, "connection refused (PUT event-00007)")
    poll_for(lambda: any(e["kind"] == "failed" for e in _status(addr)["recent_failures"]),
             what="the tracker to notice the missed announces")

    page = browser.new_page(viewport={"width": 1180, "height": 640})
    page.goto(f"http://{addr}/", timeout=30_000)
    assert page.title().startswith("StoreTorrent tracker")
    assert page.locator('meta[http-equiv="refresh"]').get_attribute("content") == "5"
    rows = page.locator("#peers tr.live, #peers tr.failed")
    assert rows.count() == 4
    failed = page.locator("#peers tr.failed")
    assert failed.count() == 1
    assert dead in failed.inner_text() and "failed" in failed.inner_text()
    for a in cluster.peer_addrs:
        if a != dead:
            assert "live" in page.locator("#peers tr", has_text=a).inner_text()
    summary = page.locator("#summary").inner_text()
    assert "4 files" in summary and "3 live peers" in summary and "1 failed" in summary
    events = page.locator("#failures").inner_text()
    assert dead in events and "connection refused (PUT event-00007)" in events
    assert "missed announces" in events
    # what a person sees: the failed row is red
    bg = failed.locator("td").first.evaluate("td => getComputedStyle(td).backgroundColor")
    assert bg == "rgb(253, 232, 232)"
    if os.environ.get("ST_UPDATE_SCREENSHOT") == "1":
        page.screenshot(path=str(SCREENSHOT), full_page=True)
    page.close()
    writing.close()
