"""The unit of fleet operation: a pair, all the SGLang workers of one host (a prefill and a decode in
pd-4p4d; a mono instance is a pair of one), as the planner placed them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pdfleet.fleet.router import WorkerSpec

if TYPE_CHECKING:  # the gateway's registrar imports this module where only the standard library is (members.py)
    from pdfleet.planner import Plan


@dataclass(frozen=True)
class Member:
    """One worker of a pair: its unit name, role and URL, and the bootstrap port of a prefill."""

    name: str  # the systemd unit, e.g. pdfleet-prefill0
    role: str  # prefill | decode | mono
    url: str
    host: str = ""
    address: str = ""
    bootstrap_port: int | None = None

    def spec(self) -> WorkerSpec:
        """How the router lists this worker when the plan alone says (no priority or cost changes)."""
        kind = self.role if self.role in ("prefill", "decode") else "regular"
        return WorkerSpec(self.url, kind, self.bootstrap_port)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "role": self.role, "url": self.url, "host": self.host,
                "address": self.address, "bootstrap_port": self.bootstrap_port}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Member:
        bp = d.get("bootstrap_port")
        return cls(str(d["name"]), str(d["role"]), str(d["url"]).rstrip("/"), str(d.get("host", "")),
                   str(d.get("address", "")), int(bp) if bp is not None else None)


@dataclass(frozen=True)
class Pair:
    """The workers of one host."""

    host: str
    members: tuple[Member, ...]

    @property
    def is_pd(self) -> bool:
        return any(m.role in ("prefill", "decode") for m in self.members)

    @property
    def urls(self) -> list[str]:
        return [m.url for m in self.members]

    def role(self, role: str) -> list[Member]:
        return [m for m in self.members if m.role == role]

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "members": [m.to_dict() for m in self.members]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Pair:
        return cls(str(d["host"]), tuple(Member.from_dict(m) for m in d["members"]))


def pairs_from_plan(plan: Plan) -> dict[str, Pair]:
    """Host -> its pair, for every host that runs workers, in the plan's host order."""
    out: dict[str, Pair] = {}
    for host, units in plan.hosts.items():
        members = tuple(Member(u.name, u.role, u.url.rstrip("/"), u.host, u.address, u.ports.get("bootstrap_port"))
                        for u in units if u.kind == "worker")
        if members:
            out[host] = Pair(host, members)
    return out


def pairs_from_plan_dict(plan: dict[str, Any]) -> dict[str, Pair]:
    """The same from the plan document (``Plan.to_dict()``, the ``pdfleet_plan`` filter's output)."""
    out: dict[str, Pair] = {}
    for host, units in (plan.get("hosts") or {}).items():
        members = tuple(Member(str(u["name"]), str(u["role"]), str(u["url"]).rstrip("/"), str(u["host"]),
                               str(u.get("address", "")), (u.get("ports") or {}).get("bootstrap_port"))
                        for u in units if u.get("kind") == "worker")
        if members:
            out[str(host)] = Pair(str(host), members)
    return out
