"""Inventories of N hosts for the planner's scale benchmark (bench_plan_scale.py) and its behaviour tests.

Each host is an 8-GPU pd-4p4d worker: with `per_host=2` one prefill (TP4, GPUs 0-3) and one decode (TP4, GPUs 4-7),
with `per_host=8` four prefills and four decodes of one GPU each. Ports are per host, so every host uses the same
ones (as inventory/examples/pd-fleet does); the router runs on the first host. The model lives once in
group_vars/all/cluster.yml and each host's address in hosts.yml, the way a real fleet's inventory is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

SHAPES = (2, 8)
# The model's hub commit, as inventory/examples pin it (a branch name is refused).
REVISION = "60d8d70770c6776ff598c94bb586a859a38244f1"


def host_name(i: int) -> str:
    return f"gpu{i:04d}"


def host_address(i: int) -> str:
    """A documentation-range (TEST-NET) address per host: 198.18.0.0/15 holds 131072 of them."""
    return f"198.18.{i // 250}.{i % 250 + 1}"


def fleet_cluster(hosts: int, per_host: int = 2) -> dict[str, Any]:
    """The pdfleet_cluster model of a fleet of `hosts` 8-GPU pd-4p4d hosts."""
    if per_host not in SHAPES:
        raise ValueError(f"per_host must be one of {SHAPES}")
    names = [host_name(i) for i in range(hosts)]
    instances: list[dict[str, Any]] = []
    for h, host in enumerate(names):
        if per_host == 2:
            instances.append({"name": f"prefill{h}", "role": "prefill", "host": host, "gpus": [0, 1, 2, 3], "tp": 4,
                              "port": 30000, "nccl_port": 30100, "bootstrap_port": 8998})
            instances.append({"name": f"decode{h}", "role": "decode", "host": host, "gpus": [4, 5, 6, 7], "tp": 4,
                              "port": 30001, "nccl_port": 30101})
            continue
        for g in range(4):
            instances.append({"name": f"prefill{h}-{g}", "role": "prefill", "host": host, "gpus": [g], "tp": 1,
                              "port": 30000 + g, "nccl_port": 30100 + g, "bootstrap_port": 8990 + g})
            instances.append({"name": f"decode{h}-{g}", "role": "decode", "host": host, "gpus": [4 + g], "tp": 1,
                              "port": 30010 + g, "nccl_port": 30110 + g})
    return {
        "profile": "pd-4p4d",
        "hosts": {name: {"gpu_count": 8} for name in names},
        "instances": instances,
        "router": {"host": names[0], "port": 8000},
        "model": {"name": "deepseek-ai/DeepSeek-V4-Flash", "path": "/srv/models/DeepSeek-V4-Flash",
                  "revision": REVISION, "server_args": ["--trust-remote-code"]},
        "sglang": {"version": "0.5.15.post1", "patch": "nixl-abort-v2"},
        "nixl": {"ucx_tls": "cuda_ipc,cuda_copy,rc,tcp", "ucx_net_devices": "mlx5_0:1"},
    }


def write_fleet_inventory(root: Path, hosts: int, per_host: int = 2) -> Path:
    """Write an inventory directory of `hosts` hosts under `root`; returns `root`."""
    (root / "group_vars" / "all").mkdir(parents=True, exist_ok=True)
    inventory = {"all": {"children": {"pdfleet_hosts": {"hosts": {
        host_name(i): {"ansible_host": host_address(i)} for i in range(hosts)}}}}}
    (root / "hosts.yml").write_text(yaml.safe_dump(inventory, sort_keys=False), encoding="utf-8")
    (root / "group_vars" / "all" / "cluster.yml").write_text(
        yaml.safe_dump({"pdfleet_cluster": fleet_cluster(hosts, per_host)}, sort_keys=False), encoding="utf-8")
    return root
