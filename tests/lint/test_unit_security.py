"""The units' sandboxing, measured: `systemd-analyze security --offline` on every unit pdfleet renders (the units of
every example inventory, rendered here, and the watchdog's unit in both remediation modes) gives the exposure the
README's table states, the gateway's and the watchdog's are at most 2.0 and the workers' at most WORKER_LIMIT, the
lowest the GPU allows so far (issue 30). Deleting a hardening line from a template raises a figure: the README's no
longer matches and this fails."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml
from pdfleet.inventory_plan import plan_inventory
from pdfleet.paths import REPO_ROOT
from pdfleet.render import render_plan
from pdfleet.versions import LEASE_DIR, WATCHDOG_STATE_DIR

EXAMPLES = REPO_ROOT / "inventory" / "examples"
GOLDEN = REPO_ROOT / "tests" / "plan" / "golden"
WATCHDOG_TEMPLATE = REPO_ROOT / "ansible" / "roles" / "pdfleet_watchdog" / "templates" / "pdfleet-watchdog.service.j2"
# The workers keep the GPU's device nodes, writable-executable memory, the @debug and @resources system calls and
# /proc's system files (worker.service.j2 says why): 1.8 with all of that. Lower it when a unit gets lower.
WORKER_LIMIT = 1.8
LIMIT = {"router": 2.0, "watchdog": 2.0, "prefill": WORKER_LIMIT, "decode": WORKER_LIMIT, "mono": WORKER_LIMIT}

pytestmark = pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")


def exposure(unit: Path) -> float:
    proc = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager", str(unit)],
                          capture_output=True, text=True, timeout=60, check=False)
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d)", proc.stdout + proc.stderr)
    assert found, f"{unit}: systemd-analyze said: {proc.stdout[-500:]} {proc.stderr[-500:]}"
    return float(found.group(1))


def kind(unit: Path) -> str:
    """router, watchdog, or the worker's role (prefill, decode, mono), from the unit's name."""
    found = re.fullmatch(r"pdfleet-(router|watchdog|prefill|decode|mono)\d*\.service", unit.name)
    assert found, f"{unit}: not a unit name pdfleet renders"
    return found.group(1)


def readme_figures() -> dict[str, float]:
    text = (REPO_ROOT / "README.md").read_text()
    section = text.split("## Hardened units", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (router|prefill|decode|mono|watchdog) \([^|]*\| (\d+\.\d) \|", section, re.M)
    return {name: float(value) for name, value in rows}


def watchdog_unit(tmp_path: Path, remediation: str) -> Path:
    """The watchdog role's unit rendered as the role renders it, with its defaults and a plan's values."""
    defaults = yaml.safe_load((WATCHDOG_TEMPLATE.parents[1] / "defaults" / "main.yml").read_text())
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True)
    env.filters["comment"] = lambda text: f"#\n# {text}\n#"
    values = {**{k: v for k, v in defaults.items() if not str(v).startswith("{{")},
              "ansible_managed": "Ansible managed", "pdfleet_watchdog_remediation": remediation,
              "__pdfleet_watchdog_router_unit": "pdfleet-router", "pdfleet_watchdog_user": "pdfleet-watchdog",
              "pdfleet_watchdog_plan": {"service": {"config_dir": "/etc/pdfleet"}},
              "pdfleet_watchdog_home": "/opt/pdfleet-watchdog", "pdfleet_watchdog_config_dir": "/etc/pdfleet-watchdog",
              "pdfleet_watchdog_local_host": "gpu01", "pdfleet_watchdog_metrics_address": "192.0.2.10",
              "pdfleet_watchdog_router_python": "/opt/pdfleet/venv/bin/python",
              "__pdfleet_watchdog_lease_dir": str(LEASE_DIR), "__pdfleet_watchdog_lease_state_dir": LEASE_DIR.name,
              "__pdfleet_watchdog_state_dir": str(WATCHDOG_STATE_DIR),
              "__pdfleet_watchdog_state_dir_name": WATCHDOG_STATE_DIR.name}
    out = tmp_path / remediation / "pdfleet-watchdog.service"
    out.parent.mkdir()
    out.write_text(env.from_string(WATCHDOG_TEMPLATE.read_text()).render(**values))
    return out


def units(tmp_path: Path) -> list[Path]:
    """Every example inventory's units, rendered as `pdfleet render` renders them, and the watchdog's."""
    for inventory in sorted(p for p in EXAMPLES.iterdir() if p.is_dir()):
        render_plan(plan_inventory(inventory), tmp_path / "render" / inventory.name)
    return (sorted((tmp_path / "render").glob("*/*/*.service"))
            + [watchdog_unit(tmp_path, m) for m in ("alert", "restart")])


def test_every_unit_is_as_exposed_as_the_readme_says_and_within_its_limit(tmp_path: Path) -> None:
    figures = readme_figures()
    assert set(figures) == set(LIMIT), figures
    measured = {u: exposure(u) for u in units(tmp_path)}
    assert {kind(u) for u in measured} == set(figures)
    wrong = [f"{u.relative_to(u.parents[2])}: {value} (README: {figures[kind(u)]})"
             for u, value in measured.items() if value != figures[kind(u)]]
    assert not wrong, "README's Hardened units table is not what systemd-analyze measures: " + "; ".join(wrong)
    over = {k: figures[k] for k, limit in LIMIT.items() if figures[k] > limit}
    assert not over, f"above their limit ({LIMIT}): {over}"


def test_the_measure_sees_a_weakened_unit(tmp_path: Path) -> None:
    """The check fails on the bad case: the router's unit without its sandbox is far above 2.0."""
    router = GOLDEN / "pd-4p4d" / "gpu01" / "pdfleet-router.service"
    weak = tmp_path / "pdfleet-router.service"
    weak.write_text("\n".join(line for line in router.read_text().splitlines()
                              if not line.startswith(("Protect", "Private", "SystemCall", "Restrict", "Capability",
                                                      "NoNewPrivileges", "ProcSubset", "DevicePolicy")))
                    + "\n")
    assert exposure(weak) > LIMIT["router"] + 3


def test_the_measure_sees_a_worker_without_its_device_filter(tmp_path: Path) -> None:
    """A worker that may open every device node (no DevicePolicy=closed) is above WORKER_LIMIT."""
    decode = GOLDEN / "pd-4p4d" / "gpu01" / "pdfleet-decode0.service"
    weak = tmp_path / "pdfleet-decode0.service"
    weak.write_text("\n".join(line for line in decode.read_text().splitlines()
                              if not line.startswith(("DevicePolicy", "DeviceAllow"))) + "\n")
    assert exposure(decode) <= WORKER_LIMIT < exposure(weak)
