"""Before a rollout touches anything: every pair the router serves with is asked directly (a real request through
the pair, no router, all pairs at once), so a degraded fleet is refused in seconds naming the pair, instead of a
baseline benchmark through the router timing out on requests the router keeps sending to a stopped worker.

A pair out of the router is not asked (the plan already counts it as not serving). ``allow_degraded`` turns the
refusal into a note in the plan (the operator knows, e.g. the rollout is the fix).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pdfleet import fleet
from pdfleet.rollout.plan import RolloutPlan
from pdfleet.rollout.state import HostState

DEFAULT_DEADLINE_S = 20.0
Canary = Callable[[fleet.Pair, str, float], fleet.CanaryResult]


def _canary(pair: fleet.Pair, model: str, deadline_s: float) -> fleet.CanaryResult:
    return fleet.pair_canary(pair, model, deadline_s=deadline_s)


@dataclass(frozen=True)
class PairHealth:
    """The serving pairs' canaries: which failed and why."""

    asked: tuple[str, ...]
    failed: dict[str, str]

    def refusal(self) -> str:
        """The refusal text naming each failing pair ("" when all answered)."""
        if not self.failed:
            return ""
        named = "; ".join(f"{host}: {why}" for host, why in sorted(self.failed.items()))
        return (f"{len(self.failed)} of {len(self.asked)} serving pair(s) failed a direct canary, and the router "
                f"still sends them requests: {named}. Fix or drain them first (pdfleet ops status / ops restart "
                "HOST), or start anyway with -e pdfleet_rollout_allow_degraded=true (they then count as not "
                "serving)")


def check_serving_pairs(states: list[HostState], model: str, deadline_s: float = DEFAULT_DEADLINE_S,
                        canary: Canary = _canary) -> PairHealth:
    """A canary through each pair the router lists (membership "in"), all at once."""
    serving = [s for s in states if s.pair is not None and s.membership == "in"]
    if not serving:
        return PairHealth((), {})
    with ThreadPoolExecutor(max_workers=len(serving)) as pool:
        results = list(pool.map(lambda s: canary(s.pair, model, deadline_s), serving))  # type: ignore[arg-type]
    failed = {s.host: r.problem or f"HTTP {r.status}" for s, r in zip(serving, results, strict=True) if not r.ok}
    return PairHealth(tuple(s.host for s in serving), failed)


def apply_health(plan: RolloutPlan, health: PairHealth, allow_degraded: bool) -> None:
    """Record the canaries in the plan; a failing serving pair refuses it unless ``allow_degraded``."""
    plan.pair_health = {"asked": list(health.asked), "failed": dict(health.failed), "allowed": allow_degraded}
    if health.failed and not allow_degraded:
        plan.refusal = "; ".join(r for r in (health.refusal(), plan.refusal) if r)
