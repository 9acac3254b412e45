"""What the protocol runs against: the router and the workers, and what each must report.

Built from an inventory's plan (``-i``) or from explicit URLs (``--router/--prefill/--decode``, as the
LocalPD tests do). Expectations that are unknown (explicit mode without ``--expect-*``) are not checked.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pdfleet.cluster import plan_inventory
from pdfleet.planner import Plan, Unit


@dataclass(frozen=True)
class Worker:
    name: str  # the unit name (pdfleet-prefill0) or, in explicit mode, prefill / decode / prefill1 …
    role: str  # prefill, decode, mono
    url: str
    host: str = ""  # inventory host name ("" in explicit mode)
    tp: int | None = None


@dataclass
class Target:
    router_url: str
    workers: list[Worker]
    model: str | None = None
    sglang_version: str | None = None
    profile: str = "explicit"
    inventory: str | None = None
    plan: dict[str, Any] = field(default_factory=dict)

    @property
    def is_pd(self) -> bool:
        return any(w.role in ("prefill", "decode") for w in self.workers)

    @property
    def baseline_key(self) -> str:
        """The benchmark baseline's key: the profile, and for a fleet (pd-4p4d on several hosts, one profile)
        its worker count too, so a three-pair fleet is never compared with one pair's numbers."""
        counts = {r: sum(w.role == r for w in self.workers) for r in ("prefill", "decode", "mono")}
        if max(counts.values()) <= 1:
            return self.profile
        return f"{self.profile} ({counts['prefill']}p+{counts['decode']}d)" if self.is_pd else \
            f"{self.profile} ({counts['mono']} workers)"

    def summary(self) -> dict[str, Any]:
        return {"router": self.router_url, "workers": [asdict(w) for w in self.workers], "model": self.model,
                "sglang_version": self.sglang_version, "profile": self.profile, "inventory": self.inventory,
                "plan": self.plan or None}


def _flag(unit: Unit, flag: str) -> str | None:
    argv = unit.exec_start
    for i, arg in enumerate(argv[:-1]):
        if arg == flag:
            return argv[i + 1]
    return None


def from_plan(plan: Plan, inventory: str | Path | None = None) -> Target:
    workers = []
    for u in plan.units():
        if u.kind != "worker":
            continue
        tp = _flag(u, "--tp")
        workers.append(Worker(u.name, u.role, u.url, u.host, int(tp) if tp else None))
    model = plan.model.get("served_name") or plan.model.get("name")
    return Target(router_url=plan.router_url, workers=workers, model=str(model) if model else None,
                  sglang_version=str(plan.sglang["version"]), profile=plan.profile,
                  inventory=str(inventory) if inventory else None, plan=plan.to_dict())


def from_inventory(path: str | Path) -> Target:
    return from_plan(plan_inventory(path), path)


def from_urls(router: str, prefill: list[str], decode: list[str], mono: list[str] | None = None,
              model: str | None = None, sglang_version: str | None = None, tp: int | None = None,
              profile: str = "explicit") -> Target:
    workers: list[Worker] = []
    for role, urls in (("prefill", prefill), ("decode", decode), ("mono", mono or [])):
        for i, url in enumerate(urls):
            name = role if len(urls) == 1 else f"{role}{i}"
            workers.append(Worker(name, role, url.rstrip("/"), "", tp))
    return Target(router_url=router.rstrip("/"), workers=workers, model=model, sglang_version=sglang_version,
                  profile=profile)
