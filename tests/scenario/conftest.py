"""The three-host sim fleet (a scratch copy of inventory/sim-fleet: router1 + node1-3, one TP4 prefill/decode
pair per node) stood up once for the whole fleet scenario, pristine (apply_patch: false) by
`site.yml --skip-tags verify` (the watchdog and Prometheus included), with the fault catalogue's short heartbeat,
restart and router health settings (tests/sim_faults/conftest.py) so the kill -9 bound is minutes, not tens.

Every step writes its figures into one JSON summary, reports/fleet-scenario.json at the repository root,
rewritten after each step so a failed step leaves the earlier figures.

PDFLEET_TEST_SCENARIO_FLEET=<dir> keeps the fleet for rerunning single steps while developing: the first run
stands it up under <dir> (info.json) and leaves it running; later runs reuse it. Take it down with
`pdfleet sim down --state-dir <dir>/state`."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from pdfleet.fleet import Pair, pairs_from_plan
from pdfleet.inventory import InventorySource
from pdfleet.inventory_plan import plan_inventory
from pdfleet.paths import REPO_ROOT
from pdfleet_sim.testing.scratch import scratch_inventory
from sim_faults.conftest import HEARTBEAT_INTERVAL_S, HEARTBEAT_MAX_FAILURES, RESTART_SEC, ROUTER_HEALTH_INTERVAL_S
from simcluster import SITE, ScratchCluster, claimed_net, scratch_cluster, skip_reason, vault_the_key

FLEET_INVENTORY = REPO_ROOT / "inventory" / "sim-fleet"
SUMMARY = REPO_ROOT / "reports" / "fleet-scenario.json"
REUSE_ENV = "PDFLEET_TEST_SCENARIO_FLEET"


@dataclass
class Summary:
    """reports/fleet-scenario.json: the stand-up and each step's figures, rewritten after every change."""

    path: Path
    doc: dict[str, Any] = field(default_factory=dict)
    t0: float = field(default_factory=time.monotonic)

    def write(self) -> None:
        self.doc["elapsed_s"] = round(time.monotonic() - self.t0, 1)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.doc, indent=1, sort_keys=False, default=str))
        tmp.replace(self.path)

    def step(self, name: str, **figures: Any) -> None:
        """Add (or update) a step's figures and write the file."""
        self.doc.setdefault("steps", {}).setdefault(name, {}).update(figures)
        self.write()


@dataclass
class Fleet:
    cluster: ScratchCluster
    pairs: dict[str, Pair]
    prometheus: str  # http://router1:9090
    summary: Summary

    def step(self, name: str, **figures: Any) -> None:
        self.summary.step(name, **figures)


def configure(c: ScratchCluster) -> None:
    """The scenario's settings: pristine, short heartbeat/restart/router health (as the fault catalogue)."""
    c.set_model("sglang", apply_patch=False)
    c.set_model("nixl", heartbeat_interval_s=HEARTBEAT_INTERVAL_S, heartbeat_max_failures=HEARTBEAT_MAX_FAILURES)
    c.set_model("service", restart_sec=RESTART_SEC)
    c.set_model("router", health_check_interval_secs=ROUTER_HEALTH_INTERVAL_S)


def _stage(c: ScratchCluster, summary: Summary) -> None:
    configure(c)
    t0 = time.monotonic()
    print("\n[scenario] standing up the sim fleet (site.yml --skip-tags verify, pristine) ...", flush=True)
    c.playbook(SITE, "--skip-tags", "verify")
    c.wait_ready()
    seconds = round(time.monotonic() - t0, 1)
    print(f"[scenario] fleet staged in {seconds:.0f} s", flush=True)
    summary.doc["stand_up"] = {"seconds": seconds, "converge": "site.yml --skip-tags verify", "pristine": True}
    summary.write()


def _fleet(c: ScratchCluster, summary: Summary) -> Fleet:
    plan = plan_inventory(c.source)
    return Fleet(c, pairs_from_plan(plan), f"http://{urlsplit(plan.router_url).hostname}:9090", summary)


def _kept(root: Path, summary: Summary) -> Iterator[Fleet]:
    """The developer's kept fleet under ``root``: reused when root/info.json exists, else stood up and kept."""
    info_file = root / "info.json"
    if info_file.exists():
        info = json.loads(info_file.read_text())
        c = ScratchCluster(Path(info["inventory"]), Path(info["state"]), info["address"], info["router"],
                           info["model"], root / "reports", Path(info["vault_password_file"]))
        c.wait_ready()
        summary.doc["stand_up"] = {"reused": str(root)}
        summary.write()
        yield _fleet(c, summary)
        return
    root.mkdir(parents=True, exist_ok=True)
    with claimed_net() as net:
        scratch = scratch_inventory(root, net, FLEET_INVENTORY)
        password = vault_the_key(scratch.path, root)
        plan = plan_inventory(InventorySource((scratch.path,), vault_password_files=(str(password),)))
        c = ScratchCluster(scratch.path, scratch.state_dir, scratch.addresses["node1"], plan.router_url,
                           str(plan.model.get("served_name") or plan.model["name"]), root / "reports", password)
        _stage(c, summary)
    info_file.write_text(json.dumps({"inventory": str(c.inventory), "state": str(c.state_dir), "address": c.address,
                                     "vault_password_file": str(password),
                                     "router": c.router_url, "model": c.model}))
    print(f"[scenario] kept: {REUSE_ENV}={root} reuses it; pdfleet sim down --state-dir {c.state_dir} removes it")
    yield _fleet(c, summary)


@pytest.fixture(scope="session")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    summary = Summary(SUMMARY, {"scenario": "tests/scenario (issue 26 item 2)", "started": time.time(),
                                "inventory": str(FLEET_INVENTORY.relative_to(REPO_ROOT))})
    summary.write()
    reuse = os.environ.get(REUSE_ENV)
    if reuse:
        yield from _kept(Path(reuse), summary)
        return
    with scratch_cluster(tmp_path_factory.mktemp("fleetscenario"), source=FLEET_INVENTORY, vault=True) as c:
        _stage(c, summary)
        yield _fleet(c, summary)
        summary.doc["finished"] = time.time()
        summary.write()


def set_instance_name(c: ScratchCluster, old: str, new: str) -> None:
    """Rename one instance in the scratch inventory (same host, GPUs and ports)."""
    path = c.inventory / "group_vars" / "all" / "cluster.yml"
    data = yaml.safe_load(path.read_text())
    (inst,) = [i for i in data["pdfleet_cluster"]["instances"] if i["name"] == old]
    inst["name"] = new
    path.write_text(yaml.safe_dump(data, sort_keys=False))
