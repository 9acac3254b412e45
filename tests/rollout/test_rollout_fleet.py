"""rollout.yml on the simulated fleet (inventory/sim-fleet: three pd-4p4d hosts behind one router), staged
pristine with site.yml --skip-tags verify, under steady client load. Extra depth (long): the default suite's
fleet scenario (tests/scenario, steps a and b) proves the patch rollout under load and a rollback at the second
host; the first test here stays as the staging of the others. In order (each test starts where the last
left the fleet): the pristine -> patched rollout host by host (0 failed, 0 cut, every host patched, the
fleet's verification passes, a second run changes nothing); a bad target (the unpatched stack, which wedges
under the gate's abort cascade) stopped at the canary and rolled back; a version swap whose new-version canary fails
its gate (rolled back, the fleet on the old version throughout); the 0.5.15.post1 -> 0.5.23 split-fleet swap with
no prefill of one version ever serving a decode of the other; the swap back killed right after its first drain
(the fleet serves on one version meanwhile), then a rerun that finishes it (issue 28 item 3)."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from fleet.loadgen import Load
from pdfleet.fleet import Pair, pairs_from_plan
from pdfleet.inventory_plan import plan_inventory
from pdfleet.paths import REPO_ROOT
from simcluster import BIN, ScratchCluster

from .helpers import ROLLOUT, ListingWatch, PairingWatch, get_json, rollout

pytestmark = [pytest.mark.sim, pytest.mark.slow, pytest.mark.long]

HOSTS = ("node1", "node2", "node3")


def _pdfleet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "pdfleet"), *args], capture_output=True, text=True, timeout=600, check=False)


def _listed(c: ScratchCluster) -> list[dict]:
    return get_json(c.router_url + "/workers")["workers"]


def _pairs(c: ScratchCluster) -> dict[str, Pair]:
    return pairs_from_plan(plan_inventory(c.source))


def _listed_versions(c: ScratchCluster) -> set[str]:
    """The SGLang versions of the workers the gateway lists (each worker's own /server_info)."""
    return {str(get_json(w["url"] + "/server_info").get("version")) for w in _listed(c)}


def test_patch_rollout_under_load(sim_fleet: ScratchCluster) -> None:
    c = sim_fleet
    c.set_model("sglang", apply_patch=True)
    with ListingWatch(c.router_url) as watch, Load(c.router_url, c.model) as load:
        run = rollout(c)
    load.dump(c.reports_dir / "load-patch.json")
    s = load.summary()
    r = run.report
    print(f"fleet patch rollout: {run.seconds:.0f} s; load {s}; total {r and r['total_s']} s, gates "
          f"{r and r['sum_gates_s']} s, ratio {r and r['ratio_total_to_gates']}\n" + "\n".join(r["table"] if r else []))
    assert run.rc == 0, run.stdout[-6000:]
    assert s["failed"] == 0 and s["cut"] == 0 and s["ok"] > 0, s
    begins = [r["hosts"][h]["timeline"]["begin"] for h in r["order"]]  # router1 too (its venv has the router)
    assert begins == sorted(begins), f"the hosts were not rolled in the plan's order {r['order']}: {begins}"
    # the watcher polled throughout, without an error, and saw exactly one pair (2 workers) out at the worst
    assert watch.polls > 0 and watch.errors == [], watch.errors[:5]
    assert watch.fewest_listed == 4, f"fewest workers listed during the rollout: {watch.fewest_listed}"
    status = _pdfleet("rollout", "status", "-i", str(c.inventory))
    assert status.returncode == 0, status.stdout + status.stderr
    verify = _pdfleet("verify", "-i", str(c.inventory), "--cycles", "1", "--skip", "bench",
                      "--report", str(c.reports_dir / "after-patch-verify.json"))
    assert verify.returncode == 0, verify.stdout[-3000:] + verify.stderr[-3000:]

    ids = sorted(w["id"] for w in _listed(c))
    again = rollout(c)
    assert again.rc == 0 and all(v["changed"] == 0 for v in again.recap().values()), again.stdout[-3000:]
    assert sorted(w["id"] for w in _listed(c)) == ids


def test_bad_target_stops_at_the_canary_and_rolls_back(sim_fleet: ScratchCluster) -> None:
    c = sim_fleet
    c.set_model("sglang", apply_patch=False)  # the unpatched stack wedges under the gate's abort cascade
    try:
        with Load(c.router_url, c.model) as load:
            run = rollout(c)
        load.dump(c.reports_dir / "load-bad-target.json")
        s = load.summary()
        print(f"bad target: {run.seconds:.0f} s; load {s}")
        assert run.rc != 0 and run.report, run.stdout[-5000:]
        canary, *later = run.report["order"]
        msg = run.stdout
        assert f"{canary}: step gate failed" in msg and "rolled back to 0.5.15.post1+nixl-abort-v2" in msg, msg[-5000:]
        assert "ROLLBACK FAILED" not in msg
        assert s["failed"] == 0 and s["cut"] == 0, s
        assert run.report["outcome"]["failure"]["host"] == canary
        assert all(not run.report["hosts"][h]["timeline"] for h in later)  # later hosts untouched
        assert len(_listed(c)) == 6
    finally:
        c.set_model("sglang", apply_patch=True)
    status = _pdfleet("rollout", "status", "-i", str(c.inventory))
    assert status.returncode == 0, status.stdout  # node1 is back at its previous record, in and serving


def test_a_new_version_canary_failing_its_gate_leaves_the_fleet_on_the_old_version(sim_fleet: ScratchCluster) -> None:
    c = sim_fleet
    # the unpatched 0.5.23 wedges under the gate's abort cascade: the swap's first (new-version) host fails its gate
    c.set_model("sglang", version="0.5.23", patch="nixl-guard-v2", apply_patch=False)
    try:
        with PairingWatch(_pairs(c)) as watch, Load(c.router_url, c.model) as load:
            run = rollout(c)
        load.dump(c.reports_dir / "load-swap-bad-canary.json")
        s = load.summary()
        print(f"swap, bad canary: {run.seconds:.0f} s; load {s}; pairing {watch.paired} in {watch.samples} samples")
        assert run.rc != 0 and run.report, run.stdout[-5000:]
        assert run.report["strategy"] == "split-swap", run.report
        canary = run.report["order"][0]
        assert f"{canary}: step gate failed" in run.stdout, run.stdout[-5000:]
        outcome = run.report["outcome"]
        assert outcome["rolled_back"] is True, (outcome, run.stdout[-8000:])
        assert "rolled back to 0.5.15.post1+nixl-abort-v2" in run.stdout, run.stdout[-8000:]
        assert s["failed"] == 0 and s["cut"] == 0 and s["ok"] > 0, s
        assert watch.samples > 0 and not watch.mixed, watch.mixed[:5]
        assert len(_listed(c)) == 6 and _listed_versions(c) == {"0.5.15.post1"}
    finally:
        c.set_model("sglang", version="0.5.15.post1", patch="nixl-abort-v2", apply_patch=True)
    status = _pdfleet("rollout", "status", "-i", str(c.inventory))
    assert status.returncode == 0, status.stdout  # every host at the inventory's version, in and serving


def test_version_swap_never_pairs_two_versions(sim_fleet: ScratchCluster) -> None:
    c = sim_fleet
    c.set_model("sglang", version="0.5.23", patch="nixl-guard-v2")
    plan = _pdfleet("rollout", "plan", "-i", str(c.inventory))
    assert "split-swap" in plan.stdout, plan.stdout
    with PairingWatch(_pairs(c)) as watch, Load(c.router_url, c.model) as load:
        run = rollout(c)
    load.dump(c.reports_dir / "load-swap.json")
    s = load.summary()
    print(f"version swap: {run.seconds:.0f} s; load {s}; swap {run.report and run.report['swap']}; "
          f"pairing {watch.paired} in {watch.samples} samples")
    assert run.rc == 0, run.stdout[-6000:]
    assert watch.samples > 0 and not watch.mixed, watch.mixed[:5]
    assert "0.5.23 > 0.5.23" in watch.paired, watch.paired
    assert _listed_versions(c) == {"0.5.23"}
    assert s["failed"] == 0 and s["cut"] == 0, s  # no refusal either: smg keeps the cohorts apart, no gap


def test_a_swap_killed_after_its_first_drain_serves_one_version_and_a_rerun_finishes_it(
        sim_fleet: ScratchCluster) -> None:
    c = sim_fleet
    c.set_model("sglang", version="0.5.15.post1", patch="nixl-abort-v2")  # the swap back
    with PairingWatch(_pairs(c)) as watch, Load(c.router_url, c.model) as load:
        proc = subprocess.Popen([str(BIN / "ansible-playbook"), "-i", str(c.inventory), str(ROLLOUT),
                                 "-e", f"pdfleet_rollout_reports_dir={c.reports_dir / 'killed'}"], cwd=REPO_ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            deadline = time.monotonic() + 600
            while len(_listed(c)) == 6 and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.2)
            assert len(_listed(c)) < 6, "the first host was never drained"
            time.sleep(1.0)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        assert len(_listed(c)) == 4  # at most one batch out
        assert _listed_versions(c) == {"0.5.23"}  # the killed run left the fleet serving on one version
        run = rollout(c)
    s = load.summary()
    load.dump(c.reports_dir / "load-swap-killed.json")
    print(f"killed swap + rerun: rerun {run.seconds:.0f} s; load {s}; "
          f"pairing {watch.paired} in {watch.samples} samples")
    assert run.rc == 0, run.stdout[-6000:]
    assert len(_listed(c)) == 6 and _listed_versions(c) == {"0.5.15.post1"}
    assert watch.samples > 0 and not watch.mixed, watch.mixed[:5]
    assert s["failed"] == 0 and s["cut"] == 0, s
    status = _pdfleet("rollout", "status", "-i", str(c.inventory))
    assert status.returncode == 0, status.stdout
    again = rollout(c)
    assert again.rc == 0 and all(v["changed"] == 0 for v in again.recap().values()), again.stdout[-3000:]


def test_a_gateway_killed_in_the_middle_of_a_swap_serves_one_version_and_a_rerun_finishes_it(
        sim_fleet: ScratchCluster) -> None:
    """The swap up again; the moment the gateway lists the new cohort beside the old one, its process gets SIGKILL.
    systemd starts it again with no worker on its command line, and its registrar registers each worker under its
    own version: the old half (the swap's in_gateway lease), not the new half (still held out by the rollout's
    per-host leases). The fleet serves on one version, nothing is ever paired across versions, and a rerun of the
    rollout finishes the swap (issue 28 item 3)."""
    c = sim_fleet
    c.set_model("sglang", version="0.5.23", patch="nixl-guard-v2")
    killed_at: list[float] = []
    with PairingWatch(_pairs(c)) as watch, Load(c.router_url, c.model) as load:
        proc = subprocess.Popen([str(BIN / "ansible-playbook"), "-i", str(c.inventory), str(ROLLOUT),
                                 "-e", f"pdfleet_rollout_reports_dir={c.reports_dir / 'gateway-killed'}"],
                                cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        try:
            deadline = time.monotonic() + 900
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    labels = {str((w.get("labels") or {}).get("pairing_protocol")) for w in _listed(c)}
                except OSError:
                    labels = set()
                if {"sglang-0.5.15.post1", "sglang-0.5.23"} <= labels:  # both cohorts listed: the swap is under way
                    kill = c.ssh("systemctl kill -s KILL pdfleet-router", host="router1")
                    assert kill.returncode == 0, kill.stderr
                    killed_at.append(time.monotonic())
                    break
                time.sleep(0.1)
            first = proc.communicate(timeout=900)[0]
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
        assert killed_at, "the swap never listed both cohorts:\n" + first[-4000:]
        # the gateway is back: one version listed (the old half), under its own protocol
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if len(_listed(c)) == 2 and _listed_versions(c) == {"0.5.15.post1"}:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        listed = _listed(c)
        assert len(listed) == 2 and _listed_versions(c) == {"0.5.15.post1"}, listed
        assert all(w["labels"]["pairing_protocol"] == "sglang-0.5.15.post1" for w in listed), listed
        back_at, back_epoch = time.monotonic(), time.time()
        time.sleep(10)  # serving on the old half alone
        run = rollout(c)
    s = load.summary()
    load.dump(c.reports_dir / "load-gateway-killed.json")
    print(f"gateway killed mid-swap: first run rc {proc.returncode}; the gateway back with one version "
          f"{back_at - killed_at[0]:.1f} s after the kill; rerun {run.seconds:.0f} s rc {run.rc}; load {s}; "
          f"pairing {watch.paired} in {watch.samples} samples")
    assert proc.returncode != 0, first[-4000:]  # the swap lost its gateway: the run stops there
    assert watch.samples > 0 and not watch.mixed, watch.mixed[:5]
    assert run.rc == 0, run.stdout[-6000:]
    assert len(_listed(c)) == 6 and _listed_versions(c) == {"0.5.23"}
    # requests fail only while the gateway process is down (the kill cut them), none that started after it was back
    late = [o for o in load.outcomes if o.kind != "ok" and o.started > back_epoch]
    assert s["ok"] > 0 and not late, late[:5]
    status = _pdfleet("rollout", "status", "-i", str(c.inventory))
    assert status.returncode == 0, status.stdout
