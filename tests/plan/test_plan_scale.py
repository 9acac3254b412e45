"""The planner at fleet scale (issue 29): the cluster model is templated once per distinct source, not once per
host, so `pdfleet plan` stays linear in hosts; hosts that really see different models are still refused.

Behaviour only (how many times the whole model is templated, what is refused); the timings are
tests/bench/bench_plan_scale.py's.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pdfleet.errors import InventoryError
from pdfleet.inventory import load_inventory
from pdfleet.inventory_plan import plan_of

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from fleet_inventory import fleet_cluster, host_name, write_fleet_inventory

HOSTS = 12


@pytest.fixture
def whole_model_templatings(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Each time ansible-core templates the whole cluster model (a mapping with its instances), one entry."""
    from ansible.template import Templar

    calls: list[str] = []
    real = Templar.template

    def spy(self: Templar, variable: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(variable, dict) and "instances" in variable:
            calls.append(str(self.available_variables.get("inventory_hostname", "?")))
        return real(self, variable, *args, **kwargs)

    monkeypatch.setattr(Templar, "template", spy)
    yield calls


def _cluster_file(inv: Path) -> Path:
    return inv / "group_vars" / "all" / "cluster.yml"


def _edit_cluster(inv: Path, edit: Any) -> dict[str, Any]:
    doc = yaml.safe_load(_cluster_file(inv).read_text())
    edit(doc["pdfleet_cluster"])
    _cluster_file(inv).write_text(yaml.safe_dump(doc, sort_keys=False))
    return doc


def test_a_model_in_group_vars_all_is_templated_once_for_the_whole_fleet(
        tmp_path: Path, whole_model_templatings: list[str]) -> None:
    inv = write_fleet_inventory(tmp_path / "inv", HOSTS)
    plan = plan_of(load_inventory(inv))
    assert len(whole_model_templatings) == 1, whole_model_templatings
    assert sorted(plan.hosts) == [host_name(i) for i in range(HOSTS)]
    assert len(plan.units()) == 2 * HOSTS + 1  # a prefill and a decode per host, and the router


def test_a_template_in_the_model_that_every_host_resolves_alike_is_templated_once(
        tmp_path: Path, whole_model_templatings: list[str]) -> None:
    inv = write_fleet_inventory(tmp_path / "inv", HOSTS)
    _edit_cluster(inv, lambda c: c["router"].update(port="{{ fleet_router_port }}"))
    (inv / "group_vars" / "all" / "ports.yml").write_text("fleet_router_port: 8100\n")
    plan = plan_of(load_inventory(inv))
    assert len(whole_model_templatings) == 1, whole_model_templatings
    assert plan.router_url.endswith(":8100")


def test_a_template_that_one_host_resolves_differently_is_refused_naming_it(
        tmp_path: Path, whole_model_templatings: list[str]) -> None:
    """One object in group_vars/all for every host, but its template reads a host variable: host 7 would plan
    another router port, which is refused (the shared templating must not hide it)."""
    inv = write_fleet_inventory(tmp_path / "inv", HOSTS)
    _edit_cluster(inv, lambda c: c["router"].update(port="{{ fleet_router_port }}"))
    (inv / "group_vars" / "all" / "ports.yml").write_text("fleet_router_port: 8100\n")
    (inv / "host_vars").mkdir()
    (inv / "host_vars" / f"{host_name(7)}.yml").write_text("fleet_router_port: 8200\n")
    with pytest.raises(InventoryError, match=f"pdfleet_cluster differs between hosts {host_name(0)} and "
                                             f"{host_name(7)}"):
        plan_of(load_inventory(inv))
    assert len(whole_model_templatings) == 2, whole_model_templatings  # once per distinct outcome


def test_a_host_level_model_that_differs_is_refused_and_an_equal_one_is_not(tmp_path: Path) -> None:
    inv = write_fleet_inventory(tmp_path / "inv", HOSTS)
    doc = yaml.safe_load(_cluster_file(inv).read_text())
    (inv / "host_vars").mkdir()
    override = inv / "host_vars" / f"{host_name(5)}.yml"
    override.write_text(yaml.safe_dump(doc))  # the same model, written again for one host: accepted
    assert len(plan_of(load_inventory(inv)).units()) == 2 * HOSTS + 1
    doc["pdfleet_cluster"]["router"]["port"] = 8001
    override.write_text(yaml.safe_dump(doc))
    with pytest.raises(InventoryError, match=f"pdfleet_cluster differs between hosts {host_name(0)} and "
                                             f"{host_name(5)}"):
        plan_of(load_inventory(inv))


def test_a_host_without_the_model_is_refused_naming_it(tmp_path: Path) -> None:
    inv = write_fleet_inventory(tmp_path / "inv", HOSTS)
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())
    hosts["all"]["hosts"] = {"stray01": {"ansible_host": "198.19.0.1"}}
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts, sort_keys=False))
    (inv / "group_vars" / "pdfleet_hosts").mkdir()
    _cluster_file(inv).rename(inv / "group_vars" / "pdfleet_hosts" / "cluster.yml")
    with pytest.raises(InventoryError, match="pdfleet_cluster differs between hosts gpu0000 and stray01"):
        plan_of(load_inventory(inv))


def test_the_size_guard_admits_a_fleet_of_a_thousand_hosts_of_eight_instances() -> None:
    """The alias-bomb guard counts values; a real 1,000-host fleet (8 instances a host) must stay under it."""
    from pdfleet.clusterspec import MAX_VALUES, count_values

    assert count_values({"pdfleet_cluster": fleet_cluster(1000, per_host=8)}) <= MAX_VALUES
