"""A scratch copy of the sim inventory on its own bridge, subnet and state directory.

Tests and benchmarks converge it with the real site.yml without touching a cluster a person started from
inventory/sim (whose hosts use 10.77.0.0/24 and /var/lib/pdfleet-sim).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml
from pdfleet.paths import DEFAULT_INVENTORY


@dataclass(frozen=True)
class ScratchInventory:
    path: Path
    state_dir: Path
    addresses: dict[str, str]


def scratch_inventory(root: Path, net: int, source: Path = DEFAULT_INVENTORY) -> ScratchInventory:
    """Copy `source` to root/inventory with hosts on 10.<net>.0.0/24 and state under root/state."""
    if not 78 <= net <= 99:
        raise ValueError(f"net {net}: use 78-99 (10.77 is the default sim cluster's subnet)")
    inventory = root / "inventory"
    shutil.copytree(source, inventory)
    hosts_file = inventory / "hosts.yml"
    hosts = yaml.safe_load(hosts_file.read_text())
    addresses = {}
    for name, hvars in hosts["all"]["children"]["pdfleet_hosts"]["hosts"].items():
        last = str(hvars["ansible_host"]).rsplit(".", 1)[1]
        hvars["ansible_host"] = addresses[name] = f"10.{net}.0.{last}"
    hosts_file.write_text(yaml.safe_dump(hosts, sort_keys=False))
    sim_file = inventory / "group_vars" / "all" / "sim.yml"
    sim = yaml.safe_load(sim_file.read_text())
    state_dir = root / "state"
    # the control machine is the new bridge's gateway: the firewall's operators and scrapers follow it
    old_gateway, gateway = str(sim["pdfleet_sim"]["gateway"]), f"10.{net}.0.1"
    cluster_file = inventory / "group_vars" / "all" / "cluster.yml"
    cluster_file.write_text(cluster_file.read_text().replace(f"{old_gateway}/32", f"{gateway}/32"))
    sim["pdfleet_sim"].update(bridge=f"pdfsc{net}", cidr=f"10.{net}.0.0/24", gateway=f"10.{net}.0.1",
                              state_dir=str(state_dir))
    sim["ansible_ssh_common_args"] = f"-F {state_dir / 'ssh_config'}"  # written out, as in inventory/sim
    sim_file.write_text(yaml.safe_dump(sim, sort_keys=False))
    return ScratchInventory(inventory, state_dir, addresses)
