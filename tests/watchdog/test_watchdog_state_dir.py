"""The watchdog's state directory is decided once (constants.yml's watchdog_state_dir,
pdfleet.versions.WATCHDOG_STATE_DIR) and every reader takes it from there: the plan document hands it to the
watchdog role (its unit's first StateDirectory, WorkingDirectory and --state-file, its user's home), the watchdog's
CLI and `pdfleet ops status` read the state file in it, and the lease store (which runs alone on the router host)
gives a store root creates the owner of the directory its caller names: the clients and the rollout's filter name
this one. The role refusing a plan document without it: tests/watchdog/test_role_checks.py."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from pdfleet import lease
from pdfleet.inventory_plan import plan_inventory
from pdfleet.lease_client import LocalLeases, RemoteLeases
from pdfleet.ops import tasks
from pdfleet.paths import REPO_ROOT
from pdfleet.plandoc import plan_document
from pdfleet.versions import CONSTANTS, LEASE_DIR, WATCHDOG_STATE_DIR
from pdfleet.watchdog.cli import register
from role_inputs import plan_inputs

ROLE = REPO_ROOT / "ansible" / "roles" / "pdfleet_watchdog"
STATE_FILE = WATCHDOG_STATE_DIR / "state.json"
BIN = Path(sys.executable).parent


def test_the_constant_reaches_the_plan_document_and_the_watchdog_role() -> None:
    assert str(WATCHDOG_STATE_DIR) == CONSTANTS["watchdog_state_dir"]
    assert WATCHDOG_STATE_DIR.parent == Path("/var/lib") and WATCHDOG_STATE_DIR != LEASE_DIR
    doc = plan_document(plan_inventory(REPO_ROOT / "inventory" / "sim-fleet"))
    assert doc["role_facts"]["watchdog_state_dir"] == str(WATCHDOG_STATE_DIR)
    role_vars = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    assert role_vars["__pdfleet_watchdog_state_dir"] == "{{ pdfleet_watchdog_plan.role_facts.watchdog_state_dir }}"
    assert role_vars["__pdfleet_watchdog_state_dir_name"] == ("{{ __pdfleet_watchdog_state_dir"
                                                              " | ansible.builtin.basename }}")
    home = "{{ __pdfleet_watchdog_state_dir }}"
    assert role_vars["__pdfleet_watchdog_probe_settings"]["want"]["user"]["home"] == home
    apply = yaml.safe_load((ROLE / "tasks" / "apply.yml").read_text())
    assert [t["ansible.builtin.user"]["home"] for t in apply if "ansible.builtin.user" in t] == [home]
    unit = (ROLE / "templates" / "pdfleet-watchdog.service.j2").read_text()
    assert "StateDirectory={{ __pdfleet_watchdog_state_dir_name }} {{ __pdfleet_watchdog_lease_state_dir }}" in unit
    assert "\nWorkingDirectory={{ __pdfleet_watchdog_state_dir }}\n" in unit
    assert " --state-file {{ __pdfleet_watchdog_state_dir }}/state.json " in unit


def test_the_role_takes_it_from_the_plan(tmp_path: Path) -> None:
    """The role's vars and unit template, rendered by Ansible from a plan whose watchdog_state_dir is another
    directory: the unit and the user's home follow the plan, not a path of their own."""
    plan = plan_document(plan_inventory(REPO_ROOT / "inventory" / "sim-fleet"))
    plan["role_facts"]["watchdog_state_dir"] = "/var/lib/elsewhere"
    book = tmp_path / "play.yml"
    book.write_text(f"""- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - ansible.builtin.include_vars: {ROLE / 'defaults' / 'main.yml'}
    - ansible.builtin.include_vars: {ROLE / 'vars' / 'main.yml'}
    - ansible.builtin.debug:
        msg: "HOME={{{{ __pdfleet_watchdog_probe_settings.want.user.home }}}}"
    - ansible.builtin.debug:
        msg: "{{{{ lookup('pdfleet.cluster.pdfleet_template', '{ROLE / 'templates' / 'pdfleet-watchdog.service.j2'}')
                .splitlines() | select('search', 'StateDirectory=|WorkingDirectory=|--state-file') }}}}"
""")
    (tmp_path / "vars.json").write_text(json.dumps({"pdfleet_watchdog_plan": plan, "pdfleet_watchdog_local_host":
                                                    "router1", **plan_inputs("pdfleet_watchdog")}))
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", str(book), "-e",
                           f"@{tmp_path / 'vars.json'}"], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=300, check=False, env={"PATH": str(BIN), "ANSIBLE_NOCOLOR": "1"})
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-2000:]
    assert "HOME=/var/lib/elsewhere" in out, out[-3000:]
    assert f"StateDirectory=elsewhere {LEASE_DIR.name}" in out and "WorkingDirectory=/var/lib/elsewhere" in out
    assert "--state-file /var/lib/elsewhere/state.json " in out and str(WATCHDOG_STATE_DIR) not in out, out[-3000:]


