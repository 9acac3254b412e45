"""The inputs the preflight hands each role from the plan, for tests that run one role alone (no preflight).

They come from the same Python the plan document does (pdfleet.versions, pdfleet.patch.roleinputs), so a role run
alone gets what site.yml would pass it for the default pins.
"""

from __future__ import annotations

from typing import Any

from pdfleet import versions
from pdfleet.patch.roleinputs import sglang_inputs


def plan_inputs(role: str, sglang_version: str = "0.5.15.post1", patched: bool = True,
                venv: str = "/opt/pdfleet/venv") -> dict[str, Any]:
    """The plan's inputs of ``role`` (empty for a role that takes none)."""
    pins = versions.PINS
    return {
        "nvidia_driver": {"nvidia_driver_branch": pins["cuda_driver_branch"],
                          "nvidia_driver_version": pins["cuda_driver_version"],
                          "nvidia_driver_hold_regex": dict(versions.CONSTANTS["driver_hold_regex"])},
        "cuda_toolkit": {"cuda_toolkit_version": pins["cuda_version"]},
        "nixl": {"nixl_version": pins["nixl_version"]},
        "sglang": {**sglang_inputs(sglang_version, patched), "sglang_router_package": pins["sglang_router_package"],
                   "sglang_router_version": pins["sglang_router_version"],
                   "sglang_record_path": f"{venv}/{versions.RECORD_NAME}"},
        "model": {"model_manifest_name": versions.MODEL_MANIFEST_NAME},
    }.get(role, {})
