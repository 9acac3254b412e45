"""Ansible filter `pdfleet_units_prune`: which of a host's unplanned pdfleet-* units the units role removes.

    __pdfleet_units_removals: >-
      {{ slurped.results | pdfleet_units_prune(inventory_hostname, planned_unit_names) }}

The decision (pdfleet's marker or not, which environment file is the unit's own) is pdfleet.prune's
(pdfleet.prune.hoststate.units_from_slurp reads the files, pdfleet.prune.decide.removals sorts them), the same
code `pdfleet plan --removals` and conformance use. Units pdfleet did not create come back under `foreign` and
are reported as warnings naming the host and the file; they are never removed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ansible.errors import AnsibleFilterError
from ansible.utils.display import Display

try:
    from pdfleet.prune.decide import removals
    from pdfleet.prune.hoststate import units_from_slurp
except ImportError as exc:  # pragma: no cover - depends on how ansible-playbook was started
    _IMPORT_ERROR: ImportError | None = exc
else:
    _IMPORT_ERROR = None


def pdfleet_units_prune(slurped: Iterable[Mapping[str, object]], host: str, planned: Iterable[str]) -> dict:
    """Stale (pdfleet's, unplanned: to remove) and foreign (left alone, warned about) units of `host`."""
    if _IMPORT_ERROR is not None:
        raise AnsibleFilterError(
            f"the pdfleet package is not importable ({_IMPORT_ERROR}); run ansible-playbook from the "
            "project's virtualenv (make site, or .venv/bin/ansible-playbook)"
        )
    found = removals(str(host), units_from_slurp(slurped), [str(p) for p in planned])
    for warning in found.warnings():
        Display().warning(warning)
    return found.to_dict()


class FilterModule:
    def filters(self) -> dict:
        return {"pdfleet_units_prune": pdfleet_units_prune}