def _lease_filter() -> Any:
    spec = importlib.util.spec_from_file_location(
        "pdfleet_lease_filter", REPO_ROOT / "ansible" / "plugins" / "filter" / "pdfleet_lease.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_watchdog_cli_and_ops_status_read_the_state_file_there() -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    assert parser.parse_args(["watchdog", "run", "--plan", "p.json"]).state_file == STATE_FILE
    assert parser.parse_args(["watchdog", "status"]).state_file == STATE_FILE
    plan = plan_inventory(REPO_ROOT / "inventory" / "sim")
    asked: list[str] = []

    def run(host: str, command: str) -> tuple[int, str, str]:
        asked.append(command)
        return 0, "", ""

    tasks.status(plan, run, None, "never")
    assert asked and all(f"cat {STATE_FILE} 2>/dev/null || true;" in command for command in asked), asked


def test_the_lease_clients_and_the_filter_name_it_as_the_store_owner() -> None:
    assert LocalLeases("watchdog").owner_dir == WATCHDOG_STATE_DIR
    sent: list[dict[str, Any]] = []

    def run(host: str, command: str) -> tuple[int, str, str]:
        sent.append(json.loads(shlex.split(command)[-1]))
        return 0, json.dumps({"ok": True, "leases": []}), ""

    assert RemoteLeases(run, "router1", "ops").list() == []
    assert sent == [{"op": "list", "dir": str(LEASE_DIR), "owner_dir": str(WATCHDOG_STATE_DIR)}]
    argv = _lease_filter().pdfleet_lease_argv({"op": "list"})
    assert json.loads(argv[-1])["owner_dir"] == str(WATCHDOG_STATE_DIR)


def test_a_store_root_creates_gets_the_owner_of_the_directory_named(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The store knows no path of its own: the request names the watchdog's state directory, and a request that
    does not is refused."""
    owner, store = tmp_path / "watchdog-state", tmp_path / "leases"
    owner.mkdir()
    chowned: list[tuple[Path, int, int]] = []
    monkeypatch.setattr(lease.os, "geteuid", lambda: 0)
    monkeypatch.setattr(lease.os, "chown", lambda path, uid, gid: chowned.append((Path(path), uid, gid)))
    request = {"op": "acquire", "pair": "n", "kind": "ops", "purpose": "drain", "who": "a@b pid 1",
               "dir": str(store)}
    code, answer = lease.handle(request)
    assert code == 2 and "'owner_dir'" in answer["message"] and not store.exists(), answer
    code, answer = lease.handle({**request, "owner_dir": str(owner)})
    assert code == 0 and answer["ok"], answer
    ref = os.stat(owner)
    assert chowned == [(store, ref.st_uid, ref.st_gid)]


def test_no_code_names_the_directory_but_the_constants_file() -> None:
    path = re.escape(str(WATCHDOG_STATE_DIR))
    found = [str(p.relative_to(REPO_ROOT)) for root in ("scripts", "ansible", "templates", "inventory", "tests")
             for p in (REPO_ROOT / root).rglob("*") if p.is_file() and p.suffix in (".py", ".j2", ".yml", ".yaml")
             and p.name != "constants.yml" and "argument_specs" not in p.name and re.search(path, p.read_text())]
    assert found == [], (f"{found}: say {WATCHDOG_STATE_DIR} once, in scripts/pdfleet/constants.yml "
                         "(pdfleet.versions.WATCHDOG_STATE_DIR; the roles get it from the plan's role_facts)")
