"""Reading the watchdog deployed on the sim fleet's router host and the Prometheus next to it: shared by
tests/sim_fleet/test_watchdog_fleet.py and the fleet scenario (tests/scenario)."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import yaml
from pdfleet.paths import REPO_ROOT
from simcluster import ScratchCluster

ROUTER_HOST = "router1"
# The deployed watchdog's budget to name a wedge, from the role's defaults (the fleet tests keep them): failures x
# canary deadline + interval. The budget counts to the failing canary's deadline; the round then observes the
# other members and writes its state before the transition carries a time: ROUND_WORK_S more.
_WATCHDOG = yaml.safe_load((REPO_ROOT / "ansible" / "roles" / "pdfleet_watchdog" / "defaults" / "main.yml").read_text())
DEADLINE_S = float(_WATCHDOG["pdfleet_watchdog_canary_deadline_s"])
INTERVAL_S = float(_WATCHDOG["pdfleet_watchdog_interval_s"])
FAILURES = int(_WATCHDOG["pdfleet_watchdog_failures"])
BUDGET_S = FAILURES * DEADLINE_S + INTERVAL_S
ROUND_WORK_S = 5.0


def deployed_status(c: ScratchCluster, host: str = ROUTER_HOST) -> dict[str, Any]:
    """`pdfleet-watchdog status --json` of the deployed unit on the router host."""
    proc = c.ssh("pdfleet-watchdog status --json", timeout=60, host=host)
    assert proc.returncode in (0, 1), f"{host}: pdfleet-watchdog status failed (rc {proc.returncode}): {proc.stderr}"
    return dict(json.loads(proc.stdout))


def firing(prometheus: str, alert: str, pair: str) -> bool:
    """Whether Prometheus (base URL) has ``alert`` firing for ``pair``."""
    with urllib.request.urlopen(f"{prometheus}/api/v1/alerts", timeout=10) as r:
        alerts = json.loads(r.read())["data"]["alerts"]
    return any(a["labels"].get("alertname") == alert and a["labels"].get("pair") == pair
               and a["state"] == "firing" for a in alerts)


def since(doc: dict[str, Any], host: str, after: float) -> list[dict[str, Any]]:
    """The watchdog's transitions of ``host``'s pair at or after epoch ``after``."""
    return [t for t in doc["transitions"] if t["host"] == host and t["at"] >= after]


def first(doc: dict[str, Any], host: str, to: str, after: float) -> float | None:
    """The epoch of ``host``'s first transition to ``to`` at or after ``after``."""
    return next((t["at"] for t in since(doc, host, after) if t["to"] == to), None)
