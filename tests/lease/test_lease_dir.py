"""The pair leases' directory is decided once (constants.yml's lease_dir, pdfleet.versions.LEASE_DIR) and every
reader takes it from there: the plan document hands it to the watchdog role (its unit's StateDirectory and
--lease-dir), the rollout's lease filter fills it into each request, the ops and watchdog clients default to it,
and the store itself (which runs alone on the router host) refuses a request that does not name it."""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
from pathlib import Path

import yaml
from pdfleet.inventory_plan import plan_inventory
from pdfleet.lease_client import LocalLeases, RemoteLeases
from pdfleet.paths import REPO_ROOT
from pdfleet.plandoc import plan_document
from pdfleet.versions import CONSTANTS, LEASE_DIR
from pdfleet.watchdog.cli import register

ROLE = REPO_ROOT / "ansible" / "roles" / "pdfleet_watchdog"


def test_the_constant_reaches_the_plan_document_and_the_watchdog_role() -> None:
    assert str(LEASE_DIR) == CONSTANTS["lease_dir"] and LEASE_DIR.parent == Path("/var/lib")
    doc = plan_document(plan_inventory(REPO_ROOT / "inventory" / "sim-fleet"))
    assert doc["role_facts"]["lease_dir"] == str(LEASE_DIR) and doc["gateway_host"] == "router1"
    role_vars = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    assert role_vars["__pdfleet_watchdog_lease_dir"] == "{{ pdfleet_watchdog_plan.role_facts.lease_dir }}"
    assert role_vars["__pdfleet_watchdog_plan_doc"]["gateway_host"] == "{{ pdfleet_watchdog_plan.gateway_host }}"
    unit = (ROLE / "templates" / "pdfleet-watchdog.service.j2").read_text()
    assert "StateDirectory={{ __pdfleet_watchdog_state_dir_name }} {{ __pdfleet_watchdog_lease_state_dir }}" in unit
    assert "--lease-dir {{ __pdfleet_watchdog_lease_dir }}" in unit


def test_the_filter_and_the_clients_default_to_it() -> None:
    spec = importlib.util.spec_from_file_location(
        "pdfleet_lease_filter", REPO_ROOT / "ansible" / "plugins" / "filter" / "pdfleet_lease.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    argv = module.pdfleet_lease_argv({"op": "list"})
    assert json.loads(argv[-1])["dir"] == str(LEASE_DIR)
    assert LocalLeases("watchdog").directory == LEASE_DIR
    assert RemoteLeases(lambda h, c: (0, "", ""), "router1", "ops").directory == LEASE_DIR
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    assert parser.parse_args(["watchdog", "run", "--plan", "p.json"]).lease_dir == LEASE_DIR


def test_no_code_names_the_directory_but_the_constants_file() -> None:
    name = LEASE_DIR.name
    found = [str(p.relative_to(REPO_ROOT)) for root in ("scripts", "ansible", "templates", "inventory")
             for p in (REPO_ROOT / root).rglob("*") if p.is_file() and p.suffix in (".py", ".j2", ".yml", ".yaml")
             and p.name != "constants.yml" and "argument_specs" not in p.name and re.search(name, p.read_text())]
    assert found == [], f"{found}: say {name} once, in scripts/pdfleet/constants.yml (pdfleet.versions.LEASE_DIR)"
