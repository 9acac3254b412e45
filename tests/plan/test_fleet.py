"""pd-4p4d as a fleet: several self-contained 4+4 hosts behind one router, which may have its own GPU-less host.

Starts from inventory/examples/pd-fleet (three GPU hosts, router on router01) and from inventory/sim-fleet;
each invalid shape fails `pdfleet plan` (exit 2) with a message naming the host and the fix.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from pdfleet.cli import main
from pdfleet.errors import PlanError
from pdfleet.inventory_plan import plan_inventory
from pdfleet.paths import REPO_ROOT
from pdfleet.versions import PINS, ROUTER_RELEASES
from plan_support import EXAMPLES, apply_edits

FLEET = EXAMPLES / "pd-fleet"
BASE = yaml.safe_load((FLEET / "group_vars" / "all" / "cluster.yml").read_text())["pdfleet_cluster"]
HOSTS = yaml.safe_load((FLEET / "hosts.yml").read_text())


def _inventory(root: Path, cluster: dict, hosts: dict | None = None) -> Path:
    (root / "group_vars" / "all").mkdir(parents=True)
    (root / "hosts.yml").write_text(yaml.safe_dump(hosts or HOSTS))
    (root / "group_vars" / "all" / "cluster.yml").write_text(yaml.safe_dump({"pdfleet_cluster": cluster}))
    return root


def _problems(root: Path, cluster: dict) -> str:
    with pytest.raises(PlanError) as exc:
        plan_inventory(_inventory(root, cluster))
    return str(exc.value)


def test_fleet_example_plans_every_pair_behind_one_router() -> None:
    plan = plan_inventory(FLEET)
    assert [u.name for u in plan.hosts["router01"]] == ["pdfleet-router"]
    for i, host in enumerate(("gpu01", "gpu02", "gpu03")):
        units = {u.role: u for u in plan.hosts[host]}
        assert sorted(units) == ["decode", "prefill"]
        assert units["prefill"].cuda_visible_devices == "0,1,2,3" and units["decode"].cuda_visible_devices == "4,5,6,7"
        assert units["prefill"].name == f"pdfleet-prefill{i}"
    router = plan.hosts["router01"][0]
    # smg lists no worker on its command line; its registrar (ExecStartPost) gets every planned one, with its pair
    assert "--prefill" not in router.exec_start and "--decode" not in router.exec_start
    post = router.exec_start_post
    assert post[1:4] == ["-m", "pdfleet.fleet.members", "--detach"] and post[0] == "/opt/pdfleet/gateway/bin/python"
    rows = [post[i + 1:i + 5] for i, a in enumerate(post) if a == "--member"]
    assert len(rows) == 6 and ["gpu03", "prefill", "http://192.0.2.23:30000", "8998"] in rows
    assert ["gpu01", "decode", "http://192.0.2.21:30001", "-"] in rows
    assert post[post.index("--lease-dir") + 1] == "/var/lib/pdfleet-leases"
    assert router.after == []  # no worker shares its host
    # The router host is not a GPU host: provisioning (driver, CUDA, NIXL) reads host_specs and worker units.
    assert "router01" not in plan.host_specs and sorted(plan.host_specs) == ["gpu01", "gpu02", "gpu03"]


def test_the_old_router_lists_its_workers_and_has_no_registrar(tmp_path: Path) -> None:
    """sglang-router 0.3.2 has no labels: its workers stay on its command line, and nothing registers them."""
    cluster = apply_edits(BASE, {"set": {"sglang.router_package": "sglang-router",
                                         "sglang.router_version": ROUTER_RELEASES["sglang-router"]}})
    plan = plan_inventory(_inventory(tmp_path, cluster))
    router = plan.hosts["router01"][0]
    assert router.exec_start.count("--prefill") == 3 and router.exec_start.count("--decode") == 3
    assert router.exec_start_post == []


@pytest.mark.parametrize(("edit", "found", "fix"), [
    ({"sglang.router_package": "nginx"}, "'nginx' is not a router pdfleet deploys", "choose one of sglang-router, smg"),
    ({"sglang.router_package": "sglang-router"}, f"is the pin of {PINS['sglang_router_package']}, not of sglang-router",
     f"release to deploy ({ROUTER_RELEASES['sglang-router']} has a lock)"),
    ({"sglang.router_venv": "/opt/pdfleet/venv/"}, "/opt/pdfleet/venv/ is the service venv",
     "give the router a venv of its own"),
])
def test_a_router_the_bundle_cannot_deploy_is_refused_naming_the_fix(tmp_path: Path, edit: dict, found: str,
                                                                       fix: str) -> None:
    problems = _problems(tmp_path, apply_edits(BASE, {"set": edit}))
    assert found in problems and fix in problems, problems


def test_sim_fleet_inventory_plans() -> None:
    plan = plan_inventory(REPO_ROOT / "inventory" / "sim-fleet")
    assert plan.profile == "pd-4p4d" and plan.sglang["launcher"] == "sim"
    assert {h: sorted(u.role for u in units) for h, units in plan.hosts.items()} == {
        "router1": ["router"], **{f"node{i}": ["decode", "prefill"] for i in (1, 2, 3)}}
    assert "router1" not in plan.host_specs


def test_router_on_the_first_worker_host(tmp_path: Path) -> None:
    cluster = apply_edits(BASE, {"set": {"router.host": "gpu01"}})
    plan = plan_inventory(_inventory(tmp_path, cluster))
    router = next(u for u in plan.hosts["gpu01"] if u.kind == "router")
    assert router.after == ["pdfleet-prefill0", "pdfleet-decode0"]  # only the workers on its own host


def test_two_pairs_per_host_in_the_even_split(tmp_path: Path) -> None:
    cluster = copy.deepcopy(BASE)
    extra = []
    for inst in cluster["instances"]:
        twin = dict(inst, name=inst["name"] + "b", gpus=inst["gpus"][2:], tp=2,
                    port=inst["port"] + 10, nccl_port=inst["nccl_port"] + 10)
        if "bootstrap_port" in inst:
            twin["bootstrap_port"] = inst["bootstrap_port"] + 1
        inst.update(gpus=inst["gpus"][:2], tp=2)
        extra.append(twin)
    cluster["instances"] += extra
    plan = plan_inventory(_inventory(tmp_path, cluster))
    assert len(plan.hosts["gpu02"]) == 4 and len([u for u in plan.units() if u.role == "prefill"]) == 6


def test_fleet_on_a_host_without_decode(tmp_path: Path) -> None:
    cluster = copy.deepcopy(BASE)
    cluster["hosts"]["gpu01"]["gpu_count"] = 16
    cluster["instances"][3].update(host="gpu01", gpus=[8, 9, 10, 11])  # decode1 moves from gpu02 to gpu01
    msg = _problems(tmp_path, cluster)
    assert "host gpu02: pdfleet_cluster.profile: pd-4p4d puts prefill and decode on every worker host, but gpu02 " \
           "runs only prefill (fix: add a decode instance on gpu02, or use profile pd-multinode)" in msg
    assert "gives prefill 4 and decode 8" in msg  # gpu01 now has an uneven split too


def test_prefill_and_decode_on_different_hosts_is_pd_multinode(tmp_path: Path) -> None:
    """The shape the old rule ("the instances span several") refused is still refused, host by host."""
    cluster = apply_edits(BASE, {"set": {"instances.1.host": "gpu02", "instances.3.host": "gpu01"}})
    cluster["instances"] = cluster["instances"][:2]  # prefill0 on gpu01, decode0 on gpu02
    msg = _problems(tmp_path, cluster)
    assert "but gpu01 runs only prefill" in msg and "but gpu02 runs only decode" in msg


def test_uneven_split_on_one_host(tmp_path: Path) -> None:
    cluster = apply_edits(BASE, {"set": {"instances.4.gpus": [0, 1], "instances.4.tp": 2,
                                         "instances.5.gpus": [2, 3, 4, 5, 6, 7], "instances.5.tp": 6}})
    msg = _problems(tmp_path, cluster)
    assert "pd-4p4d splits each host's GPUs evenly, but gpu03 gives prefill 2 and decode 6" in msg
    assert "gpu01" not in msg and "gpu02" not in msg


def test_router_on_a_host_outside_the_inventory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = apply_edits(BASE, {"set": {"router.host": "router02"}})
    assert main(["plan", "-i", str(_inventory(tmp_path, cluster))]) == 2
    assert "'router02' is not a host of this inventory" in capsys.readouterr().err


def test_worker_on_the_gpu_less_router_host(tmp_path: Path) -> None:
    cluster = apply_edits(BASE, {"set": {"instances.0.host": "router01"}})
    assert "'router01' is not in pdfleet_cluster.hosts" in _problems(tmp_path, cluster)
