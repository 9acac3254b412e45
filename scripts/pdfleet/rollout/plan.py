"""The rollout plan: which hosts change, from what to what, in which order and batches, how many pairs serve
at each step, and whether to refuse before touching anything. ``pdfleet rollout plan`` prints it; rollout.yml
runs it (the pdfleet_rollout_plan module).

Strategies:

* ``host-by-host`` — a patch-only change (every host to roll already runs the target SGLang version): each
  batch leaves the router, is applied and gated alone, and comes back before the next batch.
* ``split-swap`` — a version change: the router must never pair a prefill and a decode of two versions, so
  the first half is taken out and upgraded while the old half serves; then membership is swapped (old half
  out, new half in; sglang-router 0.3.2 changes one worker at a time, so the swap removes first and the
  router is empty for the measured ``swap_gap_s``: new requests in it get a fast 503, never a mixed pair);
  then the rest is upgraded and added.
* ``none`` — every host is at the target and in the router: nothing is touched.

Resume: a host that is out of the router (an interrupted rollout) comes first; if its record is already at
the target it is only gated and added back (action ``readd``).

``min_pairs``: a step may take a host out only if at least that many other pairs keep serving. Unset, it is 1,
except on a cluster of one pair, which has nothing else to serve: there the limit is 0 and the report gives the
window without service (a mono instance is such a pair of one). A value given is kept as asked: a rollout that
cannot keep that many pairs serving (``min_pairs=1`` on a one-pair cluster) is refused before anything changes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pdfleet.errors import PdfleetError
from pdfleet.rollout.state import HostState, Installed

DEFAULT_SERIAL: tuple[int | str, ...] = (1, 1)  # one canary host, then one at a time (Ansible's serial list)
DEFAULT_MIN_PAIRS = 1


def effective_min_pairs(min_pairs: int | None, total_pairs: int) -> int:
    """The pairs that must keep serving: ``min_pairs`` as given, or when unset 1, and 0 on a one-pair cluster."""
    if min_pairs is None:
        return min(DEFAULT_MIN_PAIRS, max(total_pairs - 1, 0))
    return min_pairs


class RolloutPlanError(PdfleetError):
    """The rollout cannot go ahead as asked (the message says which host and why, and the fix)."""

    exit_code = 1


def batch_sizes(serial: list[int | str] | tuple[int | str, ...], total: int) -> list[int]:
    """Ansible's ``serial`` semantics: each entry is a count or a percentage; the last one repeats."""
    out: list[int] = []
    spec = list(serial) or [total]
    left, i = total, 0
    while left > 0:
        item = spec[min(i, len(spec) - 1)]
        text = str(item).strip()
        n = math.floor(total * float(text[:-1]) / 100) if text.endswith("%") else int(text)
        n = max(1, min(n, left))
        out.append(n)
        left -= n
        i += 1
    return out


@dataclass
class HostAction:
    host: str
    action: str  # apply | readd | skip
    state: HostState
    readd: str = "now"  # now | swap (split-swap first half: added back by the swap) | never (no workers)

    @property
    def previous(self) -> Installed | None:
        """What a rollback restores: the host's record before this rollout."""
        return self.state.installed

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "action": self.action, "readd": self.readd, **self.state.to_dict(),
                "previous": self.previous.to_dict() if self.previous else None,
                "previous_vars": self.previous.role_vars() if self.previous else None,
                "target_vars": self.state.target.role_vars()}


@dataclass
class RolloutPlan:
    strategy: str
    target: Installed
    actions: list[HostAction]
    batches: list[list[str]]
    min_pairs: int | None  # as asked (None: unset)
    effective_min_pairs: int
    total_pairs: int
    serving_now: int
    steps: list[dict[str, Any]] = field(default_factory=list)
    first_half: list[str] = field(default_factory=list)
    second_half: list[str] = field(default_factory=list)
    refusal: str = ""
    pair_health: dict[str, Any] = field(default_factory=dict)  # pdfleet.rollout.health: {asked, failed, allowed}

    @property
    def hosts(self) -> list[str]:
        return [h for b in self.batches for h in b]

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "target": self.target.to_dict(),
                "actions": {a.host: a.to_dict() for a in self.actions}, "order": self.hosts,
                "batches": self.batches, "first_half": self.first_half, "second_half": self.second_half,
                "min_pairs": self.min_pairs, "effective_min_pairs": self.effective_min_pairs,
                "total_pairs": self.total_pairs, "serving_now": self.serving_now, "steps": self.steps,
                "refusal": self.refusal, "nothing_to_do": not self.hosts, "pair_health": self.pair_health}


def build(states: list[HostState], serial: list[int | str] | tuple[int | str, ...] = DEFAULT_SERIAL,
          min_pairs: int | None = None) -> RolloutPlan:
    """The plan for ``states`` (every host of the inventory, in inventory order)."""
    if min_pairs is not None and min_pairs < 0:
        raise RolloutPlanError(f"min_pairs is {min_pairs}; it must be 0 or more (pdfleet_rollout_min_pairs)")
    target = states[0].target if states else None
    if target is None:
        raise RolloutPlanError("the inventory has no hosts to roll")
    actions: list[HostAction] = []
    for s in states:
        if s.pair is None:
            actions.append(HostAction(s.host, "skip" if s.at_target else "apply", s, readd="never"))
        elif not s.at_target:
            actions.append(HostAction(s.host, "apply", s))
        elif s.membership != "in":
            actions.append(HostAction(s.host, "readd", s))
        else:
            actions.append(HostAction(s.host, "skip", s))
    pairs = [a for a in actions if a.state.pair is not None]
    total = len(pairs)
    serving_now = sum(a.state.membership == "in" for a in pairs)
    eff_min = effective_min_pairs(min_pairs, total)
    todo = [a for a in actions if a.action != "skip"]
    # resume first (hosts already out), then inventory order; hosts without workers last
    todo.sort(key=lambda a: (a.state.pair is None, a.state.membership == "in"))
    version_change = any(a.action == "apply" and a.state.pair is not None and
                         (a.previous is None or a.previous.version != target.version) for a in todo)
    strategy = "none" if not todo else "split-swap" if version_change and total > 1 else "host-by-host"
    plan = RolloutPlan(strategy, target, actions, [], min_pairs, eff_min, total, serving_now)
    if not todo:
        return plan
    if strategy == "split-swap":
        _split(plan, todo, pairs, serial)
    else:
        sizes = batch_sizes(serial, len(todo))
        i = 0
        for n in sizes:
            plan.batches.append([a.host for a in todo[i:i + n]])
            i += n
        _steps_host_by_host(plan, pairs)
    return plan


