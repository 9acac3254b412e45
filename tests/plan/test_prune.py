"""What a converge removes (pdfleet.prune: units, decide, hoststate): the marker in every rendered unit, stale vs
foreign units, the filter the units role uses, the SSH scan's parser, conformance's check and `pdfleet plan
--removals`."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pdfleet.inventory_plan import plan_inventory
from pdfleet.paths import REPO_ROOT
from pdfleet.prune.decide import active_unplanned, removals
from pdfleet.prune.hoststate import SCAN_COMMAND, parse_scan
from pdfleet.prune.units import UNIT_DIR, UNIT_GLOB, InstalledUnit, parse_unit
from pdfleet.render import environment, render_plan
from pdfleet.versions import LEASE_DIR, WATCHDOG_STATE_DIR
from plan_support import EXAMPLES, PROFILES
from role_inputs import plan_inputs

sys.path.insert(0, str(REPO_ROOT / "ansible" / "plugins" / "filter"))
from pdfleet_units_prune import pdfleet_units_prune  # the role's filter, as Ansible loads it

UNITS = "/etc/systemd/system"
FOREIGN = "[Unit]\nDescription=hand made\n[Service]\nExecStart=/bin/sleep infinity\n"


def _rendered(profile: str, tmp_path: Path) -> dict[str, str]:
    """unit name -> text of every unit the profile renders, from every host."""
    render_plan(plan_inventory(EXAMPLES / profile), tmp_path)
    return {p.stem: p.read_text() for p in tmp_path.rglob("*.service")}


@pytest.mark.parametrize("profile", PROFILES)
def test_every_rendered_unit_carries_the_marker(profile: str, tmp_path: Path) -> None:
    plan = plan_inventory(EXAMPLES / profile)
    texts = _rendered(profile, tmp_path)
    for unit in plan.units():
        found = parse_unit(f"{UNITS}/{unit.name}.service", texts[unit.name])
        assert found.marked and found.kind == unit.kind and found.role == unit.role and found.url == unit.url
        assert found.env_files == (f"{plan.service['config_dir']}/{unit.name}.env",)  # never secrets.env


def test_stale_and_foreign_are_told_apart(tmp_path: Path) -> None:
    texts = _rendered("pd-4p4d", tmp_path)
    installed = [parse_unit(f"{UNITS}/{name}.service", text) for name, text in texts.items()]
    installed += [parse_unit(f"{UNITS}/pdfleet-handmade.service", FOREIGN),
                  parse_unit(f"{UNITS}/handmade-echo.service", FOREIGN)]
    # decode0 renamed: the plan names prefill0, decodeA and the router
    r = removals("gpu01", installed, ["pdfleet-prefill0", "pdfleet-decodeA", "pdfleet-router"])
    assert [u.name for u in r.stale] == ["pdfleet-decode0"]
    assert r.stale[0].url == "http://192.0.2.10:30001" and r.stale[0].env_files == ("/etc/pdfleet/pdfleet-decode0.env",)
    assert [u.name for u in r.foreign] == ["pdfleet-handmade"]  # handmade-echo is outside the convention
    assert r.warnings() == [f"gpu01: {UNITS}/pdfleet-handmade.service is named like a pdfleet unit but pdfleet did "
                            "not create it (no X-Pdfleet-Kind line); left alone. Rename it outside the pdfleet-* "
                            "convention, or remove it by hand."]
    # a host the plan no longer uses at all: everything of pdfleet's goes, the router last
    gone = removals("gpu01", installed, [])
    assert [u.name for u in gone.stale] == ["pdfleet-decode0", "pdfleet-prefill0", "pdfleet-router"]
    assert removals("gpu01", installed, texts).stale == ()


def test_the_roles_filter_reads_slurp_results(tmp_path: Path) -> None:
    texts = _rendered("mono-tp8", tmp_path)
    slurped = [{"content": base64.b64encode(t.encode()).decode(), "source": f"{UNITS}/{n}.service",
                "encoding": "base64"} for n, t in texts.items()]
    slurped.append({"content": base64.b64encode(FOREIGN.encode()).decode(),
                    "source": f"{UNITS}/pdfleet-handmade.service"})
    slurped.append({"skipped": True})
    out = pdfleet_units_prune(slurped, "gpu01", ["pdfleet-router"])
    assert [u["name"] for u in out["stale"]] == ["pdfleet-mono0"]
    assert out["stale"][0]["env_files"] == ["/etc/pdfleet/pdfleet-mono0.env"]
    assert [u["name"] for u in out["foreign"]] == ["pdfleet-handmade"]
    assert json.loads(json.dumps(out)) == out  # plain data for Ansible


def test_the_roles_find_pattern_is_the_convention() -> None:
    role_vars = yaml.safe_load((REPO_ROOT / "ansible/roles/pdfleet_units/vars/main.yml").read_text())
    assert role_vars["__pdfleet_units_unit_dir"] == UNIT_DIR
    assert role_vars["__pdfleet_units_unit_glob"] == UNIT_GLOB
    settings = role_vars["__pdfleet_units_probe_settings"]
    assert "'unit_dir': __pdfleet_units_unit_dir" in settings and "'unit_glob': __pdfleet_units_unit_glob" in settings


def test_scan_command_output_is_parsed(tmp_path: Path) -> None:
    unit_dir = tmp_path / "units"
    unit_dir.mkdir()
    texts = _rendered("pd-4p4d", tmp_path / "out")
    (unit_dir / "pdfleet-decode0.service").write_text(texts["pdfleet-decode0"])
    (unit_dir / "pdfleet-handmade.service").write_text(FOREIGN)
    (unit_dir / "other.service").write_text(FOREIGN)
    cmd = SCAN_COMMAND.replace(UNIT_DIR, str(unit_dir))
    out = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, check=True).stdout
    found = {u.name: u for u in parse_scan(out)}
    assert sorted(found) == ["pdfleet-decode0", "pdfleet-handmade"]
    assert found["pdfleet-decode0"].marked and found["pdfleet-decode0"].role == "decode"
    assert not found["pdfleet-handmade"].marked
    assert parse_scan("") == []


def test_conformance_names_running_unplanned_units() -> None:
    marked = InstalledUnit("pdfleet-decode0", f"{UNITS}/pdfleet-decode0.service", True, "worker")
    foreign = InstalledUnit("pdfleet-handmade", f"{UNITS}/pdfleet-handmade.service", False)
    active = ["pdfleet-prefill0.service", "pdfleet-decode0.service", "pdfleet-handmade.service", "sshd.service"]
    problems = active_unplanned("node1", active, [marked, foreign], ["pdfleet-prefill0", "pdfleet-router"])
    assert problems == [
        "node1: pdfleet-decode0.service is running but the plan does not name it for this host (pdfleet created "
        "it: run site.yml to drain and remove it)",
        "node1: pdfleet-handmade.service is running but the plan does not name it for this host (pdfleet did not "
        "create it: stop it, or rename it outside the pdfleet-* convention)"]
    assert active_unplanned("node1", ["pdfleet-prefill0.service"], [], ["pdfleet-prefill0"]) == []


def test_plan_removals_names_an_unreachable_host(tmp_path: Path) -> None:
    inventory = tmp_path / "inv"
    shutil.copytree(EXAMPLES / "pd-4p4d", inventory)
    hosts = yaml.safe_load((inventory / "hosts.yml").read_text())
    hosts["all"]["children"]["pdfleet_hosts"]["hosts"]["gpu01"] = {"ansible_host": "127.0.0.1", "ansible_port": 1}
    (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts))
    proc = subprocess.run([str(Path(sys.executable).parent / "pdfleet"), "plan", "-i", str(inventory), "--removals"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("pdfleet: host gpu01 (127.0.0.1:1):") and "Traceback" not in proc.stderr


def _watchdog_unit(plan_doc: dict, host: str) -> str:
    """The watchdog role's unit for `host`, rendered from its template with the role's defaults and vars."""
    role = REPO_ROOT / "ansible" / "roles" / "pdfleet_watchdog"
    env = environment(role / "templates")
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text())
    routers = [u["name"] for u in plan_doc["hosts"][host] if u["kind"] == "router"]
    role_vars = yaml.safe_load((role / "vars" / "main.yml").read_text())
    assert {"__pdfleet_watchdog_router_units", "__pdfleet_watchdog_router_unit"} <= set(role_vars)
    ctx = dict(defaults, **plan_inputs("pdfleet_watchdog"), pdfleet_watchdog_plan=plan_doc,
               pdfleet_watchdog_local_host=host, ansible_managed="x",
               __pdfleet_watchdog_router_units=routers, __pdfleet_watchdog_router_unit=routers[0],
               __pdfleet_watchdog_lease_dir=str(LEASE_DIR), __pdfleet_watchdog_lease_state_dir=LEASE_DIR.name,
               __pdfleet_watchdog_state_dir=str(WATCHDOG_STATE_DIR),
               __pdfleet_watchdog_state_dir_name=WATCHDOG_STATE_DIR.name)
    return env.get_template("pdfleet-watchdog.service.j2").render(ctx)


def test_the_watchdog_is_planned_beside_the_router(tmp_path: Path) -> None:
    """site.yml's watchdog unit is pdfleet's: kept (and not reported) where the router is planned, removed where
    the router no longer is; conformance does not flag it beside the router."""
    plan = plan_inventory(EXAMPLES / "pd-4p4d")
    plan_doc = json.loads(json.dumps(plan.to_dict()))
    host = next(h for h, units in plan_doc["hosts"].items() if any(u["kind"] == "router" for u in units))
    watchdog = parse_unit(f"{UNITS}/pdfleet-watchdog.service", _watchdog_unit(plan_doc, host), "active")
    assert watchdog.marked and watchdog.kind == "watchdog" and watchdog.beside == "pdfleet-router"
    assert watchdog.env_files == ()
    texts = _rendered("pd-4p4d", tmp_path)
    installed = [parse_unit(f"{UNITS}/{n}.service", t) for n, t in texts.items()] + [watchdog]
    planned = [u["name"] for u in plan_doc["hosts"][host]]
    here = removals(host, installed, planned)
    assert here.stale == () and here.foreign == () and here.warnings() == []
    assert active_unplanned(host, ["pdfleet-watchdog.service", *planned], installed, planned) == []
    # the router moved to another host: the watchdog goes with it, before the router (it is not a worker)
    moved = removals(host, installed, [n for n in planned if n != "pdfleet-router"])
    assert [u.name for u in moved.stale] == ["pdfleet-watchdog", "pdfleet-router"]
    assert active_unplanned(host, ["pdfleet-watchdog.service"], installed, []) == [
        f"{host}: pdfleet-watchdog.service is running but the plan does not name it for this host (pdfleet created "
        "it: run site.yml to drain and remove it)"]
