"""The platform as a person uses it: ``make run``'s launcher, then headless Chromium in the Airflow UI.

The launcher starts Airflow (API server + UI, scheduler, DAG processor, triggerer; LocalExecutor,
SQLite), the live generator with the history since the last complete hour, and the pipeline
config with ``reconcile_start`` at that hour; the stream supervisor DAG then starts the streaming
job through the Spark provider. In that hour one host is cut off for a few minutes, so its
records arrive after their windows closed, within the allowed lateness (3 minutes here). Nobody
clicks anything until the scheduler's own catchup run of that hour has gone through all six tasks:
its on-time pass (windows closed) shows the host's records missing (on-time alignment below 1.0),
its final pass (windows final) has them folded in (alignment 1.0), and both passes published their
Asset events; then a backfill of the same hour through the REST API (what the UI's backfill
dialog calls) re-runs both passes and changes nothing. In the browser: log in, see the DAGs, open
the Tidemark view, check its plots against the Delta tables and the hour's two passes, follow its
links to the hour's report and to the Data Docs and load every same-origin link inside them, see it
refresh without a reload, trigger a manual run.
A user who may not read the DAGs is refused. Screenshots and the hour's task timings go to
test-artifacts/airflow/.

What a person sees of the view is checked as such: no markup as text, the histogram beside the
lagging hosts, readable ticks on every axis, and the page's outline against the approved one
(baselines/tidemark_view.json, see tests/view_outline.py; ``TIDEMARK_UPDATE_BASELINES=1``
approves a wanted change).
"""

from __future__ import annotations

import itertools
import json
import re
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote, urljoin, urlsplit

import pytest
from helpers import open_hour_report, sign_in
from receivers import StatsdReceiver, free_port
from view_outline import check_against_baseline, markup_shown_as_text, outline

from tidemark import schemas as S
from tidemark import tables as T
from tidemark.config import load_config
from tidemark.timeutil import format_instant_ms, parse_instant_ms
from tidemark_airflow.launcher import Platform
from tidemark_airflow.reconciliation import reconciliation_rows

pytestmark = [pytest.mark.spark, pytest.mark.airflow, pytest.mark.slow]

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "airflow"
PIPELINE = "live"
DAGS = [
    f"tidemark_reconciliation__{PIPELINE}",
    f"tidemark_stream_supervisor__{PIPELINE}",
    f"tidemark_watermark_monitor__{PIPELINE}",
]
RECONCILIATION = DAGS[0]
TASKS = [
    "wait_for_close",
    "reconcile_on_time",
    "wait_for_final",
    "reconcile_final",
    "data_quality",
    "check_alignment",
]
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


@pytest.fixture(scope="module")
def statsd():
    receiver = StatsdReceiver()
    yield receiver
    receiver.stop()


@pytest.fixture(scope="module")
def platform(tmp_path_factory, statsd):
    # 200 hosts keep the live stream light on 2 cores; everything else is what `make run` starts.
    # "nobody" has no role: logged in, but allowed nothing.
    platform = Platform(
        tmp_path_factory.mktemp("platform"),
        port=free_port(),
        hosts=200,
        minutes=40,
        users="admin:admin,nobody:",
        allowed_lateness="3m",  # the hour's final pass comes 3 minutes after its close
        # the history's batches (10 minutes each) one after another, not one per 10 s: the hour
        # closes as soon as the stream has read it (the live files still come every 10 s)
        trigger_interval="2s",
        statsd_port=statsd.port,  # Airflow's own metrics, as `make run` sends them
    )
    try:
        platform.start(echo=lambda m: None)
        yield platform
    finally:
        platform.stop(echo=lambda m: None)


def _request(platform: Platform, token: str | None, path: str, body: dict | None = None):
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(
        f"http://127.0.0.1:{platform.port}{path}",
        data=json.dumps(body).encode() if body is not None else None,
        headers=headers,
        method="POST" if body is not None else "GET",
    )
    with urllib.request.urlopen(request, timeout=20) as response:
        return json.loads(response.read())


