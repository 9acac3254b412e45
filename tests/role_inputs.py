"""The inputs the preflight hands each role from the plan, for tests that run one role alone (no preflight).

Every value comes from a real plan (pdfleet's planner over the example inventory pd-4p4d, at the requested pin), as
ansible/playbooks/preflight.yml and vars/provision.yml map them, so a role run alone gets what site.yml would pass it.
This mapping is the test side's copy of the preflight's; tests/provision and tests/model run roles with it, and a
role whose required inputs it misses is refused by its argument_specs there.
"""

from __future__ import annotations

import copy
import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from pdfleet.inventory_plan import supported_patches
from pdfleet.patch.roleinputs import sglang_inputs
from pdfleet.paths import REPO_ROOT
from pdfleet.plandoc import plan_document
from pdfleet.planner import build_plan

EXAMPLE = REPO_ROOT / "inventory" / "examples" / "pd-4p4d"


@functools.cache
def _plan(sglang_version: str, venv: str) -> dict[str, Any]:
    cluster = yaml.safe_load((EXAMPLE / "group_vars" / "all" / "cluster.yml").read_text())["pdfleet_cluster"]
    cluster = copy.deepcopy(cluster)
    patches = supported_patches()
    cluster.setdefault("sglang", {}).update({"version": sglang_version, "venv": venv,
                                             "patch": patches.get(sglang_version, "")})
    hosts = {name: "127.0.0.1" for name in cluster["hosts"]}
    return plan_document(build_plan(cluster, hosts, patches, source=str(EXAMPLE)))


def plan_inputs(role: str, sglang_version: str = "0.5.15.post1", patched: bool = True,
                venv: str = "/opt/pdfleet/venv") -> dict[str, Any]:
    """The plan's inputs of ``role`` (empty for a role that takes none)."""
    doc = _plan(sglang_version, venv)
    cuda, sglang, model, facts = doc["cuda"], doc["sglang"], doc["model"], doc["role_facts"]
    (spec,) = doc["host_specs"].values()
    return {
        "nvidia_driver": {"nvidia_driver_branch": cuda["driver_branch"],
                          "nvidia_driver_version": cuda["driver_version"],
                          "nvidia_driver_hold_regex": facts["driver_hold_regex"],
                          "nvidia_driver_gpu_count": spec["gpu_count"], "nvidia_driver_gpu_model": spec["gpu_model"],
                          "nvidia_driver_gpu_memory_mib": spec["gpu_memory_mib"],
                          "nvidia_driver_compute_capability": spec["compute_capability"]},
        "cuda_toolkit": {"cuda_toolkit_version": cuda["version"]},
        "nixl": {"nixl_version": sglang["nixl_version"], "nixl_venv": sglang["venv"],
                 "nixl_cuda_major": int(cuda["version"].split(".")[0])},
        "sglang": {**sglang_inputs(sglang_version, patched), "sglang_venv": sglang["venv"],
                   "sglang_router_package": sglang["router_package"],
                   "sglang_router_version": sglang["router_version"],
                   "sglang_record_path": f"{sglang['venv']}/{facts['record_name']}"},
        "model": {"model_manifest_name": facts["model_manifest_name"], "model_path": model["path"],
                  "model_source": model["source"], "model_hub_repo": model["name"],
                  "model_hub_revision": model["revision"], "model_hf_cli": f"{sglang['venv']}/bin/hf"},
        "pdfleet_units": {"pdfleet_units_drain_timeout_s": doc["router"]["drain_timeout_s"]},
        "pdfleet_watchdog": {"pdfleet_watchdog_router_python": f"{sglang['venv']}/bin/python"},
    }.get(role, {})


def check_play(tmp_path: Path, body: str, extra: dict[str, Any],
               system_path: bool = False) -> subprocess.CompletedProcess[str]:
    """A play on localhost (local connection, check mode) whose tasks are ``body`` (YAML, indented for ``tasks:``),
    with ``extra`` as its extra vars: how a test runs a role's own tasks alone, without touching this machine.
    ``system_path``: the system's /usr/bin and /bin on PATH too (a role whose read-only probe runs host tools)."""
    book = tmp_path / "play.yml"
    book.write_text("- hosts: localhost\n  connection: local\n  gather_facts: false\n  tasks:\n" + body)
    (tmp_path / "vars.json").write_text(json.dumps(extra))
    bin_dir = Path(sys.executable).parent
    path = f"{bin_dir}:/usr/bin:/bin" if system_path else str(bin_dir)
    return subprocess.run([str(bin_dir / "ansible-playbook"), "-i", "localhost,", "--check", str(book),
                           "-e", f"@{tmp_path / 'vars.json'}"], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=300, check=False, env={"PATH": path, "ANSIBLE_NOCOLOR": "1"})
