"""Ansible filter `pdfleet_connections`: how the play's own hosts are reached over SSH, from their hostvars (templated,
Vault already opened by ansible-playbook), for modules that run on the controller and SSH to hosts themselves (the
pair gate's journal scan). The same reading of Ansible's connection variables as `pdfleet.inventory` (one function:
`pdfleet.inventory.connection_from_vars`), without loading the inventory again (which would need the Vault secrets
a second time, and saw only the first -i).

    connections: "{{ pair_hosts | pdfleet.cluster.pdfleet_connections(hostvars) }}"

Output: {host: {name, address, port, user, key_file, ssh_args}}.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

try:
    from pdfleet.inventory import connection_from_vars
except ImportError as exc:  # pragma: no cover - depends on how ansible-playbook was started
    _IMPORT_ERROR: ImportError | None = exc
else:
    _IMPORT_ERROR = None


def pdfleet_connections(hosts: Iterable[object], hostvars: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    if _IMPORT_ERROR is not None:
        raise AnsibleFilterError(
            f"the pdfleet package is not importable ({_IMPORT_ERROR}); run ansible-playbook from the "
            "project's virtualenv (make site, or .venv/bin/ansible-playbook)")
    out: dict[str, dict[str, Any]] = {}
    for host in map(str, hosts):
        if host not in hostvars:
            raise AnsibleFilterError(f"pdfleet_connections: host {host} is not in the inventory")
        hv = hostvars[host]
        try:
            conn = connection_from_vars(host, str(hv.get("ansible_host") or host), hv.get)
        except ValueError as e:
            raise AnsibleFilterError(str(e)) from None
        out[host] = {**dataclasses.asdict(conn), "ssh_args": list(conn.ssh_args)}
    return out


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"pdfleet_connections": pdfleet_connections}