def _api(platform: Platform, token: str, path: str, body: dict | None = None):
    # This platform's metadata database is SQLite, written by the scheduler, the dag-processor,
    # the triggerer, the task workers and the API server at once. A backfill request that meets
    # another component's write can fail: 503 when the route saw the lock ("not supported on
    # SQLite under concurrent access"), 500 when the audit-log insert that runs before the route
    # was refused (a stale read snapshot gets SQLITE_BUSY at once, without the busy wait). Either
    # way the request created nothing, and a user sends it again; a failed creation after which
    # a backfill exists is not retried.
    for attempt in range(5):
        try:
            return _request(platform, token, path, body)
        except urllib.error.HTTPError as exc:
            exc.add_note(_last_server_error(platform))
            if exc.code not in (500, 503) or not path.startswith("/api/v2/backfills") or attempt == 4:
                raise
            if body is not None and path == "/api/v2/backfills":
                created = _request(platform, token, f"/api/v2/backfills?dag_id={body['dag_id']}")
                if created["backfills"]:
                    raise
            time.sleep(2 * (attempt + 1))


def _last_server_error(platform: Platform) -> str:
    """The API server log's last error line (Airflow logs a 500's statement under an id)."""
    log = platform.root / "logs" / "api-server.log"
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    errors = [line for line in lines if "[error" in line]
    return f"api-server's last error: {errors[-1][:400] if errors else '(none logged)'}"


def _token(platform: Platform, user: str, password: str) -> str:
    return _request(platform, None, "/auth/token", {"username": user, "password": password})["access_token"]


def _status(platform: Platform, token: str | None, path: str) -> int:
    try:
        _request(platform, token, path)
    except urllib.error.HTTPError as exc:
        return exc.code
    return 200


def _wait(what: str, check, timeout: float, every: float = 3.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def _iso(text: str) -> int:
    return parse_instant_ms(text)


def _hour_runs(platform: Platform, token: str, start_ms: int) -> list[dict]:
    runs = _api(platform, token, f"/api/v2/dags/{RECONCILIATION}/dagRuns?limit=100")["dag_runs"]
    return [r for r in runs if r.get("data_interval_start") and _iso(r["data_interval_start"]) == start_ms]


def _hour_passes(config, start_ms: int, end_ms: int) -> dict:
    from tidemark.passes import read_passes

    return {
        p.pass_name: p
        for p in read_passes(config, start_ms, end_ms)
        if (p.start_ms, p.end_ms) == (start_ms, end_ms)
    }


def _task_instances(platform: Platform, token: str, run_id: str) -> dict[str, dict]:
    path = f"/api/v2/dags/{RECONCILIATION}/dagRuns/{quote(run_id, safe='')}/taskInstances"
    return {ti["task_id"]: ti for ti in _api(platform, token, path)["task_instances"]}


def _crawl(page, start: list[str], prefix: str, limit: int = 400) -> list[str]:
    """Load every same-origin link (href/src) reachable from ``start`` under ``prefix`` with the
    page's session; returns the URLs loaded. External links (the Data Docs' CDN assets, GX's own
    site) are not ours to check offline."""
    seen: list[str] = []
    queue = list(start)
    while queue and len(seen) < limit:
        url = queue.pop(0).split("#")[0]
        if not url or url in seen:
            continue
        seen.append(url)
        response = page.request.get(url)
        assert response.status == 200, f"{url} -> HTTP {response.status}"
        if "text/html" not in response.headers.get("content-type", ""):
            continue
        for link in re.findall(r'(?:href|src)\s*=\s*["\']([^"\']+)["\']', response.text()):
            if link.startswith(("#", "javascript:", "mailto:", "data:")):
                continue
            target = urljoin(url, link).split("#")[0]
            if urlsplit(target)._replace(query="").geturl().startswith(prefix) and target not in seen:
                queue.append(target)
    return seen


# Marks the elements without a box (so the outline leaves them out) and returns the DOM as HTML, in
# one synchronous call: the page's refresh cannot replace the dashboard in between.
OUTLINE_DOM = """() => {
  const hidden = [];
  for (const el of document.body.querySelectorAll("*")) {
    if (!el.getClientRects().length) { el.setAttribute("data-outline-hidden", ""); hidden.push(el); }
  }
  const html = document.documentElement.outerHTML;
  for (const el of hidden) el.removeAttribute("data-outline-hidden");
  return html;
}"""


def _overlap(a: dict, b: dict, axis: str) -> bool:
    if axis == "x":
        return a["x"] + a["width"] > b["x"] + 0.5 and b["x"] + b["width"] > a["x"] + 0.5
    return a["y"] + a["height"] > b["y"] + 0.5 and b["y"] + b["height"] > a["y"] + 0.5


def _assert_round_instants(labels: list[str]) -> None:
    """Time-of-day tick labels (``HH:MM``, ``HH:MM:SS``, ``MM-DD HH:MM``) equally spaced at a
    step they are whole multiples of."""
    assert all(re.fullmatch(r"(\d\d-\d\d )?\d\d:\d\d(:\d\d)?", t) for t in labels), labels
    seconds = []
    for t in labels:
        h, m, *sec = (int(v) for v in t.split(" ")[-1].split(":"))
        seconds.append(h * 3600 + m * 60 + (sec[0] if sec else 0))
    steps = {(b - a) % 86_400 for a, b in itertools.pairwise(seconds)}
    assert len(steps) <= 1, f"uneven ticks: {labels}"
    step = steps.pop() if steps else 1
    if step == 0:  # whole days apart (MM-DD labels)
        return
    round_steps = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200)
    assert step in round_steps, f"not a round step: {labels}"
    assert all(s % step == 0 for s in seconds), f"not round instants: {labels}"


