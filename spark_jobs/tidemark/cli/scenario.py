"""``tidemark generate`` and ``tidemark demo``: a synthetic scenario, written or run end to end.

Both take the scenario options (hosts, lag, retries, malformed lines, seed); ``generate`` writes
it to a landing directory, object storage or a Kafka topic, ``demo`` streams and reconciles it.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tidemark import object_store, storage
from tidemark.cli.common import echo, fraction, instant
from tidemark.config import load_config
from tidemark.errors import ConfigError

if TYPE_CHECKING:
    from tidemark.generator import Scenario, Truth


def _add_shape_options(g: argparse._ArgumentGroup, defaults: Scenario) -> None:
    g.add_argument(
        "--hosts", type=int, default=defaults.hosts, help="number of source hosts (default %(default)s)"
    )
    g.add_argument(
        "--minutes",
        type=int,
        default=defaults.minutes,
        help="event-time span in minutes (default %(default)s)",
    )
    g.add_argument(
        "--rate",
        type=int,
        default=defaults.events_per_host_per_minute,
        help="events per host per minute (default %(default)s)",
    )
    g.add_argument(
        "--keys",
        default=",".join(defaults.keys),
        help="comma-separated event keys (default %(default)s)",
    )


def _add_fault_options(g: argparse._ArgumentGroup, defaults: Scenario) -> None:
    g.add_argument(
        "--lag-share",
        type=fraction,
        default=defaults.lag_share,
        help="share of hosts that lag (default %(default)s)",
    )
    g.add_argument(
        "--lag-minutes",
        type=float,
        default=defaults.lag_minutes,
        help="how long the lagging hosts' outage lasts, minutes (default %(default)s)",
    )
    g.add_argument(
        "--lag-start",
        type=float,
        default=defaults.lag_start_minute,
        help="minute of the scenario at which the lagging hosts' outage starts (default %(default)s)",
    )
    g.add_argument(
        "--duplicate-rate",
        type=fraction,
        default=defaults.duplicate_rate,
        help="share of records re-sent by a publisher retry (same event_id), landing 30 s-5 min "
        "later (default %(default)s)",
    )
    g.add_argument(
        "--malformed-rate",
        type=fraction,
        default=defaults.malformed_rate,
        help="share of records followed by a malformed line (default %(default)s)",
    )


def _add_replay_options(g: argparse._ArgumentGroup, defaults: Scenario) -> None:
    g.add_argument(
        "--seed",
        type=int,
        default=defaults.seed,
        help="random seed; same seed, same files (default %(default)s)",
    )
    g.add_argument(
        "--start",
        type=instant,
        default=defaults.start_ms,
        help="first event time, ISO-8601 or epoch ms, bounded mode only (default 2025-11-22T10:00:00Z)",
    )
    g.add_argument(
        "--file-span",
        type=int,
        default=defaults.file_span_s,
        help="seconds of arrival time per landing file (default %(default)s)",
    )


def add_scenario_options(p: argparse.ArgumentParser, defaults: Scenario) -> None:
    """The ``scenario`` option group, its defaults from ``defaults``."""
    g = p.add_argument_group("scenario")
    _add_shape_options(g, defaults)
    _add_fault_options(g, defaults)
    _add_replay_options(g, defaults)


def scenario_from(args: argparse.Namespace) -> Scenario:
    """The scenario the options describe (a :class:`UsageError` names the values it refuses)."""
    from tidemark.generator import Scenario

    return Scenario(
        hosts=args.hosts,
        minutes=args.minutes,
        events_per_host_per_minute=args.rate,
        keys=tuple(k.strip() for k in args.keys.split(",") if k.strip()),
        lag_share=args.lag_share,
        lag_minutes=args.lag_minutes,
        lag_start_minute=args.lag_start,
        duplicate_rate=args.duplicate_rate,
        malformed_rate=args.malformed_rate,
        seed=args.seed,
        start_ms=args.start,
        file_span_s=args.file_span,
    )


def _check_history(args: argparse.Namespace) -> None:
    if args.history and not args.live:
        raise ConfigError("generate: --history needs --live")
    if args.history < 0:
        raise ConfigError(f"generate: --history must be >= 0 minutes, got {args.history}")


def cmd_generate(args: argparse.Namespace) -> int:
    from tidemark.generator import generate_files, generate_live

    if args.kafka:
        return _generate_kafka(args)
    if args.out:
        out = args.out
    elif args.config:
        cfg = load_config(args.config)
        if cfg.source.kind == "kafka":  # publish to the config's broker and topic, as configured
            from tidemark.kafka_access import kafka_access

            args.topic = cfg.source.topic
            return _generate_kafka(args, kafka_access(cfg))
        if cfg.source.kind != "files":
            raise ConfigError(
                f"config {args.config}: generate writes files or publishes to Kafka; source.kind is "
                f"{cfg.source.kind} (a delta source reads another pipeline's events)"
            )
        out = cfg.source.path
    else:
        raise ConfigError("generate: give --out DIR or --config FILE (its source.path)")
    scenario = scenario_from(args)
    started = time.monotonic()
    total = scenario.hosts * scenario.minutes * scenario.events_per_host_per_minute
    echo(
        f"generating {'live' if args.live else 'bounded'} scenario: {scenario.hosts:,} hosts x "
        f"{scenario.minutes} min x {scenario.events_per_host_per_minute}/min = {total:,} events "
        f"-> {out}"
    )
    _check_history(args)
    progress = echo if args.verbose or args.live else None
    if storage.is_object_store(out):
        truth = _generate_to_object_store(args, scenario, out, progress)
    elif args.live:
        truth = generate_live(scenario, out, progress=progress, history_minutes=args.history)
    else:
        truth = generate_files(scenario, out, progress=progress)
    echo(
        f"wrote {truth.files} files, {truth.lines:,} lines: {truth.unique_events:,} unique events, "
        f"{truth.duplicate_copies:,} retry copies, {truth.malformed_lines:,} malformed lines, "
        f"{len(scenario.lagging_hosts())} lagging hosts ({time.monotonic() - started:.1f}s)"
    )
    return 0


def _generate_to_object_store(
    args: argparse.Namespace, scenario: Scenario, uri: str, progress: Callable[[str], None] | None
) -> Truth:
    """Object storage: the files are written locally, then uploaded in name order (an object's
    arrival is its upload time, so arrival order is name order); the bucket is made if missing."""
    import tempfile

    from tidemark.generator import generate_files

    if args.live:
        raise ConfigError(f"generate: --live writes a local directory; {uri} is on object storage")
    with tempfile.TemporaryDirectory(prefix="tidemark-generate-") as local:
        truth = generate_files(scenario, local, progress=progress)
        object_store.ensure_bucket(uri)
        uploaded = object_store.upload_tree(local, uri)
    echo(f"uploaded {uploaded} files to {uri}")
    return truth


def _generate_kafka(args: argparse.Namespace, access: Any = None) -> int:
    """Publish to ``--kafka``/``--topic``, or to a config's cluster (``access``: its security
    settings and secrets, as the stream reads them)."""
    from tidemark.kafka import publish_scenario

    if not args.topic:
        raise ConfigError("generate: --kafka needs --topic")
    _check_history(args)
    target = access if access is not None else args.kafka
    where = access.describe() if access is not None else args.kafka
    scenario = scenario_from(args)
    started = time.monotonic()
    echo(
        f"publishing {'live' if args.live else 'bounded'} scenario to {where} "
        f"topic {args.topic} (keyed by host)"
    )
    truth = publish_scenario(
        scenario,
        target,
        args.topic,
        live=args.live,
        progress=echo if args.verbose or args.live else None,
        history_minutes=args.history,
    )
    echo(
        f"published {truth.lines:,} records: {truth.unique_events:,} unique events, "
        f"{truth.duplicate_copies:,} retry copies, {truth.malformed_lines:,} malformed "
        f"({time.monotonic() - started:.1f}s)"
    )
    return 0


def add_generate_command(sub: argparse._SubParsersAction) -> None:
    from tidemark.generator import Scenario

    gen = sub.add_parser(
        "generate",
        help="write a synthetic multi-host scenario to a landing directory",
        description="Write newline-delimited JSON logs from many hosts, with lagging hosts, "
        "publisher-retry duplicates and malformed lines. Deterministic for a --seed.",
    )
    target = gen.add_argument_group("output and pacing")
    target.add_argument("--out", help="landing directory to write (default: the config's source.path)")
    target.add_argument("--config", help="pipeline YAML whose source.path is the landing directory")
    target.add_argument(
        "--kafka", metavar="BOOTSTRAP", help="publish to this Kafka cluster instead of writing files"
    )
    target.add_argument("--topic", help="Kafka topic to publish to (with --kafka); created if missing")
    target.add_argument(
        "--live",
        action="store_true",
        help="event time ~ now, each file written when its arrival span has passed (paced)",
    )
    target.add_argument(
        "--history",
        type=int,
        default=0,
        metavar="MINUTES",
        help="with --live: start this many minutes in the past; the past is written at once "
        "(its files dated at their arrival time), then the rest paced as usual",
    )
    target.add_argument("--verbose", action="store_true", help="print a line per file written")
    add_scenario_options(gen, Scenario())
    gen.set_defaults(func=cmd_generate)


def cmd_demo(args: argparse.Namespace) -> int:
    from tidemark.demo import run_demo

    return run_demo(args, scenario=scenario_from(args), echo=echo)


def add_demo_command(sub: argparse._SubParsersAction) -> None:
    from tidemark.generator import Scenario

    demo = sub.add_parser(
        "demo",
        help="bounded end-to-end run: generate, stream in micro-batches, reconcile, report",
        description="Generate a scenario (10,000 hosts, 20 min, 0.05% lagging 5 min, 1% "
        "duplicates, 0.01% malformed), stream it in several micro-batches, reconcile every "
        "closed window and print the alignment table, the watermark progress and the tables.",
    )
    demo.add_argument(
        "--workdir",
        default="var/demo",
        help="where landing files, checkpoint and tables go (default %(default)s)",
    )
    demo.add_argument(
        "--files-per-batch",
        type=int,
        default=2,
        help="landing files per micro-batch (default %(default)s)",
    )
    demo.add_argument(
        "--keep", action="store_true", help="keep an existing workdir instead of starting clean"
    )
    demo.add_argument(
        "--location",
        help="put landing files, checkpoint and tables under this URI instead (e.g. s3a://bucket/demo; "
        "credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)",
    )
    demo.add_argument("--s3-endpoint", help="with --location: the S3 API's URL (e.g. http://127.0.0.1:19878)")
    demo.add_argument(
        "--s3-path-style",
        action="store_true",
        help="with --location: the bucket in the URL's path (MinIO, moto, s3proxy)",
    )
    add_scenario_options(demo, Scenario(lag_minutes=5.0))
    demo.set_defaults(func=cmd_demo)
