"""Ansible filter `pdfleet_plan`: the pdfleet planner, so Ansible never recomputes the GPU split itself.

    pdfleet_plan: "{{ pdfleet_cluster | pdfleet_plan(hostvars, groups['all']) }}"
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ansible.errors import AnsibleFilterError

try:
    from pdfleet.cluster import supported_patches
    from pdfleet.errors import PlanError
    from pdfleet.paths import REPO_ROOT, TEMPLATE_DIR
    from pdfleet.planner import build_plan
    from pdfleet.render import unit_context
    from pdfleet.versions import OVERLAY_REQUIREMENTS  # light: never the heavy pdfleet.runtime
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
    out = plan.to_dict()
    # What each host's templates see, so the role renders exactly what `pdfleet render` previews.
    out["contexts"] = {
        host: [{k: v for k, v in unit_context(u, plan).items() if k != "ansible_managed"} for u in units]
        for host, units in plan.hosts.items()
    }
    out["paths"] = {"repo": str(REPO_ROOT), "templates": str(TEMPLATE_DIR),
                    "package": str(REPO_ROOT / "scripts" / "pdfleet")}
    # The version-specific requirements the simulated hosts install on top of their CPU runtime.
    out["sim_packages"] = list(OVERLAY_REQUIREMENTS.get(plan.sglang["version"], ()))
    return out


class FilterModule:
    def filters(self) -> dict:
        return {"pdfleet_plan": pdfleet_plan}
