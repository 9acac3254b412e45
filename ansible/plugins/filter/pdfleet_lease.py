"""Ansible filter `pdfleet_lease_argv`: the command (argv) that runs one pair-lease request (``pdfleet.lease``) on
the router host, carrying the module's own source, so the host needs only its system python3. The rollout takes
and releases its pairs' leases with it (ansible.builtin.command, delegated to the router host, become):

    argv: "{{ {'op': 'acquire', 'pair': 'node2', 'kind': 'rollout', 'purpose': 'rollout', 'ttl_s': 7200}
              | pdfleet.cluster.pdfleet_lease_argv }}"

A request without ``who`` gets this controller's user@machine and pid, one without ``dir`` the store's directory
(pdfleet.versions.LEASE_DIR, from the package's constants.yml: the same the watchdog unit's StateDirectory gets
through the plan document), and one without ``owner_dir`` the watchdog's state directory (WATCHDOG_STATE_DIR, whose
owner a store created by root gets). The command prints one JSON answer and
exits 0 (done), 1 (held by another actor: ``message`` names the holder and the fix) or 2 (the store cannot be used).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

try:
    from pdfleet.lease import remote_argv, who_am_i
    from pdfleet.versions import LEASE_DIR, WATCHDOG_STATE_DIR
except ImportError as exc:  # pragma: no cover - depends on how ansible-playbook was started
    _IMPORT_ERROR: ImportError | None = exc
else:
    _IMPORT_ERROR = None


def pdfleet_lease_argv(request: Mapping[str, Any], python: str = "python3") -> list[str]:
    if _IMPORT_ERROR is not None:
        raise AnsibleFilterError(
            f"the pdfleet package is not importable ({_IMPORT_ERROR}); run ansible-playbook from the "
            "project's virtualenv (make site, or .venv/bin/ansible-playbook)")
    if not isinstance(request, Mapping) or not request.get("op"):
        raise AnsibleFilterError(f"pdfleet_lease_argv: a lease request needs an op, got {request!r}")
    doc = {str(k): v for k, v in request.items()}
    doc.setdefault("who", who_am_i())
    doc.setdefault("dir", str(LEASE_DIR))
    doc.setdefault("owner_dir", str(WATCHDOG_STATE_DIR))
    return remote_argv(doc, python)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"pdfleet_lease_argv": pdfleet_lease_argv}
