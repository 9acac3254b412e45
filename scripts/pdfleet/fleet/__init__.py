"""Fleet operations on a running PD cluster, in one place for every caller (rollout, watchdog, day-2 ops,
unit pruning): the router's worker list, a pair's own load, drain, an isolated gate, re-add.

Public API (stable; everything else is internal)::

    from pdfleet import fleet
    pairs = fleet.pairs_from_plan(plan)                 # host -> Pair(host, members) (a mono is a pair of one)
    router = fleet.RouterClient(plan.router_url, api_key=None)
    router.workers() / router.find(url)                 # GET /workers -> [RouterWorker(id, spec, healthy, load)]
    router.add(spec, wait_s) / router.remove(url, wait_s)   # idempotent; wait until GET /workers shows it
    fleet.read_load(url, role) -> WorkerLoad            # the worker's own numbers; .idle (missing != idle)
    fleet.wait_idle([(url, role)], timeout_s) -> IdleResult
    fleet.drain(router, pair, timeout_s) -> DrainResult # out of the router, then wait for idle; .removed specs
    fleet.pair_canary(pair, model) -> CanaryResult      # a real request through this pair, no router
    fleet.cross_pairs(pairs) -> [Pair]                  # each prefill with every other host's decode
    fleet.isolated_gate(pair, fleet.gate_settings(), logs, model, version) -> GateResult
    fleet.readd(router, pair, specs, model) -> ReaddResult  # add back, confirm its own request counter moved

The names are imported on first use (PEP 562): the gateway's registrar (pdfleet.fleet.members) runs in the gateway's
venv, which has the standard library and pdfleet without its dependencies, and must not import the gate's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pdfleet.lazyexports import lazy_getattr

# name -> the submodule that defines it
_EXPORTS = {
    "CanaryResult": "canary", "cross_pairs": "canary", "pair_canary": "canary",
    "DEFAULT_ROUTER_MODULE": "gate", "GateError": "gate", "GateResult": "gate", "TempRouter": "gate",
    "gate_settings": "gate", "isolated_gate": "gate", "pair_target": "gate",
    "IdleResult": "load", "WorkerLoad": "load", "read_load": "load", "wait_idle": "load",
    "Member": "pairs", "Pair": "pairs", "pairs_from_plan": "pairs", "pairs_from_plan_dict": "pairs",
    "RouterClient": "router", "RouterError": "router", "RouterWorker": "router", "WorkerSpec": "router",
    "cohort_label": "router",
    "DrainResult": "steps", "FleetError": "steps", "ReaddResult": "steps", "drain": "steps", "readd": "steps",
    "remove_pair": "steps", "request_counts": "steps",
}
__all__ = [  # the names of _EXPORTS (a literal, so linters see them; tests/fleet/test_fleet_unit.py keeps them equal)
    "DEFAULT_ROUTER_MODULE",
    "CanaryResult",
    "DrainResult",
    "FleetError",
    "GateError",
    "GateResult",
    "IdleResult",
    "Member",
    "Pair",
    "ReaddResult",
    "RouterClient",
    "RouterError",
    "RouterWorker",
    "TempRouter",
    "WorkerLoad",
    "WorkerSpec",
    "cohort_label",
    "cross_pairs",
    "drain",
    "gate_settings",
    "isolated_gate",
    "pair_canary",
    "pair_target",
    "pairs_from_plan",
    "pairs_from_plan_dict",
    "read_load",
    "readd",
    "remove_pair",
    "request_counts",
    "wait_idle",
]


__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


if TYPE_CHECKING:
    from pdfleet.fleet.canary import CanaryResult, cross_pairs, pair_canary
    from pdfleet.fleet.gate import (
        DEFAULT_ROUTER_MODULE,
        GateError,
        GateResult,
        TempRouter,
        gate_settings,
        isolated_gate,
        pair_target,
    )
    from pdfleet.fleet.load import IdleResult, WorkerLoad, read_load, wait_idle
    from pdfleet.fleet.pairs import Member, Pair, pairs_from_plan, pairs_from_plan_dict
    from pdfleet.fleet.router import RouterClient, RouterError, RouterWorker, WorkerSpec, cohort_label
    from pdfleet.fleet.steps import DrainResult, FleetError, ReaddResult, drain, readd, remove_pair, request_counts
