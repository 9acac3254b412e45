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


def test_rules_and_dashboard_use_exported_names() -> None:
    names = exported()
    rules = set(NAME.findall((FILES / "pdfleet-alerts.yml").read_text()))
    dash = json.loads((FILES / "pdfleet-dashboard.json").read_text())
    exprs = {t["expr"] for p in dash["panels"] for t in p["targets"]}
    used = rules | {n for e in exprs for n in NAME.findall(e)}
    assert used and used <= names, f"not exported: {sorted(used - names)}"
    assert "pdfleet_watchdog_no_such_metric" not in names  # the check can fail
