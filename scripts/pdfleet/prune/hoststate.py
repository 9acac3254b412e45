"""Read which ``pdfleet-*`` units a host has installed: over SSH, or from the units role's slurp results."""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from pdfleet.prune.units import UNIT_DIR, UNIT_GLOB, InstalledUnit, parse_unit

if TYPE_CHECKING:
    from pdfleet.inventory import Inventory

_SCAN_SEPARATOR = "@@pdfleet-unit"
# One SSH round trip: every pdfleet-*.service file of the unit directory, each after a separator line
# that carries its path and `systemctl is-active` state. Read-only.
SCAN_COMMAND = (
    f"for f in {UNIT_DIR}/{UNIT_GLOB}; do [ -e \"$f\" ] || continue; "
    f"echo \"{_SCAN_SEPARATOR} $f $(systemctl is-active \"${{f##*/}}\" 2>/dev/null)\"; cat \"$f\"; echo; done"
)


def parse_scan(stdout: str) -> list[InstalledUnit]:
    """Units from the output of :data:`SCAN_COMMAND`."""
    out: list[InstalledUnit] = []
    path, active = "", ""
    lines: list[str] = []
    for line in [*stdout.splitlines(), f"{_SCAN_SEPARATOR} "]:
        if line.startswith(_SCAN_SEPARATOR + " "):
            if path:
                out.append(parse_unit(path, "\n".join(lines), active))
            words = line.split()
            path, active, lines = (words[1] if len(words) > 1 else ""), (words[2] if len(words) > 2 else ""), []
        else:
            lines.append(line)
    return out


def read_units(inventory: Inventory, host: str) -> list[InstalledUnit]:
    """One host's installed units, read over SSH with :data:`SCAN_COMMAND` (RemoteError when it cannot be
    reached)."""
    from pdfleet.remote import RemoteError, connection_for, run

    rc, stdout, stderr = run(connection_for(inventory, host), SCAN_COMMAND)
    if rc != 0:
        raise RemoteError(f"host {host}: listing {UNIT_DIR}/{UNIT_GLOB} failed (rc {rc}): {stderr.strip()[:200]}")
    return parse_scan(stdout)


def units_from_slurp(slurped: Iterable[Mapping[str, object]]) -> list[InstalledUnit]:
    """The units role's view: ``ansible.builtin.slurp`` results (base64 ``content``, ``source``) of its files;
    skipped results and those without content are left out."""
    units: list[InstalledUnit] = []
    for result in slurped:
        if result.get("skipped") or "content" not in result:
            continue
        text = base64.b64decode(str(result["content"])).decode("utf-8", errors="replace")
        units.append(parse_unit(str(result.get("source", "")), text))
    return units
