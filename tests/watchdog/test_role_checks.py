"""The pdfleet_watchdog role refuses restart remediation where the deployed watchdog could not restart a pair
(workers on other hosts than the router's), before it changes anything; on a one-host plan it has nothing to
refuse. Runs the role's own tasks on localhost in check mode (the refusal is its second check)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pdfleet.inventory_plan import plan_inventory
from pdfleet.paths import REPO_ROOT
from pdfleet.plandoc import plan_document
from role_inputs import check_play, plan_inputs

ROLE_DIR = REPO_ROOT / "ansible" / "roles"
WHEEL = {"path": "/nonexistent/pdfleet-0-py3-none-any.whl", "sha256": "0" * 64}


def test_restart_on_a_router_host_without_the_workers_is_refused(tmp_path: Path) -> None:
    plan = plan_document(plan_inventory(REPO_ROOT / "inventory" / "sim-fleet"))  # what the preflight hands it
    proc = check_play(tmp_path, "    - ansible.builtin.include_role:\n        name: pdfleet.cluster.pdfleet_watchdog\n",
                 {"pdfleet_watchdog_plan": plan, "pdfleet_watchdog_local_host": "router1",
                  "pdfleet_watchdog_wheel": WHEEL, "pdfleet_watchdog_remediation": "restart",
                  **plan_inputs("pdfleet_watchdog")})
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0, out[-3000:]
    assert "router1: pdfleet_watchdog_remediation=restart, but the pairs on node1, node2, node3 run on other" in out
    assert "changed=0" in out and "Install the Debian packages" not in out, out[-3000:]


@pytest.mark.parametrize(("fact", "value"), [("lease_dir", None), ("watchdog_state_dir", None),
                                            ("watchdog_state_dir", "/var/lib/a/b"), ("watchdog_state_dir", "")])
def test_a_plan_without_a_state_directory_is_refused_first(tmp_path: Path, fact: str, value: str | None) -> None:
    """A plan document without role_facts.lease_dir or role_facts.watchdog_state_dir (an older preflight's, or one
    hand-made), or with one not directly under /var/lib: refused before anything changes, naming how to get the
    plan."""
    plan = plan_document(plan_inventory(REPO_ROOT / "inventory" / "sim"))
    if value is None:
        del plan["role_facts"][fact]
    else:
        plan["role_facts"][fact] = value
    proc = check_play(tmp_path, "    - ansible.builtin.include_role:\n        name: pdfleet.cluster.pdfleet_watchdog\n",
                 {"pdfleet_watchdog_plan": plan, "pdfleet_watchdog_local_host": "node1",
                  "pdfleet_watchdog_wheel": WHEEL, **plan_inputs("pdfleet_watchdog")})
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0 and "localhost: pdfleet_watchdog needs the plan" in out, out[-3000:]
    assert f"role_facts.{fact}" in out and "`pdfleet plan --json`" in out and "changed=0" in out, out[-3000:]


def test_a_one_host_plan_has_no_remote_pairs(tmp_path: Path) -> None:
    for inventory, host, expected in (("sim", "node1", []), ("sim-fleet", "node2", ["node1", "node3"])):
        plan = plan_document(plan_inventory(REPO_ROOT / "inventory" / inventory))
        body = (f"    - ansible.builtin.include_vars: {ROLE_DIR / 'pdfleet_watchdog' / 'vars' / 'main.yml'}\n"
                "    - ansible.builtin.debug:\n"
                "        msg: \"REMOTE={{ __pdfleet_watchdog_remote_pairs | to_json }}\"\n")
        proc = check_play(tmp_path, body, {"pdfleet_watchdog_plan": plan, "pdfleet_watchdog_local_host": host})
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        assert f"REMOTE={json.dumps(expected)}" in proc.stdout, proc.stdout[-2000:]