# The boxes of the histogram, the lagging list and every tick label of a section, read in one
# synchronous call (the page's refresh replaces the dashboard every few seconds).
LAYOUT = """section => {
  const box = el => {
    const r = el.getBoundingClientRect();
    return {x: r.x, y: r.y, width: r.width, height: r.height};
  };
  return {
    hist: box(section.querySelector("svg.lag-histogram")),
    listing: box(section.querySelector(".lagging-list")),
    svgs: [...section.querySelectorAll("svg")].map(svg => ({
      name: svg.getAttribute("class"),
      x: [...svg.querySelectorAll("text.x-tick")].map(t => [t.textContent, box(t)]),
      y: [...svg.querySelectorAll("text.y-tick")].map(t => [t.textContent, box(t)]),
    })),
  };
}"""


def _check_what_a_person_sees(page, section) -> None:
    """No markup as text; the histogram and the lagging list side by side; on every chart, both
    axes with at least two distinct, non-empty, non-overlapping tick labels (the watermark plot's
    two axes round instants); the DOM's outline as approved."""
    visible = page.inner_text("body")
    shown = markup_shown_as_text(visible)  # "< 10 s", a histogram bin, is a label
    assert not shown, f"markup shown as text: {shown[:5]}"
    layout = section.evaluate(LAYOUT)
    hist, listing = layout["hist"], layout["listing"]
    assert listing["x"] >= hist["x"] + hist["width"] - 1, f"not side by side: {hist}, {listing}"
    assert listing["y"] < hist["y"] + hist["height"], f"not side by side: {hist}, {listing}"
    assert len(layout["svgs"]) == 3, layout["svgs"]
    for svg in layout["svgs"]:
        name = svg["name"]
        for axis in ("x", "y"):
            labels = [text for text, _ in svg[axis]]
            boxes = [b for _, b in svg[axis]]
            assert len(labels) >= 2, f"{name} {axis}: {labels}"
            assert all(labels) and len(set(labels)) == len(labels), f"{name} {axis}: {labels}"
            assert all(b["height"] >= 8 for b in boxes), (name, axis, boxes)  # not shrunk away
            ordered = sorted(boxes, key=lambda b: b[axis])
            crowded = [(a, b) for a, b in itertools.pairwise(ordered) if _overlap(a, b, axis)]
            assert not crowded, f"{name} {axis} tick labels overlap: {labels}"
            if "watermark-plot" in name:  # instants at a round step: 06:15 06:30, not 06:13:20 06:46:40
                _assert_round_instants(labels)
    check_against_baseline(outline(page.evaluate(OUTLINE_DOM)))


