"""The alert rules and the Grafana dashboard use only metric names the watchdog really exports (one place:
pdfleet.watchdog.metrics), so a rename cannot silently blind an alert."""

from __future__ import annotations

import json
import re

from pdfleet.paths import REPO_ROOT
from pdfleet.watchdog.metrics import WatchdogMetrics
from pdfleet.watchdog.observe import WorkerSignals
from pdfleet.watchdog.state import PairTracker
from prometheus_client import generate_latest

FILES = REPO_ROOT / "ansible/roles/pdfleet_monitoring/files"
NAME = re.compile(r"pdfleet_watchdog_[a-z_]+")


def exported() -> set[str]:
    m = WatchdogMetrics()
    t = PairTracker("node1", last_success=1.0, last_latency_s=0.5)
    m.update_pair(t, True, True, {"p": WorkerSignals("p", "prefill", journal={"thread_death": 0})})
    m.update_remediations({("node1", "restart", "ok"): 1})
    m.last_round.set(1)
    return set(re.findall(r"^(pdfleet_watchdog_[a-z_]+)", generate_latest(m.registry).decode(), re.M))


def used_names(rules_text: str, dashboard_text: str) -> tuple[set[str], set[str]]:
    """The watchdog metric names the alert rules and the dashboard's panel queries use."""
    dash = json.loads(dashboard_text)
    exprs = {t["expr"] for p in dash["panels"] for t in p["targets"]}
    return set(NAME.findall(rules_text)), {n for e in exprs for n in NAME.findall(e)}


def test_rules_and_dashboard_use_exported_names() -> None:
    names = exported()
    rules, dash = used_names((FILES / "pdfleet-alerts.yml").read_text(), (FILES / "pdfleet-dashboard.json").read_text())
    assert rules and dash, "no watchdog metric found in the rules or the dashboard: the pattern no longer matches"
    used = rules | dash
    assert used <= names, f"not exported: {sorted(used - names)}"

