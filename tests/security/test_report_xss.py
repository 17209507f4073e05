"""Finding 1: a hostile event_id must not run as script on Airflow's origin through the served
Data Docs. The payload goes through the real pipeline (stream, GX validation, Data Docs) and the
view's real ``/reports`` route (auth dependencies overridden: who may read is tested in
tests/airflow), and headless Chromium opens the page."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
from helpers import listen_ports, write_config

pytestmark = [pytest.mark.spark]

PAYLOAD = "<img src=x onerror=\"document.title='PWNED';fetch('/pwned')\">"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


def _line(event_id: str, host: str, t: int) -> str:
    return json.dumps({"event_id": event_id, "host": host, "event_time": t, "key": "k", "value": 1.0})


@pytest.fixture(scope="module")
def hostile_pipeline(spark, tmp_path_factory):
    """Two records under the payload as event_id, at two event times, in two files (batches):
    both stored, and ``event_id_unique`` fails with the payload as its sample."""
    from tidemark.quality import validate_pipeline
    from tidemark.stream import run_stream

    root = tmp_path_factory.mktemp("xss")
    config = write_config(root, name="xss", source={"max_files_per_trigger": 1})
    landing = Path(config.source.path)
    landing.mkdir(parents=True)
    t0 = (int(time.time() * 1000) // 60_000 - 5) * 60_000
    files = [
        [_line("ok-1", "h1", t0), _line(PAYLOAD, "h1", t0 + 1_000)],
        [_line(PAYLOAD, "h1", t0 + 61_000), _line("ok-2", "h1", t0 + 62_000)],
    ]
    for i, lines in enumerate(files):
        path = landing / f"part-{i}.jsonl"
        path.write_text("\n".join(lines) + "\n")
        stamp = time.time() - 30 + i
        os.utime(path, (stamp, stamp))
    run_stream(spark, config, once=True, echo=lambda m: None)
    outcome = validate_pipeline(config)
    assert "raw_events.event_id_unique" in outcome.failing, outcome.failing
    return config, Path(outcome.docs_index).parent


def test_the_payload_is_escaped_in_every_data_docs_page(hostile_pipeline):
    _, site = hostile_pipeline
    pages = {p: p.read_text(encoding="utf-8") for p in site.rglob("*.html")}
    assert any("onerror" in text for text in pages.values()), "the sample is not on any page"
    raw = [str(p) for p, text in pages.items() if "<img src=x" in text]
    assert not raw, f"the payload is markup in {raw}"


@pytest.fixture(scope="module")
def served(hostile_pipeline):
    """The view's FastAPI app on loopback, serving the pipeline (its auth dependencies pass)."""
    import uvicorn

    from tidemark_airflow import view
    from tidemark_airflow.pipelines import Pipeline

    config, _ = hostile_pipeline
    pipeline = Pipeline(config_path="xss.yaml", config=config)
    app = view.app
    for dep in app.router.dependencies:
        app.dependency_overrides[dep.dependency] = lambda: None
    from airflow.api_fastapi.core_api.security import get_user

    app.dependency_overrides[get_user] = lambda: None
    original = view.readable_pipelines
    view.readable_pipelines = lambda user: [pipeline]
    hits: list[str] = []

    async def recording(scope, receive, send):  # every path the browser asks for, then the view
        if scope["type"] == "http":
            hits.append(scope["path"])
        await app(scope, receive, send)

    port = listen_ports(1)[0]
    server = uvicorn.Server(uvicorn.Config(recording, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.1)
    yield f"http://127.0.0.1:{port}", hits
    server.should_exit = True
    thread.join(10)
    view.readable_pipelines = original
    app.dependency_overrides.clear()


def _validation_page_url(base: str, site: Path) -> str:
    """The route's URL of the raw_events validation page (the one holding the sample)."""
    page = next(p for p in site.rglob("validations/*/**/*.html") if "raw_events" in str(p))
    return f"{base}/reports/xss/{page.relative_to(site.parents[3]).as_posix()}"


def test_reports_are_served_inert(served, hostile_pipeline):
    import urllib.request

    base, _ = served
    url = _validation_page_url(base, hostile_pipeline[1])
    with urllib.request.urlopen(url) as response:
        headers = response.headers
    csp = headers["Content-Security-Policy"]
    assert "sandbox" in csp and "allow-scripts" not in csp and "default-src 'none'" in csp
    assert headers["X-Content-Type-Options"] == "nosniff"


def test_no_script_runs_when_a_browser_opens_the_page(served, hostile_pipeline):
    from playwright.sync_api import sync_playwright

    base, hits = served
    url = _validation_page_url(base, hostile_pipeline[1])
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.goto(url)
        page.wait_for_timeout(1500)
        title, text = page.title(), page.inner_text("body")
        browser.close()
    assert any(h.startswith("/reports/xss/") for h in hits), "the recorder saw no request"
    assert title != "PWNED" and "/pwned" not in hits
    assert PAYLOAD in text, "the sample is not shown as the text that was sent"


def test_a_nul_in_a_report_path_is_a_404(served):
    import urllib.error
    import urllib.request

    base, _ = served
    with pytest.raises(urllib.error.HTTPError) as failed:
        urllib.request.urlopen(f"{base}/reports/xss/reconciliation.html%00.png")
    assert failed.value.code == 404


def test_the_view_publishes_no_api_docs(served):
    import urllib.error
    import urllib.request

    base, _ = served
    for path in ("/docs", "/redoc", "/openapi.json"):
        with pytest.raises(urllib.error.HTTPError) as failed:
            urllib.request.urlopen(base + path)
        assert failed.value.code == 404, path


def test_the_data_docs_index_lists_the_validations_with_scripts_off(served, hostile_pipeline):
    """GX builds its index's result table with JavaScript, which the view's policy turns off: the
    page as the browser shows it still lists every validation, the failing one flagged, each
    linking to its page."""
    from playwright.sync_api import sync_playwright

    base, _ = served
    _, site = hostile_pipeline
    url = f"{base}/reports/xss/{(site / 'index.html').relative_to(site.parents[3]).as_posix()}"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.goto(url)
        rows = page.locator("#tidemark-validations tr[data-suite]")
        seen = [
            (rows.nth(i).get_attribute("data-suite"), rows.nth(i).inner_text()) for i in range(rows.count())
        ]
        text = page.inner_text("body")
        opened = ""
        if seen:
            page.locator("#tidemark-validations a[href*='validations/']").first.click()
            page.wait_for_load_state()
            opened = page.inner_text("body")
        browser.close()
    stored = list((site.parents[1] / "validations").glob("*/*/*/*.json"))
    assert stored and len(seen) == len(stored), (seen, stored)
    raw = [row for suite, row in seen if suite == "tidemark_raw_events"]
    assert raw and "FAILED" in raw[0] and "event_id_unique" in raw[0], raw
    assert "Validation results" in text and "<tr" not in text and "<td" not in text
    assert "Expectation Validation Result" in opened or "Validation" in opened, opened[:300]
