"""The platform as a person uses it: ``make run``'s launcher, then headless Chromium in the Airflow UI.

The launcher starts Airflow (API server + UI, scheduler, DAG processor, triggerer; LocalExecutor,
SQLite), the live generator and the pipeline config; the stream supervisor DAG then starts the
streaming job through the Spark provider. In the browser: log in with the password Airflow's
Simple auth manager generated, see the three Tidemark DAGs, trigger a reconciliation run from the
DAG page, and open the Tidemark view until it shows the pipeline's watermark (which needs the
supervised job to have committed a batch). Screenshots go to test-artifacts/airflow/.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from receivers import free_port

from tidemark_airflow.launcher import Platform

pytestmark = [pytest.mark.spark, pytest.mark.airflow, pytest.mark.slow]

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "airflow"
PIPELINE = "live"
DAGS = [
    f"tidemark_reconciliation__{PIPELINE}",
    f"tidemark_stream_supervisor__{PIPELINE}",
    f"tidemark_watermark_monitor__{PIPELINE}",
]
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


@pytest.fixture(scope="module")
def platform(tmp_path_factory):
    # 200 hosts keep the live stream light on 2 cores; everything else is what `make run` starts
    platform = Platform(tmp_path_factory.mktemp("platform"), port=free_port(), hosts=200, minutes=30)
    try:
        platform.start(echo=lambda m: None)
        yield platform
    finally:
        platform.stop(echo=lambda m: None)


def _api(platform: Platform, token: str, path: str) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{platform.port}{path}", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _token(platform: Platform, user: str, password: str) -> str:
    request = urllib.request.Request(
        f"http://127.0.0.1:{platform.port}/auth/token",
        data=json.dumps({"username": user, "password": password}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())["access_token"]


def _wait(what: str, check, timeout: float, every: float = 3.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def test_log_in_see_the_dags_trigger_a_reconciliation_and_read_the_watermark_in_the_tidemark_view(platform):
    from playwright.sync_api import expect, sync_playwright

    base = f"http://127.0.0.1:{platform.port}"
    user, password = platform.credentials()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    # The view's API refuses anonymous callers (plugin apps are not protected by default).
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{base}/tidemark/api/pipelines", timeout=10)
    assert refused.value.code in (401, 403)

    token = _token(platform, user, password)
    _wait(
        "the DAG processor to parse the three Tidemark DAGs",
        lambda: {d["dag_id"] for d in _api(platform, token, "/api/v2/dags?limit=100")["dags"]} >= set(DAGS),
        timeout=180,
    )

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        try:
            page.goto(f"{base}/", wait_until="domcontentloaded")
            page.locator("input[name=username]").fill(user)
            page.locator("input[name=password]").fill(password)
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url(re.compile(r"^(?!.*/auth/login).*$"), timeout=60_000)

            page.goto(f"{base}/dags", wait_until="domcontentloaded")
            for dag_id in DAGS:
                expect(page.get_by_text(dag_id, exact=True).first).to_be_visible(timeout=60_000)
            page.screenshot(path=str(ARTIFACTS / "dags.png"), full_page=True)

            # Trigger the reconciliation DAG from its page (the Trigger button, then the form's).
            reconciliation = DAGS[0]

            def manual_runs() -> list[dict]:
                runs = _api(platform, token, f"/api/v2/dags/{reconciliation}/dagRuns")["dag_runs"]
                return [r for r in runs if r["run_type"] == "manual"]

            manual_before = len(manual_runs())
            page.goto(f"{base}/dags/{reconciliation}", wait_until="domcontentloaded")
            page.get_by_role("button", name=re.compile(r"^Trigger")).first.click()
            dialog = page.get_by_role("dialog")
            expect(dialog).to_be_visible(timeout=30_000)
            page.screenshot(path=str(ARTIFACTS / "trigger.png"), full_page=True)
            dialog.get_by_role("button", name=re.compile(r"^Trigger")).last.click()
            runs = _wait(
                "the triggered reconciliation run",
                lambda: (lambda runs: runs if len(runs) > manual_before else None)(manual_runs()),
                timeout=60,
            )
            assert len(runs) == manual_before + 1  # exactly the one the button triggered

            # The Tidemark view, inside the UI session: wait for the supervised job's first batch.
            def watermark_shown() -> str | None:
                page.goto(f"{base}/tidemark/", wait_until="domcontentloaded")
                cell = page.locator(f'section[data-pipeline="{PIPELINE}"] td.watermark')
                text = cell.inner_text(timeout=10_000).strip() if cell.count() else ""
                return text if re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", text) else None

            watermark = _wait("the watermark in the Tidemark view", watermark_shown, timeout=420, every=10)
            page.screenshot(path=str(ARTIFACTS / "tidemark_view.png"), full_page=True)
            section = page.locator(f'section[data-pipeline="{PIPELINE}"]')
            expect(section.locator("td.state")).to_contain_text(re.compile("ADVANCING|WAITING|STALLED"))
            # ... and the same view as a person reaches it: the Tidemark entry of the UI's navigation,
            # which embeds it in the Airflow page.
            page.goto(f"{base}/dags", wait_until="domcontentloaded")
            page.get_by_text("Tidemark", exact=True).first.click()  # the sidebar entry (tags are lower case)
            embedded = page.frame_locator("iframe").locator(
                f'section[data-pipeline="{PIPELINE}"] td.watermark'
            )
            expect(embedded).to_have_text(re.compile(r"^\d{4}-\d\d-\d\dT"), timeout=30_000)
            page.screenshot(path=str(ARTIFACTS / "tidemark_in_airflow_ui.png"), full_page=True)
            # The view reads the same committed state as the JVM-free status command.
            summary = next(
                s for s in _api(platform, token, "/tidemark/api/pipelines") if s["pipeline"] == PIPELINE
            )
            assert summary["status"]["watermark"] >= watermark
            assert summary["job"]["state"] == "RUNNING"
        finally:
            page.screenshot(path=str(ARTIFACTS / "last.png"), full_page=True)
            browser.close()
