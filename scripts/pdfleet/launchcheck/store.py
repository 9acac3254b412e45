"""The committed effective settings (resolved.json): keys, reading and lookup. Light: no SGLang, no runtime.

A unit's key hashes what SGLang's resolution depends on: the pin, the unit's whole command line and
environment, and the GPU the host spec describes. A plan whose units match committed keys shows their
settings; any other unit (another inventory, an edited flag or env) has none, and the plan says how to
resolve it (``pdfleet launchcheck -i INVENTORY``) instead of guessing.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from pdfleet.planner import Plan, Unit, without_key_shim

RESOLVED_FILE = Path(__file__).with_name("resolved.json")
SCHEMA = "pdfleet-launchcheck/1"
REGENERATE = "python -m pdfleet.launchcheck --write"
# Environment SGLang's resolution never reads, left out of the key: UCX's TCP listening ports (the host firewall's
# range, pdfleet.firewall) change no server setting.
KEYLESS_ENV = frozenset({"UCX_TCP_PORT_RANGE"})


def device_of(plan: Plan, unit: Unit) -> dict[str, Any]:
    """The GPU the host spec describes for `unit` (what the check reports to SGLang)."""
    spec = plan.host_specs.get(unit.host, {})
    return {"gpu_model": spec.get("gpu_model", ""), "compute_capability": str(spec.get("compute_capability", "")),
            "gpu_memory_mib": int(spec.get("gpu_memory_mib", 0) or 0), "gpu_count": int(spec.get("gpu_count", 0) or 0)}


def unit_key(plan: Plan, unit: Unit) -> str:
    # the command line without a key shim (a key changes no setting SGLang resolves), the environment without
    # what changes none either (KEYLESS_ENV)
    env = {k: v for k, v in unit.environment.items() if k not in KEYLESS_ENV}
    data = {"sglang": str(plan.sglang["version"]), "argv": without_key_shim(unit.exec_start), "env": env,
            "device": device_of(plan, unit)}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:20]


@lru_cache(maxsize=4)
def _load(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    doc = json.loads(path.read_text(encoding="utf-8"))
    return doc.get("units", {}) if isinstance(doc, dict) and doc.get("schema") == SCHEMA else {}


def committed(path: Path = RESOLVED_FILE) -> dict[str, Any]:
    """key -> entry ({sglang, inventory, unit, settings, stopped_at}) from the committed file."""
    return dict(_load(path))


def effective_settings(plan: Plan, path: Path = RESOLVED_FILE) -> dict[str, dict[str, Any]]:
    """Worker unit name -> its committed effective settings, or {"unresolved": how to resolve them}."""
    data = _load(path)
    out: dict[str, dict[str, Any]] = {}
    for unit in plan.units():
        if unit.kind != "worker":
            continue
        entry = data.get(unit_key(plan, unit))
        if entry is None:
            out[unit.name] = {"unresolved": f"no resolved settings for this command line and environment on SGLang "
                                            f"{plan.sglang['version']}: run pdfleet launchcheck -i INVENTORY"}
        else:
            out[unit.name] = {"sglang": entry["sglang"], "settings": entry["settings"],
                              "stopped_at": entry.get("stopped_at")}
    return out


def write(entries: dict[str, Any], path: Path = RESOLVED_FILE) -> None:
    doc = {"schema": SCHEMA, "regenerate": REGENERATE, "units": dict(sorted(entries.items()))}
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    _load.cache_clear()
