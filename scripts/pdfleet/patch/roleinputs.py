"""The sglang role's inputs that install one SGLang version with or without its patch (the plan's and a rollback's).

The role reads nothing of the package: the preflight hands it these (from the plan document's ``role_facts``),
and a rollback hands it the same for the host's previous record (pdfleet.rollout.state).
"""

from __future__ import annotations

from typing import Any

from pdfleet.patch import manifest as patches
from pdfleet.versions import OVERLAY_REQUIREMENTS


def patch_facts(version: str) -> dict[str, Any]:
    """What the role checks and records of ``version``'s patch: conn.py's path in the wheel, its pristine and
    patched sha256, the patch id and parts, and the earlier pdfleet patches it puts back (as the manifest says)."""
    m = patches.load_manifest(version)
    return {"file": m.file, "patch_id": m.patch_id, "pristine_sha256": m.pristine_sha256,
            "patched_sha256": m.patched_sha256, "parts": list(m.parts),
            "superseded": [{"patch_id": pid, "patched_sha256": sha} for pid, sha in sorted(m.superseded.items())]}


def patch_file(version: str) -> str:
    """The patch file of ``version`` on the control machine (package data; the role's ansible.posix.patch src)."""
    return str(patches.load_manifest(version).patch_path)


def sglang_inputs(version: str, patched: bool) -> dict[str, Any]:
    """The sglang role's inputs that install exactly ``version``, patched or pristine (in sim mode with that
    version's own overlay requirements: a rollback to another version must not keep the target's)."""
    return {"sglang_version": version, "sglang_apply_patch": patched, "sglang_patch": patch_facts(version),
            "sglang_patch_file": patch_file(version), "sglang_sim_packages": sim_packages(version)}


def sim_packages(version: str) -> list[str]:
    """What sim mode installs without dependencies beside ``version`` (pdfleet.versions.OVERLAY_REQUIREMENTS)."""
    return list(OVERLAY_REQUIREMENTS.get(version, ()))
