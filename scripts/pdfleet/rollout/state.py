"""Installed state against the target: the sglang role's record (``<venv>/pdfleet-record.json``) of each host
and the router's worker list, compared with the plan."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pdfleet.fleet.pairs import Pair
from pdfleet.fleet.router import RouterWorker
from pdfleet.patch import manifest as patches
from pdfleet.patch.errors import PatchError
from pdfleet.patch.roleinputs import sglang_inputs


@dataclass(frozen=True)
class Installed:
    """What a host has (from its record) or should have (from the plan): version, patch, conn.py hash."""

    version: str
    patch_id: str  # the version's patch series id (the sglang role wants it even when apply_patch is false)
    patched: bool
    sha256: str

    @property
    def label(self) -> str:
        return f"{self.version}+{self.patch_id}" if self.patched else f"{self.version} (pristine)"

    def role_vars(self) -> dict[str, Any]:
        """The sglang role's inputs that install exactly this."""
        return sglang_inputs(self.version, self.patched)

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "patch_id": self.patch_id, "patched": self.patched, "sha256": self.sha256,
                "label": self.label}


def expected(version: str, patched: bool) -> Installed:
    """The state the sglang role leaves for ``version`` with or without its patch (hashes from the manifest)."""
    m = patches.load_manifest(version)
    return Installed(version, m.patch_id, patched, m.patched_sha256 if patched else m.pristine_sha256)


def target_of(plan: dict[str, Any]) -> Installed:
    sg = plan["sglang"]
    return expected(str(sg["version"]), bool(sg["apply_patch"]))


def from_record(record: dict[str, Any] | None) -> Installed | None:
    """A host's record as Installed (None when there is none or it is not one the patch series knows)."""
    if not isinstance(record, dict) or not record.get("version"):
        return None
    version = str(record["version"])
    try:
        patch_id = patches.load_manifest(version).patch_id
    except PatchError:
        patch_id = str(record.get("patch_id") or "")
    return Installed(version, patch_id, bool(record.get("patched")), str(record.get("sha256", "")))


def differences(have: Installed | None, want: Installed) -> list[str]:
    """Why a host is not at the target; empty when it is."""
    if have is None:
        return ["no record (the sglang role never completed here)"]
    out = []
    if have.version != want.version:
        out.append(f"version {have.version} -> {want.version}")
    if have.patched != want.patched:
        out.append(f"patch {'on' if have.patched else 'off'} -> {'on' if want.patched else 'off'}")
    if have.sha256 != want.sha256:
        out.append(f"conn.py sha256 {have.sha256[:12]} -> {want.sha256[:12]}")
    return out


def membership(pair: Pair, listed: list[RouterWorker]) -> str:
    """``in`` (every worker listed), ``out`` (none) or ``partial``."""
    urls = {w.spec.url for w in listed}
    n = sum(m.url in urls for m in pair.members)
    return "in" if n == len(pair.members) else "out" if n == 0 else "partial"


@dataclass
class HostState:
    host: str
    installed: Installed | None
    target: Installed
    pair: Pair | None  # None for a host without workers (a router-only host)
    membership: str = "-"  # in | out | partial | - (no workers)
    record_error: str = ""
    diffs: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.diffs:
            self.diffs = differences(self.installed, self.target)

    @property
    def at_target(self) -> bool:
        return not self.diffs

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "installed": self.installed.to_dict() if self.installed else None,
                "target": self.target.to_dict(), "pair": self.pair.to_dict() if self.pair else None,
                "membership": self.membership, "record_error": self.record_error, "diffs": self.diffs,
                "at_target": self.at_target}


def host_states(plan: dict[str, Any], records: dict[str, dict[str, Any] | None], listed: list[RouterWorker],
                record_errors: dict[str, str] | None = None) -> list[HostState]:
    """Every host of the plan (the plan document: ``Plan.to_dict()`` or the ``pdfleet_plan`` filter's output)
    with its record and router membership, in the plan's host order."""
    from pdfleet.fleet.pairs import pairs_from_plan_dict

    pairs = pairs_from_plan_dict(plan)
    want = target_of(plan)
    out = []
    for host in plan["hosts"]:
        pair = pairs.get(host)
        out.append(HostState(host, from_record(records.get(host)), want, pair,
                             membership(pair, listed) if pair else "-", (record_errors or {}).get(host, "")))
    return out