def _steps_host_by_host(plan: RolloutPlan, pairs: list[HostAction]) -> None:
    inside = {a.host for a in pairs if a.state.membership == "in"}
    for i, batch in enumerate(plan.batches, 1):
        serving = len(inside - set(batch))
        plan.steps.append({"step": i, "hosts": batch, "serving_pairs_while_out": serving,
                           "serving_pairs_after": len(inside | {h for h in batch if _has_pair(plan, h)})})
        at_most = plan.total_pairs - sum(_has_pair(plan, h) for h in batch)
        if serving < plan.effective_min_pairs and not plan.refusal:
            plan.refusal = (f"batch {i} ({', '.join(batch)}) would leave {serving} serving pair(s), fewer than "
                            f"min_pairs={plan.effective_min_pairs}: " + (
                                f"the cluster has {plan.total_pairs} pair(s), so at most {at_most} can serve while "
                                "it is out; to accept fewer (0: a window without service), set "
                                "pdfleet_rollout_min_pairs lower" if at_most < plan.effective_min_pairs else
                                "use smaller batches (pdfleet_rollout_serial) or bring the other pairs back first"))
        inside |= {h for h in batch if _has_pair(plan, h)}


def _has_pair(plan: RolloutPlan, host: str) -> bool:
    return any(a.host == host and a.state.pair is not None for a in plan.actions)


def _split(plan: RolloutPlan, todo: list[HostAction], pairs: list[HostAction],
           serial: list[int | str] | tuple[int | str, ...]) -> None:
    """First half: as many pairs as can leave while ``effective_min_pairs`` old pairs keep serving (at most
    half rounded up); the swap; then the rest. Each half is rolled in ``serial`` batches."""
    rolling = [a for a in todo if a.state.pair is not None]
    n = len(pairs)
    first_n = max(1, min(math.ceil(n / 2), n - plan.effective_min_pairs))
    first = rolling[:first_n]
    rest = rolling[first_n:] + [a for a in todo if a.state.pair is None]
    for a in first:
        a.readd = "swap"
    plan.first_half = [a.host for a in first]
    plan.second_half = [a.host for a in rest]
    for group in (first, rest):
        i = 0
        for size in batch_sizes(serial, len(group)):
            plan.batches.append([a.host for a in group[i:i + size]])
            i += size
    old_inside = {a.host for a in pairs if a.state.membership == "in"} - set(plan.first_half)
    plan.steps.append({"step": "first half", "hosts": plan.first_half, "serving_pairs_while_out": len(old_inside),
                       "serving_version": "old"})
    plan.steps.append({"step": "swap", "hosts_in": plan.first_half, "hosts_out": sorted(old_inside),
                       "serving_pairs_after": len(plan.first_half), "serving_version": "new"})
    plan.steps.append({"step": "second half", "hosts": plan.second_half,
                       "serving_pairs_while_out": len(plan.first_half), "serving_pairs_after": n,
                       "serving_version": "new"})
    if len(old_inside) < plan.effective_min_pairs:
        plan.refusal = (f"taking out {', '.join(plan.first_half)} would leave {len(old_inside)} serving pair(s), "
                        f"fewer than min_pairs={plan.effective_min_pairs}")


def table(plan: RolloutPlan) -> str:
    """The plan for people: one line per host, then the batches and serving pairs at each step."""
    from pdfleet.table import format_table

    rows = [[a.host, a.action, a.state.installed.label if a.state.installed else "-", a.state.target.label,
             a.state.membership, "; ".join(a.state.diffs) or "at target"] for a in plan.actions]
    asked = DEFAULT_MIN_PAIRS if plan.min_pairs is None else plan.min_pairs
    one_pair = f" (one-pair cluster: {plan.effective_min_pairs})" if plan.effective_min_pairs != asked else ""
    head = (f"strategy {plan.strategy}  target {plan.target.label}  pairs {plan.total_pairs} "
            f"(serving now {plan.serving_now})  min_pairs {asked}{one_pair}")
    lines = [head, "", format_table(["host", "action", "from", "to", "router", "why"], rows), ""]
    health = plan.pair_health
    if health:
        failed = health.get("failed") or {}
        lines.append(f"serving pairs asked directly: {len(health.get('asked') or [])}, failed: "
                     + (", ".join(sorted(failed)) or "none")
                     + (" (allowed: pdfleet_rollout_allow_degraded)" if failed and health.get("allowed") else ""))
    if not plan.hosts:
        lines.append("nothing to do: every host is at the target and in the router")
    for step in plan.steps:
        lines.append("step " + ", ".join(f"{k}={v}" for k, v in step.items() if k != "step") + f"  [{step['step']}]")
    if plan.refusal:
        lines.append(f"REFUSED: {plan.refusal}")
    return "\n".join(lines)
