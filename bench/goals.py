"""The benchmark goals in one table, from the newest raw results of each bench.

Not a bench: ``bench/report.py`` renders this into docs/benchmarks.md from the results the
benches wrote (``SOURCES``), so the table cannot drift from them. Each row gives the goal, the
measured median and spread (paired ratios where the bench pairs its rounds), the commit that
measured it, met or not, and, where not met, where the time goes, read from the same results.
A source with no results yet gives a row that says so.
"""

from __future__ import annotations

import sys
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from benchlib import md_table

# what the table reads: bench/results/<name>-<date>[-<tag>].json(l), the newest of each
SOURCES = (
    "peers",
    "latency",
    "latency@lagging",
    "latency@alone",
    "latency@alone-lagging-5",
    "latency@alone-lagging-50",
    "latency@no-heartbeats",
    "hosts_scale",
    "reconcile_retention",
    "reconcile_retention@kafka",
    "soak",
)
HEADERS = ["goal", "measured: median (spread)", "commit", "verdict", "where the time goes"]
# what reconcile_retention's run reads, by its tag
RETENTION_SOURCES = {"": "landing files", "kafka": "a Kafka topic"}
RETENTION_GOAL = 1.2  # one hour reconciled with a day present / the hour alone
SOAK_HOURS = 6.0  # the shortest soak the goal accepts (24 h asked first)
# The sustainable rate (docs/benchmarks.md, section 4, bench/sustainable.py): 10,000 hosts x 1,280
# events a minute kept up on this 2-core machine (2,560 fell behind).
SUSTAINABLE_EVENTS_S = 10_000 * 1_280 // 60


def _verdict(ok: bool) -> str:
    return "met" if ok else "**NOT met**"


def _phases(run: dict, top: int = 3) -> str:
    ranked = sorted(run.get("phases_s", {}).items(), key=lambda item: -item[1])[:top]
    return ", ".join(f"{name} {secs:.1f} s" for name, secs in ranked)


def peers_rows(data: dict) -> list[list[str]]:
    import peers

    rate = peers.rates(data)
    rows = []
    for goal, num, den, least in peers.GOALS:
        for k in data["sizes"]:
            ratios = peers.paired(rate, (num, k), (den, 0 if den == "flink" else k))
            if not ratios:
                continue
            ok = median(ratios) >= least
            where = ""
            if not ok:
                mine = peers.median_run(data["runs"], num, k)
                theirs = peers.median_run(data["runs"], den, 0 if den == "flink" else k)
                if mine and theirs and "batch_s" in mine:
                    where = (
                        f"{num}'s median run {mine['wall_s']:.1f} s wall, {mine['batch_s']:.1f} s in "
                        f"{mine['batches']} batches ({_phases(mine)}); "
                        f"{peers.LABELS[den]}'s {theirs['wall_s']:.1f} s"
                    )
            rows.append(
                [f"{goal} ({k} files/trigger)", peers.spread(ratios), data["commit"], _verdict(ok), where]
            )
    return rows


def latency_rows(data: dict) -> list[list[str]]:
    rows_in = data["rows"]
    if not rows_in or len(rows_in[0]) < 9:  # results from before the floor's excess was measured
        return [
            [
                "latency: p99 <= the definition floor + one trigger + 2 s",
                "not measured this way (results of " + data["date"][:10] + ")",
                data["commit"],
                "**NOT met**",
                "re-run bench/latency.py",
            ]
        ]
    trigger = data["args"]["trigger"]
    goal_s = _duration_s(trigger) + 2
    floors = {r[0]: r for r in rows_in if r[1].startswith("floor")}
    rows = []
    for r in rows_in:
        if not r[1].startswith("Tidemark"):
            continue
        over = float(r[8]) if r[8] != "-" else float("inf")
        floor = floors.get(r[0])
        measured = (
            f"p99 {r[8]} s over the floor; latency p50 {r[5]} s, p99 {r[6]} s, max {r[7]} s "
            f"over {r[2]} windows (floor p99 {floor[6] if floor else '-'} s)"
        )
        where = (
            f"the wait for the next {trigger} trigger and the batch; the first batch's windows apart: {r[4]}"
        )
        peers = sum(1 for x in rows_in if x[0] == r[0] and x[1].startswith("Spark"))
        queries = "queries" if peers > 1 else "query"
        beside = f"{peers} peer {queries} beside it" if peers else "alone in its session"
        if data["args"].get("heartbeat_every", "0s") in ("0s", "0"):
            beside += ", no heartbeats"
        rows.append(
            [
                f"latency ({r[0]}, {beside}): p99 <= floor + {trigger} + 2 s, "
                f"so <= {goal_s:.0f} s over the floor",
                measured,
                data["commit"],
                _verdict(over <= goal_s),
                where if over > goal_s else f"cold start apart: {r[4]}",
            ]
        )
    return rows


def _duration_s(text: str) -> float:
    from tidemark.timeutil import parse_duration_ms

    return parse_duration_ms(text) / 1000


