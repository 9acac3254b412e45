"""What the protocol runs against: the router and the workers, and what each must report.

Built from an inventory's plan (``-i``) or from explicit URLs (``--router/--prefill/--decode``, as the
LocalPD tests do). Expectations that are unknown (explicit mode without ``--expect-*``) are not checked.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pdfleet.inventory import InventorySource
from pdfleet.inventory_plan import plan_inventory
from pdfleet.plandoc import plan_document
from pdfleet.planner import Plan


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
    inventory: str | None = None  # the inventory sources, for the report
    plan: dict[str, Any] = field(default_factory=dict)
    source: InventorySource | None = field(default=None, repr=False)  # how to reach the hosts (journals over SSH)

    @property
    def is_pd(self) -> bool:
        return any(w.role in ("prefill", "decode") for w in self.workers)

    def summary(self) -> dict[str, Any]:
        return {"router": self.router_url, "workers": [asdict(w) for w in self.workers], "model": self.model,
                "sglang_version": self.sglang_version, "profile": self.profile, "inventory": self.inventory,
                "plan": self.plan or None}


def from_document(doc: dict[str, Any], source: InventorySource | None = None) -> Target:
    """The target a plan document describes (`pdfleet plan --json`, or the file the verification play writes)."""
    workers = [Worker(u["name"], u["role"], u["url"], u["host"], int(u["tp"]) if u.get("tp") else None)
               for units in doc["hosts"].values() for u in units if u["kind"] == "worker"]
    model = doc["model"].get("served_name") or doc["model"].get("name")
    return Target(router_url=str(doc["router_url"]), workers=workers, model=str(model) if model else None,
                  sglang_version=str(doc["sglang"]["version"]), profile=str(doc["profile"]),
                  inventory=source.describe() if source else None,
                  plan={k: v for k, v in doc.items() if k != "contexts"}, source=source)


def from_plan(plan: Plan, source: InventorySource | None = None) -> Target:
    return from_document(plan_document(plan), source)


def from_inventory(source: InventorySource | str | Path) -> Target:
    src = InventorySource.of(source)
    return from_plan(plan_inventory(src), src)


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
