"""Ansible filter `pdfleet_plan`: the pdfleet planner, so Ansible never recomputes the GPU split itself.

    pdfleet_plan: "{{ pdfleet_cluster | pdfleet_plan(hostvars, groups['all']) }}"

It returns the plan document of `pdfleet.plandoc` (the same document `pdfleet plan --json` prints).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ansible.errors import AnsibleFilterError

try:
    from pdfleet.errors import PlanError
    from pdfleet.inventory_plan import supported_patches
    from pdfleet.plandoc import control_paths, plan_document
    from pdfleet.planner import build_plan
except ImportError as exc:  # pragma: no cover - depends on how ansible-playbook was started
    _IMPORT_ERROR: ImportError | None = exc
else:
    _IMPORT_ERROR = None


def pdfleet_plan(cluster: object, hostvars: Mapping[str, Mapping[str, object]], hosts: Iterable[str]) -> dict:
    """Plan `cluster` (the pdfleet_cluster variable) for the inventory's hosts; fail with every problem."""
    if _IMPORT_ERROR is not None:
        raise AnsibleFilterError(
            f"the pdfleet package is not importable ({_IMPORT_ERROR}); run ansible-playbook from the "
            "project's virtualenv (make site, or .venv/bin/ansible-playbook)"
        )
    addresses = {str(h): str(hostvars[h].get("ansible_host", h)) for h in hosts}
    try:
        plan = build_plan(cluster, addresses, supported_patches(), source="pdfleet_cluster")
    except PlanError as exc:
        raise AnsibleFilterError(f"preflight failed: {exc}") from None
    return plan_document(plan)


def pdfleet_control_paths(plan: Mapping[str, object]) -> dict:
    """Where the files the plan's plays use are on this control machine (pdfleet.plandoc.control_paths)."""
    if _IMPORT_ERROR is not None:
        raise AnsibleFilterError(f"the pdfleet package is not importable ({_IMPORT_ERROR})")
    return control_paths(dict(plan))


class FilterModule:
    def filters(self) -> dict:
        return {"pdfleet_plan": pdfleet_plan, "pdfleet_control_paths": pdfleet_control_paths}
