"""Decide, from the plan and a host's installed units, which ``pdfleet-*`` units are stale and which foreign (pure)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

from pdfleet.prune.units import UNIT_PREFIX, InstalledUnit


@dataclass(frozen=True)
class HostRemovals:
    """What a converge does to one host's unplanned ``pdfleet-*`` units."""

    host: str
    stale: tuple[InstalledUnit, ...] = ()  # pdfleet's, not planned here: drained, stopped, removed
    foreign: tuple[InstalledUnit, ...] = ()  # not pdfleet's: left alone, reported
    planned: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, object]:
        def plain(u: InstalledUnit) -> dict[str, object]:
            return dict(asdict(u), env_files=list(u.env_files))

        return {"host": self.host, "planned": list(self.planned), "stale": [plain(u) for u in self.stale],
                "foreign": [plain(u) for u in self.foreign]}

    def warnings(self) -> list[str]:
        return [foreign_warning(self.host, u) for u in self.foreign]


def foreign_warning(host: str, unit: InstalledUnit) -> str:
    return (f"{host}: {unit.path} is named like a pdfleet unit but pdfleet did not create it (no X-Pdfleet-Kind "
            f"line); left alone. Rename it outside the {UNIT_PREFIX}* convention, or remove it by hand.")


def with_companions(installed: Iterable[InstalledUnit], planned: Iterable[str]) -> set[str]:
    """The planned unit names and pdfleet's units that say they belong beside one of them (X-Pdfleet-Beside)."""
    names = set(planned)
    return names | {u.name for u in installed if u.marked and u.beside and u.beside in names}


def removals(host: str, installed: Iterable[InstalledUnit], planned: Iterable[str]) -> HostRemovals:
    """Sort a host's unplanned pdfleet-* units into stale (ours) and foreign (not ours)."""
    installed = list(installed)
    names = tuple(sorted(with_companions(installed, planned)))
    unplanned = sorted((u for u in installed if u.name.startswith(UNIT_PREFIX) and u.name not in names),
                       key=lambda u: u.name)
    # Workers before the router: a stale router goes last, so it keeps serving while its workers drain.
    stale = tuple(sorted((u for u in unplanned if u.marked), key=lambda u: (u.kind == "router", u.name)))
    return HostRemovals(host, stale, tuple(u for u in unplanned if not u.marked), names)


def active_unplanned(host: str, active_names: Iterable[str], installed: Iterable[InstalledUnit],
                     planned: Iterable[str]) -> list[str]:
    """Conformance: one problem per running ``pdfleet-*`` unit the plan does not name for ``host``."""
    installed = list(installed)
    by_name = {u.name: u for u in installed}
    wanted = with_companions(installed, planned)
    out = []
    for name in sorted({n[: -len(".service")] if n.endswith(".service") else n for n in active_names}):
        if not name.startswith(UNIT_PREFIX) or name in wanted:
            continue
        unit = by_name.get(name)
        if unit is not None and unit.marked:
            fix = "pdfleet created it: run site.yml to drain and remove it"
        else:
            fix = "pdfleet did not create it: stop it, or rename it outside the pdfleet-* convention"
        out.append(f"{host}: {name}.service is running but the plan does not name it for this host ({fix})")
    return out


def removal_rows(found: Iterable[HostRemovals]) -> list[list[str]]:
    """Table rows for people: one per unit a converge removes or leaves alone."""
    rows = []
    for r in found:
        rows += [[r.host, u.name, "remove (drain, stop, delete)", u.active or "?", u.url or "-"] for u in r.stale]
        rows += [[r.host, u.name, "leave alone: not created by pdfleet", u.active or "?", "-"] for u in r.foreign]
    return rows
