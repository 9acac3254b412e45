"""One converged scratch cluster (inventory/sim on its own subnet) for the whole fault catalogue, with a short
heartbeat so the catalogue runs in minutes; every number a bound uses comes from the plan of that inventory."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from simcluster import BIN, ScratchCluster, scratch_cluster, skip_reason

# The scratch inventory's settings (SGLang's floors: interval 2 s, 1 failure).
HEARTBEAT_INTERVAL_S = 2
HEARTBEAT_MAX_FAILURES = 2
RESTART_SEC = 2
ROUTER_HEALTH_INTERVAL_S = 5
# sglang-router 0.3.2 defaults (router_args.py): a worker is healthy again after 2 good checks, each
# allowed 5 s.
ROUTER_SUCCESS_THRESHOLD = 2
ROUTER_CHECK_TIMEOUT_S = 5
# Budget for one simulated worker or router process to start serving on 2 loaded cores, and for the
# container to boot again after a reboot. A simulated prefill took 40-60 s to start on 2 cores under a load
# of 10 (it imports SGLang's real NixlKVManager).
START_BUDGET_S = 120
BOOT_BUDGET_S = 90
ROUTER_RESTART_SEC = 5  # templates/router.service.j2


def plan_of(cluster: ScratchCluster) -> dict[str, Any]:
    """The plan of the scratch inventory (`pdfleet plan --json`)."""
    out = subprocess.run([str(BIN / "pdfleet"), "plan", "-i", str(cluster.inventory), "--json"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


@dataclass(frozen=True)
class Timing:
    """The numbers a fault's time-to-serve bound is derived from (seconds)."""

    restart_sec: int
    prefill_hold_down_s: int
    heartbeat_forget_s: int
    router_readmit_s: int

    @classmethod
    def of(cls, cluster: ScratchCluster) -> Timing:
        plan = plan_of(cluster)
        units = [u for us in plan["hosts"].values() for u in us]
        hold = max(u["start_hold_down_s"] for u in units if u["role"] == "prefill")
        return cls(restart_sec=int(plan["service"]["restart_sec"]), prefill_hold_down_s=hold,
                   heartbeat_forget_s=HEARTBEAT_INTERVAL_S * (HEARTBEAT_MAX_FAILURES + 1),
                   router_readmit_s=ROUTER_SUCCESS_THRESHOLD * (ROUTER_HEALTH_INTERVAL_S + ROUTER_CHECK_TIMEOUT_S))


@pytest.fixture(scope="session")
def fault_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScratchCluster]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with scratch_cluster(tmp_path_factory.mktemp("faultcluster")) as cluster:
        cluster.set_model("nixl", heartbeat_interval_s=HEARTBEAT_INTERVAL_S,
                          heartbeat_max_failures=HEARTBEAT_MAX_FAILURES)
        cluster.set_model("service", restart_sec=RESTART_SEC)
        cluster.set_model("router", health_check_interval_secs=ROUTER_HEALTH_INTERVAL_S)
        cluster.playbook()
        cluster.wait_ready()
        yield cluster


@pytest.fixture(scope="session")
def timing(fault_cluster: ScratchCluster) -> Timing:
    return Timing.of(fault_cluster)
