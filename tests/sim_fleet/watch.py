"""Reading the watchdog deployed on the sim fleet's router host and the Prometheus next to it: shared by
tests/sim_fleet/test_watchdog_fleet.py and the fleet scenario (tests/scenario); and a watchdog run in the
foreground from this machine with remediation restart."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from pdfleet.paths import REPO_ROOT
from simcluster import BIN, ScratchCluster, wait_for

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


def local_status(state_file: Path) -> dict[str, Any]:
    """`pdfleet watchdog status --json` of a watchdog run from this machine (its state file)."""
    proc = subprocess.run([str(BIN / "pdfleet"), "watchdog", "status", "--state-file", str(state_file), "--json"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return dict(json.loads(proc.stdout))


def restarts_ok(doc: dict[str, Any], host: str, action: str = "restart") -> int:
    """How many times the watchdog's remediation did ``action`` on ``host``'s pair and it worked."""
    return sum(r["count"] for r in doc["remediation"]["remediations"]
               if r["host"] == host and r["action"] == action and r["result"] == "ok")


@contextmanager
def foreground_watchdog(c: ScratchCluster, tmp: Path, name: str, *args: str, wait_ok: bool = True) -> Iterator[Path]:
    """`pdfleet watchdog run -i --remediation restart` from this machine as the inventory's operator (journals,
    restarts and the pair leases over SSH; the Vault file where the cluster has one); its state file, once it has
    written one (and, with ``wait_ok``, seen every pair OK)."""
    state, log = tmp / f"{name}.json", tmp / f"{name}.log"
    with log.open("w") as out:
        proc = subprocess.Popen([str(BIN / "pdfleet"), "watchdog", "run", "-i", str(c.inventory), *c.vault_args,
                                 "--state-file", str(state), "--remediation", "restart", *args],
                                stdout=out, stderr=subprocess.STDOUT, cwd=REPO_ROOT)
        try:
            wait_for(f"{name}: every pair OK" if wait_ok else f"{name}: its state file",
                     lambda: state.exists() and (local_status(state)["ok"] or not wait_ok), 240, 2.0)
            yield state
        except BaseException:
            print(f"--- {name} log (tail) ---\n{log.read_text()[-6000:]}")
            raise
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
    print(f"--- {name} log (tail) ---\n{log.read_text()[-3000:]}")
