"""The control side of the launch check: plan, batch the units per pin, run the probe in the runtime, report.

``check_inventories`` plans each inventory once per pinned SGLang version (the inventory's own pin and every
other patched one). A ``launcher: sim`` inventory is planned with the production launcher, so its lines are
the ones a real host would run (its stand-in model source is read as ``hub``, on which no flag depends).
Every unit of every inventory goes to one runtime process per version; the result holds the refusals
(naming inventory, pin, unit, host and the flag) and each worker's effective settings.
"""

from __future__ import annotations

import copy
import json
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pdfleet.errors import PdfleetError
from pdfleet.inventory import ROOT_VARIABLE, InventorySource, load_inventory
from pdfleet.inventory_plan import supported_patches
from pdfleet.launchcheck import store
from pdfleet.patch import runtime
from pdfleet.paths import REPO_ROOT
from pdfleet.planner import Plan, Unit, build_plan, without_key_shim

MODEL_CONFIGS: dict[str, Path] = {
    "deepseek-ai/DeepSeek-V4-Flash": Path(__file__).with_name("models") / "deepseek-v4-flash",
}
EXAMPLE_INVENTORIES: tuple[str, ...] = (
    "inventory/examples/mono-tp8", "inventory/examples/pd-4p4d", "inventory/examples/pd-fleet",
    "inventory/examples/pd-multinode", "inventory/sim", "inventory/sim-fleet", "inventory/sim-mono",
)


class LaunchCheckError(PdfleetError):
    """The check could not run (runtime missing, probe crashed): exit 2."""


@dataclass
class UnitResult:
    inventory: str
    sglang: str
    unit: str
    host: str
    kind: str
    key: str
    refused: str = ""
    notes: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    stopped_at: str | None = None

    def problem(self) -> str:
        what = "SGLang" if self.kind == "worker" else "the router"
        return (f"{self.inventory} (SGLang {self.sglang}): unit {self.unit} on {self.host}: {what}'s own parser "
                f"refuses its command line: {self.refused} (fix the unit's flags: model.server_args, the "
                f"instance's extra_args or router.extra_args in {self.inventory})")


@dataclass
class Report:
    results: list[UnitResult]

    @property
    def problems(self) -> list[str]:
        return [r.problem() for r in self.results if r.refused]

    def entries(self) -> dict[str, Any]:
        """What store.write keeps: worker units that parsed, by key."""
        return {r.key: {"sglang": r.sglang, "inventory": r.inventory, "unit": r.unit, "settings": r.settings,
                        "stopped_at": r.stopped_at}
                for r in self.results if r.kind == "worker" and not r.refused}


def pins() -> list[str]:
    return sorted(supported_patches())


def plan_at(source: InventorySource | str | Path, version: str) -> Plan:
    """The inventory's plan with SGLang pinned at `version` and the production launcher."""
    inv = load_inventory(source)
    raw = copy.deepcopy(inv.shared_var(ROOT_VARIABLE))
    if not isinstance(raw, dict):
        raise LaunchCheckError(f"{inv.source.describe()}: {ROOT_VARIABLE} is not defined")
    patches = supported_patches()
    if version not in patches:
        raise LaunchCheckError(f"--sglang {version}: not a pinned SGLang version; the pins are "
                               f"{', '.join(sorted(patches))}")
    sg = dict(raw.get("sglang") or {})
    sg.update(version=version, patch=patches[version], launcher="sglang")
    raw["sglang"] = sg
    model = dict(raw.get("model") or {})
    if model.get("source") == "standin":  # the stand-in is refused with the production launcher; no flag depends on it
        model["source"] = "hub"
        model.setdefault("allow_branch_revision", True)  # nor on the revision, which a stand-in never pins
    raw["model"] = model
    return build_plan(raw, inv.hosts, patches, source=inv.source.describe())


