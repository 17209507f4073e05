"""The shipped monitoring files (docker/monitoring/) as the tests read them: the Grafana dashboard's
and the alert rules' PromQL, the metric names an expression refers to, the exporter's real output
parsed, and the Prometheus and promtool binaries (scripts/prometheus.sh)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
MONITORING = REPO / "docker" / "monitoring"
DASHBOARD = MONITORING / "grafana-dashboard.json"
ALERTS = MONITORING / "tidemark-alerts.yml"
ALERT_TESTS = MONITORING / "tidemark-alerts.test.yml"
PROMETHEUS_YML = MONITORING / "prometheus.yml"

# PromQL words that are not metric names: set operators, modifiers, grouping, literals.
_KEYWORDS = {
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "atan2",
    "inf",
    "nan",
}


def dashboard_queries() -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and every query variable of the dashboard."""
    dash = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    out = []
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            out.append((f"panel {panel['id']} {panel['title']!r} {target['refId']}", target["expr"]))
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            found = re.fullmatch(r"label_values\((.+),\s*\w+\)", query)
            out.append((f"variable {var['name']}", found.group(1) if found else query))
    return out


def alert_rules() -> list[dict]:
    return [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]


def alert_queries() -> list[tuple[str, str]]:
    """(where, PromQL) of every rule's expression and of the queries its templates run."""
    out = []
    for rule in alert_rules():
        out.append((f"alert {rule['alert']}", rule["expr"]))
        for name, text in rule.get("annotations", {}).items():
            for query in re.findall(r'printf "([^"]+)"', text):
                out.append((f"alert {rule['alert']} {name}", query.replace("%s", "x")))
    return out


def promql_metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers outside strings, label matchers,
    ranges and grouping clauses that are not followed by ``(`` (a function) and are no keyword."""
    text = re.sub(r"\$\{[^}]*\}|\$\w+", "x", expr)  # Grafana variables
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', text)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for found in re.finditer(r"(?<![\w.:])([A-Za-z_:][\w:]*)(\s*\()?", text):
        word, call = found.group(1), found.group(2)
        if call or word.lower() in _KEYWORDS:
            continue
        names.add(word)
    return names


def exposition_names(text: str) -> set[str]:
    """Every sample name in a Prometheus text exposition (a counter's ``_total``, a histogram's
    ``_bucket``, ``_count`` and ``_sum``), parsed by prometheus_client's own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


def scrape_text(url: str, timeout: float = 10) -> str:
    """One scrape of an endpoint, as the text it answered."""
    from urllib.request import urlopen

    with urlopen(url, timeout=timeout) as response:
        return response.read().decode()


def samples_of(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """An exposition's samples: (sample name, sorted labels) -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def scrape(url: str, timeout: float = 10) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """One scrape of an endpoint: (sample name, sorted labels) -> value."""
    return samples_of(scrape_text(url, timeout))


def value(samples: dict, name: str, **labels: str) -> float | None:
    """The value of the one sample of ``name`` whose labels include ``labels`` (None: none)."""
    found = [v for (n, ls), v in samples.items() if n == name and labels.items() <= dict(ls).items()]
    assert len(found) <= 1, f"{name} {labels}: {len(found)} samples"
    return found[0] if found else None


def prometheus_bin() -> Path:
    """The directory with prometheus and promtool, installed once by scripts/prometheus.sh (setup.sh
    --test-tools runs it; here it only prints the directory)."""
    out = subprocess.run(
        [str(REPO / "scripts" / "prometheus.sh")], capture_output=True, text=True, check=False, timeout=3600
    )
    assert out.returncode == 0, f"scripts/prometheus.sh failed: {out.stderr[-2000:]}"
    return Path(out.stdout.strip().splitlines()[-1])
