"""The pdfleet_router_member module (ansible-playbook, delegated to this machine) against the real router and
simulated workers on loopback: check mode changes nothing, absent/present are idempotent, present confirms
routing; pdfleet_fleet_gate allows a one-pair cluster to go to zero unless min_pairs is given, and refuses
min_pairs it cannot keep; pdfleet_pair_gate reads the journals through the inventory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pdfleet import fleet
from pdfleet.paths import REPO_ROOT
from pdfleet_sim.testing.localpd import LocalPD

pytestmark = pytest.mark.slow


COLLECTION = "pdfleet.cluster"  # the modules' collection (ansible/galaxy.yml), found through ansible.cfg


def _module(name: str, args: dict[str, Any], tmp: Path, check: bool = False) -> dict[str, Any]:
    play = [{"hosts": "localhost", "connection": "local", "gather_facts": False,
             "tasks": [{"name": "run", f"{COLLECTION}.{name}": args, "register": "out", "ignore_errors": True},
                       {"name": "dump", "ansible.builtin.copy": {"content": "{{ out | to_json }}",
                                                                 "dest": str(tmp / "out.json")},
                        "check_mode": False}]}]
    (tmp / "play.yml").write_text(json.dumps(play))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(tmp / "play.yml"),
           "-e", f"ansible_python_interpreter={sys.executable}"]
    proc = subprocess.run([*cmd, *(["--check"] if check else [])], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert (tmp / "out.json").is_file(), proc.stdout[-3000:] + proc.stderr[-2000:]
    return json.loads((tmp / "out.json").read_text())


def _pair(pd: LocalPD) -> dict[str, Any]:
    return fleet.Pair("local", (
        fleet.Member("prefill", "prefill", pd.prefill_url, "", "127.0.0.1", pd.bootstrap_port),
        fleet.Member("decode", "decode", pd.decode_url, "", "127.0.0.1"))).to_dict()


def test_router_member_check_mode_and_idempotence(local_pd: LocalPD, tmp_path: Path) -> None:
    pd = local_pd
    router = fleet.RouterClient(pd.router_url)
    base = {"router_url": pd.router_url, "pair": _pair(pd), "drain_timeout": 30, "model": pd.model}
    ids = sorted(w.id for w in router.workers())

    out = _module("pdfleet_router_member", {**base, "state": "absent"}, tmp_path, check=True)
    assert out["changed"] is True and sorted(w.id for w in router.workers()) == ids  # check mode: untouched

    out = _module("pdfleet_router_member", {**base, "state": "absent"}, tmp_path)
    assert out["changed"] is True and out["drain"]["idle"] is True and router.workers() == []
    specs = out["removed"]
    assert {s["url"] for s in specs} == {pd.prefill_url, pd.decode_url}
    assert _module("pdfleet_router_member", {**base, "state": "absent"}, tmp_path)["changed"] is False

    gate = {"router_url": pd.router_url, "host": "local", "model": pd.model, "plan": {"hosts": {}}}
    out = _module("pdfleet_fleet_gate", gate, tmp_path)
    assert out.get("failed") is not True and out["effective_min_pairs"] == 0  # a one-pair cluster may go to 0
    out = _module("pdfleet_fleet_gate", {**gate, "min_pairs": 1}, tmp_path)  # unless min_pairs=1 is asked for
    assert out.get("failed") is True and "only 0 other pair(s) serve (none), min_pairs is 1" in out["msg"], out

    out = _module("pdfleet_router_member", {**base, "state": "present", "specs": specs}, tmp_path)
    assert out["changed"] is True and out["readd"]["confirmed"] is True, out
    assert len(router.workers()) == 2
    out = _module("pdfleet_router_member", {**base, "state": "present", "specs": specs}, tmp_path)
    assert out["changed"] is False and out["membership_before"] == "in"


def test_fleet_gate_refuses_when_too_few_pairs_serve(local_pd: LocalPD, tmp_path: Path) -> None:
    pd = local_pd
    pair = _pair(pd)
    plan = {"hosts": {"local": [{"name": m["name"], "kind": "worker", "role": m["role"], "url": m["url"],
                                 "host": "local", "address": "127.0.0.1",
                                 "ports": {"bootstrap_port": m["bootstrap_port"]} if m["bootstrap_port"] else {}}
                                for m in pair["members"]],
                      "other": [{"name": "gone", "kind": "worker", "role": "mono", "url": "http://127.0.0.1:9",
                                 "host": "other", "address": "127.0.0.1", "ports": {}}]}}
    out = _module("pdfleet_fleet_gate", {"router_url": pd.router_url, "host": "other", "model": pd.model,
                                         "plan": plan, "min_pairs": 1}, tmp_path)
    assert out.get("failed") is not True and out["serving"] == ["local"], out  # the pair answered through itself
    out = _module("pdfleet_fleet_gate", {"router_url": pd.router_url, "host": "local", "model": pd.model,
                                         "plan": plan, "min_pairs": 1}, tmp_path)
    assert out["failed"] is True and "only 0 other pair(s) serve" in out["msg"], out


def test_pair_gate_reads_journals_over_the_connections_it_is_given(local_pd: LocalPD, tmp_path: Path) -> None:
    """pdfleet_pair_gate reads the journals over SSH with the connection settings the play hands it (the
    pdfleet_connections filter over hostvars: tests/fleet/test_gate_connections.py), never by loading the inventory
    again. Here the pair's host refuses SSH: the protocol runs and the logs check names the SSH failure."""
    pd = local_pd
    pair = _pair(pd)
    for m in pair["members"]:
        m["host"] = "node1"
    connections = {"node1": {"name": "node1", "address": "127.0.0.1", "port": 1, "user": "nobody", "key_file": None,
                             "ssh_args": []}}
    report = tmp_path / "gate.json"
    out = _module("pdfleet_pair_gate", {"pair": pair, "model": pd.model, "connections": connections,
                                        "report": str(report), "settings": {"concurrency": 8, "window_s": 2.0}},
                  tmp_path)
    assert out.get("failed") is True, out  # the journals cannot be read: the gate cannot pass
    logs = next(f for f in out["gate"]["failures"] if f["check"] == "logs")
    problems = " ".join(logs["problems"]) if "problems" in logs else json.dumps(logs)
    assert "journalctl over SSH on node1 failed" in problems, logs
    assert "cannot import" not in problems and "module_utils" not in problems, logs
    checks = {c["name"]: c["status"] for c in json.loads(report.read_text())["report"]["checks"]}
    assert checks["config"] == "pass" and checks["liveness"] == "pass", checks


