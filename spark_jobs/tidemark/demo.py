"""The bounded end-to-end demo on the embedded default (local Spark, local Delta, files)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import yaml

from tidemark.config import load_config
from tidemark.generator import Scenario, generate_files
from tidemark.timeutil import format_duration_ms, format_instant_ms, humanize_ms


def write_demo_config(
    workdir: Path, files_per_batch: int, location: str | None = None, storage: dict | None = None
) -> Path:
    """The demo's pipeline YAML in ``workdir``; landing, warehouse and checkpoint under
    ``location`` (e.g. ``s3a://bucket/demo``, with ``storage`` the config's storage block) or
    under ``workdir``."""
    workdir.mkdir(parents=True, exist_ok=True)
    root = location.rstrip("/") if location else str(workdir)
    config = {
        "pipeline": "demo",
        "source": {
            "kind": "files",
            "path": f"{root}/landing",
            "max_files_per_trigger": files_per_batch,
        },
        "warehouse": f"{root}/warehouse",
        "checkpoint": f"{root}/checkpoints/demo",
        "window": {"size": "1m", "allowed_lateness": "1h"},
        "watermark": {"precision": 0.999},
        "dedup_horizon": "24h",
        **({"storage": storage} if storage else {}),
    }
    path = workdir / "demo.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def run_demo(args, scenario: Scenario, echo=print) -> int:
    from tidemark.reconcile import reconcile
    from tidemark.sparkenv import runtime_line, session_for
    from tidemark.status import read_status
    from tidemark.stream import run_stream

    started = time.monotonic()
    workdir = Path(args.workdir).resolve()
    if workdir.exists() and not args.keep:
        shutil.rmtree(workdir)
    location = getattr(args, "location", None)
    storage_block = _storage_block(args) if location else None
    config_path = write_demo_config(workdir, args.files_per_batch, location, storage_block)
    config = load_config(config_path)

    echo(f"== 1/3 generate -> {config.source.path}")
    assert config.source.path is not None  # the demo's config is a files source
    truth = _generate(scenario, config.source.path, workdir, keep=args.keep, echo=echo)
    echo(
        f"   {truth.unique_events:,} unique events from {scenario.hosts:,} hosts over "
        f"{scenario.minutes} min in {truth.files} files; {truth.duplicate_copies:,} retry copies, "
        f"{truth.malformed_lines:,} malformed lines, {len(scenario.lagging_hosts())} hosts in a "
        f"{scenario.lag_minutes:g}-min outage from minute {scenario.lag_start_minute:g}"
    )

    echo(f"== 2/3 stream ({args.files_per_batch} files per micro-batch)")
    spark = session_for(config, "demo")
    echo(f"   {runtime_line(spark)}")
    processor = run_stream(spark, config, once=True, echo=lambda m: echo("   " + m))
    batches = [s for s in processor.summaries if not s.skipped]

    echo("== 3/3 reconcile every window against a batch recompute of the raw files")
    report = reconcile(spark, config, scenario.start_ms, scenario.end_ms)
    echo(report.table())
    echo(_alignment_line(report, config.allowed_lateness))

    stream_total = _print_progress(batches, report, truth, config, echo)
    echo("")
    echo(f"watermark status now (`tidemark watermark --config {config_path}`, no Spark):")
    echo("  " + read_status(config).text(limit=5).replace("\n", "\n  "))
    quality_ok = _quality_and_report(config, config_path, scenario, spark, workdir, echo)
    echo(f"config {config_path}; done in {humanize_ms(int((time.monotonic() - started) * 1000))}")
    spark.stop()
    ok = report.totals()["unexplained"] == 0 and stream_total == truth.unique_events and quality_ok
    return 0 if ok else 1


def _print_progress(batches, report, truth, config, echo) -> int:
    """Each batch's watermark line and the totals against the input's truth; the events streamed."""
    echo("")
    echo("watermark progress (precise, precision 0.999):")
    for s in batches:
        echo(
            f"  batch {s.batch_id:>3}  {format_instant_ms(s.watermark)}  {s.state:<9}  "
            f"hosts {s.hosts_reporting:,} reporting / {s.hosts_lagging:,} lagging  "
            f"{s.events:,} events, {s.late:,} late ({s.late_folded:,} folded in), "
            f"{s.quarantined:,} quarantined"
        )
    totals = report.totals()
    stream_total = sum(s.events for s in batches)
    echo("")
    echo(
        f"events streamed {stream_total:,} (unique in the input: {truth.unique_events:,}); "
        f"quarantined {sum(s.quarantined for s in batches):,} (malformed lines: "
        f"{truth.malformed_lines:,}); unexplained difference {totals['unexplained']:,}"
    )
    echo(
        f"tables under {config.tables_root}/: events windows late_events quarantine watermarks reconciliation"
    )
    return stream_total


def _alignment_line(report, allowed_lateness_ms: int) -> str:
    """On-time against final alignment: what a reader saw when each window closed, and what it
    reads now that the late records within the allowed lateness are folded in."""
    summary = report.summary()
    closed = report.closed
    ontime_ok = sum(
        1 for w in closed if w.ontime_alignment is not None and w.ontime_alignment >= report.target
    )

    def share(n: int) -> str:
        return f"{n / len(closed):.2%}" if closed else "-"

    return (
        f"alignment on-time (first result, when each window closed): worst {summary.worst_ontime_alignment}, "
        f"{share(ontime_ok)} of windows at target; final (latest revision, allowed lateness "
        f"{format_duration_ms(allowed_lateness_ms)}): worst {summary.worst_alignment}, "
        f"{share(summary.aligned)} at target; "
        f"{summary.late_folded:,} late records folded into {sum(w.revisions for w in closed):,} revisions, "
        f"{summary.late_events:,} beyond the allowed lateness"
    )


def _storage_block(args) -> dict:
    block: dict = {}
    if getattr(args, "s3_endpoint", None):
        block["endpoint"] = args.s3_endpoint
    if getattr(args, "s3_path_style", False):
        block["path_style"] = True
    return block


def _generate(scenario: Scenario, landing: str, workdir: Path, keep: bool, echo):
    """Generate the scenario into ``landing``; on object storage, into ``workdir/landing`` first,
    then uploaded in name order (a clean start deletes what the location held)."""
    from tidemark import object_store, storage_settings

    if not storage_settings.is_object_store(landing):
        return generate_files(scenario, landing)
    root = landing.rsplit("/", 1)[0]
    if object_store.ensure_bucket(root):
        echo(f"   created bucket {storage_settings.bucket_of(root)}")
    if not keep:
        object_store.remove_tree(root)
    staging = workdir / "landing"
    truth = generate_files(scenario, str(staging))
    started = time.monotonic()
    copied = object_store.upload_tree(staging, landing)
    echo(f"   uploaded {copied} files to {landing} in {time.monotonic() - started:.1f}s")
    return truth


def _quality_and_report(config, config_path: Path, scenario: Scenario, spark, workdir: Path, echo) -> bool:
    """Run the Great Expectations suites, write the reconciliation report, say where both are."""
    from tidemark.quality import validate_pipeline
    from tidemark.report import write_report

    echo("")
    echo(f"data quality (`tidemark validate --config {config_path}`; suites in expectations/):")
    outcome = validate_pipeline(config, scenario.start_ms, scenario.end_ms, spark=spark)
    echo("  " + outcome.text().replace("\n", "\n  "))
    report = write_report(config, outcome=outcome, docs_index=outcome.docs_index)  # the published one
    echo("")
    echo(f"reconciliation report: {report}")
    echo(f"data docs:             {outcome.docs_index}")
    echo(f"validation history:    {outcome.docs_history} (works offline)")
    return outcome.success