def _job_unit(plan: Plan, unit: Unit) -> dict[str, Any]:
    argv = without_key_shim(unit.exec_start)  # a unit with a key (planner.key_shim): the target follows
    args = argv[3:] if len(argv) > 2 and argv[1] == "-m" else argv[2:]
    if unit.kind == "worker" and "--model-path" in args:
        config = MODEL_CONFIGS.get(str(plan.model["name"]))
        i = args.index("--model-path") + 1
        args[i] = str(config) if config else args[i]
    return {"id": store.unit_key(plan, unit), "kind": unit.kind, "args": args, "env": unit.environment}


def _run_probe(version: str, device: dict[str, Any], units: list[dict[str, Any]], resolve: bool) -> dict[str, Any]:
    rt = runtime.Runtime(runtime.default_root())
    if not rt.is_ready(version):
        raise LaunchCheckError(f"the SGLang CPU runtime for {version} is not built at {rt.root}: build it with "
                               f"python -m pdfleet.patch.runtime (or set PDFLEET_RUNTIME_DIR)")
    env = rt.env(version)
    env["PYTHONPATH"] = f"{rt.router}:{env['PYTHONPATH']}"
    job = {"device": device, "units": units, "resolve": resolve}
    with tempfile.TemporaryDirectory(prefix="pdfleet-launchcheck-") as tmp:
        out = Path(tmp) / "result.json"
        proc = subprocess.run([str(rt.python), "-m", "pdfleet.launchcheck.probe", str(out)], input=json.dumps(job),
                              capture_output=True, text=True, env=env, cwd=REPO_ROOT, check=False)
        if proc.returncode != 0 or not out.is_file():
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-12:])
            raise LaunchCheckError(f"the launch check's SGLang {version} process failed (exit {proc.returncode}):\n"
                                   f"{tail}")
        result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    if result.get("sglang") != version:
        raise LaunchCheckError(f"the runtime overlay for {version} imports SGLang {result.get('sglang')}")
    return result


def check_plans(plans: Sequence[tuple[str, Plan]], resolve: bool = True) -> Report:
    """Check (label, plan) pairs: one runtime process per (SGLang version, GPU spec)."""
    batches: dict[tuple[str, str], list[tuple[str, Plan, Unit]]] = {}
    for label, plan in plans:
        for unit in plan.units():
            dev = json.dumps(store.device_of(plan, unit) if unit.kind == "worker" else {}, sort_keys=True)
            batches.setdefault((str(plan.sglang["version"]), dev), []).append((label, plan, unit))
    # The router's units carry no device: run them with the version's first worker batch.
    results: list[UnitResult] = []
    routers = {v: items for (v, dev), items in batches.items() if dev == "{}"}
    workers = {(v, dev): items for (v, dev), items in batches.items() if dev != "{}"}
    for version in sorted({v for v, _ in batches}):
        groups = [(json.loads(dev), items) for (v, dev), items in workers.items() if v == version]
        if not groups:
            groups = [(next(iter(()), {"gpu_model": "", "compute_capability": "12.0", "gpu_memory_mib": 0,
                                        "gpu_count": 0}), [])]
        groups[0][1].extend(routers.get(version, []))
        for device, items in groups:
            jobs = {store.unit_key(p, u): _job_unit(p, u) for _, p, u in items}
            answer = _run_probe(version, device, list(jobs.values()), resolve)["units"]
            for label, plan, unit in items:
                key = store.unit_key(plan, unit)
                got = answer[key]
                results.append(UnitResult(
                    inventory=label, sglang=version, unit=unit.name, host=unit.host, kind=unit.kind, key=key,
                    refused=got.get("refused", ""), notes=got.get("notes", []), settings=got.get("settings", {}),
                    stopped_at=got.get("stopped_at")))
    return Report(results)


def check_inventories(inventories: Sequence[str | Path], versions: Sequence[str] | None = None,
                      resolve: bool = True) -> Report:
    plans = [(str(inv), plan_at(inv if Path(inv).is_absolute() else REPO_ROOT / inv, v))
             for v in (versions or pins()) for inv in inventories]
    return check_plans(plans, resolve)