@pytest.mark.parametrize(("name", "args"), [
    ("pdfleet_router_swap", {"router_url": "http://127.0.0.1:9", "remove": [], "add": []}),
    ("pdfleet_fleet_gate", {"router_url": "http://127.0.0.1:9", "plan": {}, "host": "h", "model": "m"}),
    ("pdfleet_rollout_report", {"path": "/nonexistent", "rollout": {}, "outcome": {}, "started": 0.0}),
], ids=["router_swap", "fleet_gate", "rollout_report"])
def test_a_module_run_where_pdfleet_does_not_import_says_where_to_run_it(name: str, args: dict[str, Any],
                                                                         tmp_path: Path) -> None:
    """The controller modules' shared start (the collection's plugins/module_utils/pdfleet_module.py): an
    interpreter without the pdfleet package (the host's own, not delegated to the control machine) fails with the
    way out, before anything is asked of the arguments' values."""
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    play = [{"hosts": "localhost", "connection": "local", "gather_facts": False,
             "tasks": [{"name": "run", f"{COLLECTION}.{name}": args}]}]
    (tmp_path / "play.yml").write_text(json.dumps(play))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,",
                           str(tmp_path / "play.yml"), "-e", f"ansible_python_interpreter={bare / 'bin' / 'python'}"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode != 0
    assert "the pdfleet package is not importable (No module named 'pdfleet')" in proc.stdout, proc.stdout[-3000:]
    assert "run ansible-playbook from the project venv" in proc.stdout
