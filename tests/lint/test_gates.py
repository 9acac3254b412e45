"""The include gates of a no-op converge: a role includes its put-back tasks only when its probe found something
different. A gate that missed one of its tasks' conditions would leave that drift in place, so each gated file's
tasks must each run on one entry of the role's "differs" dict, and the gate must cover exactly those entries."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml
from pdfleet.paths import REPO_ROOT

ROLES = REPO_ROOT / "ansible" / "roles"

# role, gated task file, the differs variable, the include's gate in tasks/main.yml (None: every entry)
GATES = [
    ("pdfleet_watchdog", "apply.yml", "__pdfleet_watchdog_differs", None),
    ("pdfleet_monitoring", "apply.yml", "__pdfleet_monitoring_differs", None),
    ("pdfleet_firewall", "apply.yml", "__pdfleet_firewall_differs", None),
    ("nixl", "apply.yml", "__nixl_differs", None),
    ("cuda_toolkit", "apply.yml", "__cuda_toolkit_differs", None),
    ("sglang", "apply.yml", "__sglang_differs", None),
    ("model", "apply.yml", "__model_differs", None),
    ("nvidia_driver", "repository.yml", "__nvidia_driver_differs",
     ["prerequisites", "keyring_dir", "key", "source", "pin"]),
    ("nvidia_driver", "install.yml", "__nvidia_driver_differs",
     ["blacklist_dir", "blacklist", "headers", "driver", "hold"]),
]
# Tasks of a gated file that may run without an entry of their own: checks, and steps that follow a change made
# by an earlier task of the same file (they run only when that task ran).
FOLLOW_UPS = {
    "Check that the CUDA repository's signing key could be downloaded",  # runs when "key" differs (error set)
    "Refresh the package lists when the repository changed",  # flush_handlers
    "Probe the host again after the install",  # after an install task changed something
    "Ask nvcc for its version after the install",  # after the toolkit's install changed something
    "Find the new virtualenv's site-packages",  # after the venv was created (no site-packages in the probe)
}


def _differs_keys(role: str, var: str) -> set[str]:
    """The entries of the role's differs dict: its probe's DIFFERS (files/probe.py computes them; vars/main.yml
    only reads the probe's answer into the variable)."""
    assert yaml.safe_load((ROLES / role / "vars" / "main.yml").read_text()).get(var) == (
        f"{{{{ __{role}_probe_run.probe.differs }}}}"), f"{role}/vars/main.yml: {var} is not the probe's differs"
    return set(probe_differs(role))


def probe_differs(role: str) -> tuple[str, ...]:
    """The module-level tuple DIFFERS of the role's files/probe.py, read without running it."""
    tree = ast.parse((ROLES / role / "files" / "probe.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == ["DIFFERS"]:
            value = ast.literal_eval(node.value)
            assert isinstance(value, tuple) and value, f"{role}/files/probe.py: DIFFERS is not a tuple of names"
            return value
    raise AssertionError(f"{role}/files/probe.py has no module-level DIFFERS tuple")


# Where a role includes its gated files: main.yml, or the file main.yml itself includes behind one gate.
INCLUDERS = ("main.yml", "converge.yml")


def _main_gate(role: str, file: str) -> str:
    for includer in INCLUDERS:
        path = ROLES / role / "tasks" / includer
        for task in yaml.safe_load(path.read_text()) if path.is_file() else []:
            if task.get("ansible.builtin.include_tasks") == file:
                when = task.get("when")
                return " ".join(when) if isinstance(when, list) else str(when)
    raise AssertionError(f"{role}/tasks/main.yml does not include {file}")


# Roles whose main.yml stops after the probe on a converged host: one gate (main.yml -> converge.yml) on a list of
# what the probe found, which must hold every entry of the differs dict and every check's failure.
CONVERGE_GATES = {
    "nvidia_driver": ("__nvidia_driver_problems | length > 0", "__nvidia_driver_reboot_reasons | length > 0",
                      "__nvidia_driver_persistenced_differs",
                      "__nvidia_driver_gpus_checked and not __nvidia_driver_gpus_as_pinned"),
    "cuda_toolkit": ("__cuda_toolkit_problems | length > 0",
                     "__cuda_toolkit_nvcc_checked and not __cuda_toolkit_nvcc_as_pinned"),
    "nixl": ("__nixl_problems | length > 0", "__nixl_gpu_peer_problems | length > 0",
             "__nixl_input_problems | length > 0"),
    "sglang": ("__sglang_input_problems | length > 0", "__sglang_patch_differs | bool"),
    "model": ("__model_input_problems | length > 0", "__model_staged"),
    "pdfleet_units": ("pdfleet_units_remove_unplanned | bool and __pdfleet_units_removals.stale | length > 0",),
}


@pytest.mark.parametrize("role", sorted(CONVERGE_GATES))
def test_the_converge_gate_opens_whenever_anything_differs_or_a_check_fails(role: str) -> None:
    gate = _main_gate(role, "converge.yml")
    assert gate == f"__{role}_converge_reasons | length > 0", gate
    converge = yaml.safe_load((ROLES / role / "vars" / "main.yml").read_text())[f"__{role}_converge_reasons"]
    for part in (f"__{role}_differs | dict2items | selectattr('value')", *CONVERGE_GATES[role]):
        assert part in converge, f"{role}: __{role}_converge_reasons lacks {part!r}"
    # every other task of converge.yml (checks, reboot, services) runs on a condition the gate reads; put-backs run
    # on the differs dict (the tests above), an import without a condition carries its own tasks' conditions
    for task in yaml.safe_load((ROLES / role / "tasks" / "converge.yml").read_text()):
        when = str(task.get("when", ""))
        if f"__{role}_differs" in when or ("ansible.builtin.import_tasks" in task and not when):
            continue
        head = when.split(" |")[0].split(" and")[0]
        assert when and any(head in part for part in CONVERGE_GATES[role]), (
            f"{role}/tasks/converge.yml: {task['name']!r} runs on {when!r}, which the gate does not read")


def test_the_gate_table_names_every_converge_file() -> None:
    assert {r.name for r in ROLES.iterdir() if (r / "tasks" / "converge.yml").is_file()} == set(CONVERGE_GATES)


@pytest.mark.parametrize(("role", "file", "var", "gate"), GATES, ids=[f"{g[0]}/{g[1]}" for g in GATES])
def test_each_gated_task_runs_on_an_entry_the_gate_covers(role: str, file: str, var: str,
                                                            gate: list[str] | None) -> None:
    keys = _differs_keys(role, var)
    used: set[str] = set()
    for task in yaml.safe_load((ROLES / role / "tasks" / file).read_text()):
        name = task["name"]
        when = task.get("when")
        text = " ".join(map(str, when)) if isinstance(when, list) else str(when or "")
        found = set(re.findall(re.escape(var) + r"\['([a-z_]+)'\]", text))
        if name in FOLLOW_UPS:
            continue
        assert len(found) == 1, f"{role}/tasks/{file}: task {name!r} must run on one entry of {var} (when: {text!r})"
        assert found <= keys, f"{role}/tasks/{file}: {name!r} uses {found - keys}, not in vars/main.yml's {var}"
        used |= found
    main_gate = _main_gate(role, file)
    if gate is None:
        assert main_gate.startswith(f"{var}.values() | select"), main_gate
        assert used == keys, f"{role}: entries no task of {file} uses: {sorted(keys - used)}"
    else:
        named = re.findall(r"'([a-z_]+)'", main_gate.split("|")[0])
        assert sorted(named) == sorted(gate) and f"map('extract', {var})" in main_gate, main_gate
        assert used == set(gate), f"{role}/tasks/{file}: the gate lists {sorted(gate)}, the tasks use {sorted(used)}"


def test_the_gate_table_names_every_gated_file() -> None:
    """A role that grows a new gated file (a "differs" dict in its vars) is listed above."""
    with_differs = {r.name for r in ROLES.iterdir()
                    if re.search(r"^DIFFERS = ", (r / "files" / "probe.py").read_text(), re.M)}
    assert with_differs - {"pdfleet_units"} == {g[0] for g in GATES}
    assert Path(ROLES / "pdfleet_units" / "tasks" / "install.yml").is_file()