def hosts_rows(data: dict) -> list[list[str]]:
    import hosts_scale

    rounds = hosts_scale.runs_on(data)
    sizes = [int(h) for h in data["args"]["hosts"].split(",")]
    base, top = sizes[0], sizes[-1]
    ratios = hosts_scale.paired_ratios(rounds, base, top)
    per_m = hosts_scale.driver_cpu_per_million(rounds, top)
    where = f"driver CPU {median(per_m):.2f} s per M lines at {top:,} hosts" if per_m else ""
    if where and (
        on_executors := hosts_scale.driver_cpu_per_million(hosts_scale.runs_on(data, "executors"), top)
    ):
        where += f" ({median(on_executors):.2f} with spark.per_row_work: executors)"
    ok = median(ratios) <= hosts_scale.GOAL
    return [
        [
            f"{top:,} against {base:,} hosts, paired rounds: median <= {hosts_scale.GOAL}x",
            f"{median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}, {len(ratios)} rounds)",
            data["commit"],
            _verdict(ok),
            where,
        ]
    ]


def retention_rows(label: str, data: dict) -> list[list[str]]:
    import reconcile_retention as rr

    times = data["times"]
    day, hour = times[f"reconcile, {rr.CASES['day']}"], times[f"reconcile, {rr.CASES['hour']}"]
    ratio = median(day) / median(hour)
    return [
        [
            f"reconcile one hour with a day of {label} present: <= {RETENTION_GOAL}x the hour alone",
            f"{ratio:.2f}x (day {min(day):.2f}-{max(day):.2f} s, hour {min(hour):.2f}-{max(hour):.2f} s, "
            f"{len(day)} runs each)",
            data["commit"],
            _verdict(ratio <= RETENTION_GOAL),
            "" if ratio <= RETENTION_GOAL else "choosing and reading the day's input",
        ]
    ]


def _slope_per_hour(samples: list[dict], value) -> float:
    points = [(s["minute"] / 60, value(s)) for s in samples if value(s) is not None]
    if len(points) < 3:
        return float("nan")
    x, y = np.array(points).T
    return float(np.polyfit(x, y, 1)[0])


def soak_rows(lines: list[dict]) -> list[list[str]]:
    header, samples = lines[0], [s for s in lines if "minute" in s]
    hours = samples[-1]["minute"] / 60 if samples else 0.0
    args = header["args"]
    rate = int(args["hosts"]) * int(args["rate"]) / 60
    share = rate / SUSTAINABLE_EVENTS_S
    slopes = {
        "heap after GC": (_slope_per_hour(samples, lambda s: s["heap_after_gc_mb"]), "MiB/h"),
        "Python RSS": (_slope_per_hour(samples, lambda s: s["py_rss_mb"]), "MiB/h"),
        "batch median": (_slope_per_hour(samples, lambda s: s["batch_median_s"]), "s/h"),
        "events log files": (
            _slope_per_hour(samples, lambda s: s["tables"].get("events", {}).get("log_files")),
            "/h",
        ),
    }
    measured = (
        f"{hours:.1f} h at {rate:,.0f} events/s ({share:.0%} of the sustainable {SUSTAINABLE_EVENTS_S:,}), "
        f"dedup horizon {args.get('dedup_horizon', '24h')}; slopes: "
        + ", ".join(f"{name} {value:+.2f} {unit}" for name, (value, unit) in slopes.items())
    )
    if hours >= SOAK_HOURS and share >= 0.5:
        raise SystemExit("goals: a soak of 6 h or more: grade its rate and slopes here before using it")
    short = []
    if hours < SOAK_HOURS:
        short.append(f"not run long enough: {hours:.1f} h of the {SOAK_HOURS:.0f} h asked")
    if share < 0.5:
        short.append(f"at {share:.1%} of the sustainable rate, below the half asked")
    return [
        [
            f"soak: >= {SOAK_HOURS:.0f} h at >= 50% of the sustainable rate, every slope within noise",
            measured,
            header["commit"],
            _verdict(False),
            "; ".join(short),
        ]
    ]


def render(results: dict[str, object]) -> str:
    """The goal table of the newest results of ``SOURCES`` (what ``bench/report.py`` puts in the
    docs); ``results`` maps each source found to its loaded results."""
    rows: list[list[str]] = []
    builders = {
        "peers": peers_rows,
        "latency": latency_rows,
        "latency@lagging": latency_rows,
        "latency@alone": latency_rows,
        "latency@alone-lagging-5": latency_rows,
        "latency@alone-lagging-50": latency_rows,
        "latency@no-heartbeats": latency_rows,
        "hosts_scale": hosts_rows,
        "reconcile_retention": lambda d: retention_rows("landing files", d),
        "reconcile_retention@kafka": lambda d: retention_rows("a Kafka topic", d),
        "soak": soak_rows,
    }
    for name in SOURCES:
        if name in results:
            rows += builders[name](results[name])
        else:
            rows.append([name, "no results", "-", "**NOT met**", f"run bench/{name.partition('@')[0]}.py"])
    return md_table(HEADERS, rows, "lllll") + "\n"