def test_the_scheduler_reconciles_the_past_hour_and_the_tidemark_view_shows_it(platform, statsd):
    from playwright.sync_api import expect, sync_playwright

    began = time.monotonic()
    base = f"http://127.0.0.1:{platform.port}"
    user, password = platform.credentials()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    config = load_config(platform.config_path)
    hour_start = platform.first_hour_ms
    hour_end = hour_start + 3_600_000

    # Authorization, not only a login: anonymous and a user who may not read DAGs are refused.
    assert _status(platform, None, "/tidemark/api/pipelines") in (401, 403)
    nobody = _token(platform, *platform.credentials("nobody"))
    for path in (
        "/tidemark/",
        "/tidemark/api/pipelines",
        "/tidemark/fragment",
        f"/tidemark/reports/{PIPELINE}/reconciliation.html",
    ):
        assert _status(platform, nobody, path) == 403, path

    token = _token(platform, user, password)
    _wait(
        "the DAG processor to parse the three Tidemark DAGs",
        lambda: {d["dag_id"] for d in _api(platform, token, "/api/v2/dags?limit=100")["dags"]} >= set(DAGS),
        timeout=180,
    )

    # 1. Without any click: the scheduler's catchup run of the past hour, all four tasks.
    def scheduled_run_done():
        runs = [r for r in _hour_runs(platform, token, hour_start) if r["run_type"] == "scheduled"]
        assert all(r["state"] != "failed" for r in runs), runs
        return next((r for r in runs if r["state"] == "success"), None)

    run = _wait(
        f"the scheduled run of {format_instant_ms(hour_start)}", scheduled_run_done, timeout=1200, every=10
    )
    assert _iso(run["data_interval_end"]) == hour_end  # exactly one hour
    tis = _task_instances(platform, token, run["dag_run_id"])
    assert {t: tis[t]["state"] for t in TASKS} == dict.fromkeys(TASKS, "success")
    assert all(tis[t]["pool"] == "spark" for t in ("reconcile_on_time", "reconcile_final", "data_quality"))
    timings = {t: round(tis[t]["duration"], 1) for t in TASKS}
    rows = reconciliation_rows(config, hour_start, hour_end)
    assert len(rows) == 60 and set(rows["status"]) == {"closed"} and rows["final"].all()
    assert (rows["unexplained"] == 0).all()
    # The two passes: on time, the lagging host's records were not in their windows yet; final,
    # they were folded in (within the allowed lateness) and the hour is exact.
    passes = _hour_passes(config, hour_start, hour_end)
    on_time, final = passes["on_time"], passes["final"]
    assert on_time.worst_ontime_alignment < 1.0 and on_time.late_folded > 0, on_time
    assert final.worst_alignment == 1.0 and final.final == 60 and final.unexplained == 0, final
    assert final.ok and on_time.reconciled_at_ms < final.reconciled_at_ms
    assert on_time.stream_watermark_ms >= hour_end  # every window closed when it ran
    assert final.stream_watermark_ms >= hour_end + config.allowed_lateness  # and final
    events = _api(platform, token, f"/api/v2/assets/events?source_dag_id={RECONCILIATION}")["asset_events"]
    hour_events = [e for e in events if e["extra"].get("start") == format_instant_ms(hour_start)]
    by_pass = {e["extra"]["pass"]: e for e in hour_events}
    assert len(hour_events) == 2 and set(by_pass) == {"on_time", "final"}, hour_events
    assert by_pass["final"]["extra"]["windows"] == 60 and by_pass["final"]["extra"]["worst_alignment"] == 1.0
    assert by_pass["on_time"]["extra"]["alignment"] == on_time.worst_ontime_alignment
    assert by_pass["final"]["extra"]["passes"]["on_time"]["alignment"] == on_time.worst_ontime_alignment
    assert {e["source_run_id"] for e in hour_events} == {run["dag_run_id"]}
    # Airflow's own metrics reached a StatsD receiver: the scheduler's heartbeat and this run's
    # outcome (issue 40: Airflow's metrics on in `make run`).
    names = statsd.names()
    assert "airflow.scheduler_heartbeat" in names, sorted(names)[:40]
    assert any(n.startswith("airflow.dagrun.duration.success") for n in names), sorted(
        n for n in names if "dagrun" in n
    )

    # 2. Backfill the same hour (the UI's dialog calls this endpoint): it re-runs and changes nothing.
    window = {"from_date": format_instant_ms(hour_start), "to_date": format_instant_ms(hour_start)}
    dry = _api(
        platform,
        token,
        "/api/v2/backfills/dry_run",
        {"dag_id": RECONCILIATION, **window, "reprocess_behavior": "completed"},
    )
    assert [_iso(r["logical_date"]) for r in dry["backfills"]] == [hour_start]
    backfill = _api(
        platform,
        token,
        "/api/v2/backfills",
        {"dag_id": RECONCILIATION, **window, "reprocess_behavior": "completed", "max_active_runs": 1},
    )
    _wait(
        "the backfill to complete",
        lambda: _api(platform, token, f"/api/v2/backfills/{backfill['id']}")["completed_at"],
        timeout=900,
        every=10,
    )
    again = _hour_runs(platform, token, hour_start)
    assert again and all(r["state"] == "success" for r in again), again
    after = reconciliation_rows(config, hour_start, hour_end)
    columns = ["window_start_ms", "stream_events", "batch_events", "late_events", "alignment", "unexplained"]
    assert after[columns].equals(rows[columns])  # idempotent: the hour's rows replaced by the same
    again_passes = _hour_passes(config, hour_start, hour_end)  # one row per pass, the same figures
    figures = ["worst_alignment", "worst_ontime_alignment", "late_folded", "unexplained", "closed"]
    for name, before in passes.items():
        assert [getattr(again_passes[name], f) for f in figures] == [getattr(before, f) for f in figures]
    events = _api(platform, token, f"/api/v2/assets/events?source_dag_id={RECONCILIATION}")["asset_events"]
    assert len([e for e in events if e["extra"].get("start") == format_instant_ms(hour_start)]) >= 4

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        try:
            sign_in(page, base, user, password)

            page.goto(f"{base}/dags", wait_until="domcontentloaded")
            for dag_id in DAGS:
                expect(page.get_by_text(dag_id, exact=True).first).to_be_visible(timeout=60_000)
            page.screenshot(path=str(ARTIFACTS / "dags.png"), full_page=True)

            # 3. The Tidemark view: plots against the Delta tables.
            page.goto(f"{base}/tidemark/?refresh=3", wait_until="domcontentloaded")
            section = page.locator(f'section[data-pipeline="{PIPELINE}"]')
            expect(section.locator("td.watermark")).to_have_text(
                re.compile(r"^\d{4}-\d\d-\d\dT"), timeout=30_000
            )
            expect(section.locator("td.state")).to_contain_text(re.compile("ADVANCING|WAITING|STALLED"))
            # What a person sees: no markup as text, the histogram and the lagging hosts side by
            # side, every axis with distinct tick labels that do not overlap, and the page's
            # outline as approved (tests/airflow/baselines/tidemark_view.json).
            _check_what_a_person_sees(page, section)
            page.evaluate("window.__sameDocument = 'yes'")
            marks = section.locator("svg.watermark-plot circle.mark").evaluate_all(
                "els => els.map(e => [Number(e.dataset.batchId), Number(e.dataset.watermarkMs)])"
            )
            table = T.read_local(config.table_path(S.WATERMARKS)).set_index("batch_id")["watermark_ms"]
            assert len(marks) >= 3
            assert all(int(table[b]) == wm for b, wm in marks), marks
            assert [wm for _, wm in marks] == sorted(wm for _, wm in marks)  # never backwards
            hosts = section.locator("svg.lag-histogram rect.bin").evaluate_all(
                "els => els.map(e => Number(e.dataset.hosts))"
            )
            assert sum(hosts) == 200
            points = dict(
                section.locator("svg.alignment-plot circle.window").evaluate_all(
                    "els => els.map(e => [e.dataset.windowStart, Number(e.dataset.alignment)])"
                )
            )
            expected = {
                format_instant_ms(int(r.window_start_ms)): float(r.alignment) for r in after.itertuples()
            }
            assert expected.items() <= points.items()
            expect(section.locator("svg.alignment-plot line.target")).to_have_count(1)
            # the hour's two passes beside its report link: on time below 1.0, final 1.0
            shown = dict(
                section.locator(
                    f'span.recon-pass[data-start="{format_instant_ms(hour_start)}"]'
                ).evaluate_all("els => els.map(e => [e.dataset.pass, Number(e.dataset.alignment)])")
            )
            assert shown == {"on_time": on_time.worst_ontime_alignment, "final": 1.0}, shown
            page.screenshot(path=str(ARTIFACTS / "tidemark_view.png"), full_page=True)

            # refreshes in place: new data-refreshed-at, same document (no reload)
            first = page.locator("body").get_attribute("data-refreshed-at")
            page.wait_for_function(
                f"document.body.dataset.refreshedAt !== {json.dumps(first)}", timeout=30_000
            )
            assert page.evaluate("window.__sameDocument") == "yes"

            # 4. The hour's report and the Data Docs, and every link inside them.
            report = open_hour_report(page, section, PIPELINE, format_instant_ms(hour_start))
            report.screenshot(path=str(ARTIFACTS / "hour_report.png"), full_page=True)
            listed = report.locator("table.passes tr.recon-pass").evaluate_all(
                "els => els.map(e => [e.dataset.pass, Number(e.dataset.ontimeAlignment),"
                " Number(e.dataset.alignment)])"
            )  # the report lists both passes of its hour
            assert [r[0] for r in listed] == ["on_time", "final"], listed
            assert listed[0][1] < 1.0 and listed[1][2] == 1.0, listed
            with report.expect_navigation():
                report.locator("#data-docs-link").click()
            expect(report.locator("body")).to_contain_text("Expectation", timeout=30_000)
            report.screenshot(path=str(ARTIFACTS / "data_docs.png"), full_page=True)
            docs_link = section.locator('a.report[data-label="data-docs"]').get_attribute("href")
            start = [
                report.url,
                urljoin(
                    page.url,
                    section.locator(
                        f'a.hour-report[data-start="{format_instant_ms(hour_start)}"]'
                    ).get_attribute("href"),
                ),
                urljoin(page.url, docs_link),
            ]
            loaded = _crawl(page, start, f"{base}/tidemark/reports/{PIPELINE}/")
            assert any("/validations/" in u for u in loaded), loaded  # a validation result page
            # the site's own assets (GX's styles and scripts come from public CDNs, not checked offline)
            assert any(u.endswith("/static/images/favicon.ico") for u in loaded), loaded
            assert any("history" in u for u in loaded), loaded

            # 5. As a person reaches it: the Tidemark entry of the UI's navigation (an iframe).
            page.goto(f"{base}/dags", wait_until="domcontentloaded")
            page.get_by_text("Tidemark", exact=True).first.click()  # the sidebar entry (tags are lower case)
            embedded = page.frame_locator("iframe").locator(
                f'section[data-pipeline="{PIPELINE}"] td.watermark'
            )
            expect(embedded).to_have_text(re.compile(r"^\d{4}-\d\d-\d\dT"), timeout=30_000)
            page.screenshot(path=str(ARTIFACTS / "tidemark_in_airflow_ui.png"), full_page=True)

            # 6. A manual trigger from the DAG page (the form says which hour an empty range covers).
            def manual_runs() -> list[dict]:
                runs = _api(platform, token, f"/api/v2/dags/{RECONCILIATION}/dagRuns?limit=100")["dag_runs"]
                return [r for r in runs if r["run_type"] == "manual"]

            manual_before = len(manual_runs())
            page.goto(f"{base}/dags/{RECONCILIATION}", wait_until="domcontentloaded")
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
        finally:
            page.screenshot(path=str(ARTIFACTS / "last.png"), full_page=True)
            browser.close()
    figures = {
        "hour": format_instant_ms(hour_start),
        "scheduled_run_tasks_s": timings,
        "test_s": round(time.monotonic() - began, 1),
    }
    (ARTIFACTS / "timings.json").write_text(json.dumps(figures, indent=2), encoding="utf-8")
    print(f"\nplatform: {json.dumps(figures)}")
