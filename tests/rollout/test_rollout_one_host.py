"""rollout.yml on a one-pair cluster (inventory/sim, staged pristine with site.yml --skip-tags verify): the plan
before, check mode touching nothing, the patch rollout under steady client load (the pair leaves the router,
in-flight requests finish, new ones get a fast error for the measured window, never a hung or cut one), the
status after, and a second run that changes nothing and leaves the router alone."""

from __future__ import annotations

import subprocess

import pytest
from fleet.loadgen import Load
from simcluster import BIN, ScratchCluster

from .helpers import get_json, rollout

pytestmark = [pytest.mark.sim, pytest.mark.slow, pytest.mark.long]


def _ids(c: ScratchCluster) -> list[str]:
    return sorted(w["id"] for w in get_json(c.router_url + "/workers")["workers"])


def _pdfleet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "pdfleet"), *args], capture_output=True, text=True, timeout=300, check=False)


def test_one_pair_patch_rollout_under_load(one_host: ScratchCluster) -> None:
    c = one_host
    c.set_model("sglang", apply_patch=True)
    plan = _pdfleet("rollout", "plan", "-i", str(c.inventory))
    assert plan.returncode == 0 and "apply" in plan.stdout, plan.stdout + plan.stderr
    assert "one-pair cluster" in plan.stdout

    ids = _ids(c)
    check = rollout(c, "--check", "--diff")
    assert check.rc == 0, check.stdout[-4000:]
    assert _ids(c) == ids and "apply" in _pdfleet("rollout", "plan", "-i", str(c.inventory)).stdout

    with Load(c.router_url, c.model) as load:
        run = rollout(c)
    s = load.summary()
    print(f"one-pair rollout: {run.seconds:.0f} s, load {s}, report table:\n" + "\n".join(run.report["table"]))
    assert run.rc == 0, run.stdout[-6000:]
    assert s["cut"] == 0 and s["ok"] > 0, s
    window = run.report["window_without_service_s"]["node1"]
    assert window and window > 0
    if s["failed"]:  # only in the window without service, and fast: the router's 503, never a hang
        assert s["failed_max_s"] < 5 and set(s["failed_statuses"]) <= {503}, s
        tl = run.report["hosts"]["node1"]["timeline"]
        assert tl["removed_begin"] - 1 <= s["failed_window"][0] and s["failed_window"][1] <= tl["readded"] + 5, s

    status = _pdfleet("rollout", "status", "-i", str(c.inventory))
    assert status.returncode == 0 and "nixl-abort-v2" in status.stdout, status.stdout + status.stderr

    ids = _ids(c)
    again = rollout(c)
    assert again.rc == 0 and all(r["changed"] == 0 for r in again.recap().values()), again.stdout[-3000:]
    assert _ids(c) == ids  # router membership untouched
