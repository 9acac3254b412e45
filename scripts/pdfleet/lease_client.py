"""The pair leases (``pdfleet.lease``) as each actor reaches them: in this process (the deployed watchdog, on the
gateway host itself) or on the gateway host through a runner (``pdfleet ops`` and a watchdog run from the control
machine: SSH, as root or through ``sudo -n``).

A lease held by a process of this user on this machine that no longer runs (an interrupted `pdfleet ops restart`)
is taken over by its rerun (``pdfleet.lease.gone_here``): the refusal is for another person's command at work."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pdfleet import lease as store
from pdfleet.lease import Lease, LeaseError, LeaseHeld
from pdfleet.privilege import Runner
from pdfleet.versions import LEASE_DIR, WATCHDOG_STATE_DIR


def _past_gone(call: Callable[[Collection[str]], Any], takeover: Collection[str]) -> Any:
    """``call(takeover)``, once more taking over the holder when it is this user's process here that is gone."""
    try:
        return call(takeover)
    except LeaseHeld as e:
        if not store.gone_here(e.lease):
            raise
        return call((*takeover, f"who:{e.lease.who}"))


class Leases(Protocol):
    def acquire(self, pair: str, purpose: str, ttl_s: float | None = None,
                takeover: Collection[str] = ()) -> Lease: ...
    def release(self, pair: str, takeover: Collection[str] = ()) -> Lease | None: ...
    def read(self, pair: str) -> Lease | None: ...


@dataclass
class LocalLeases:
    """The store in this process's file system, for one holder (kind and who); one that root creates gets the
    owner of ``owner_dir``, the watchdog's state directory."""

    kind: str
    who: str = field(default_factory=store.who_am_i)
    directory: Path = LEASE_DIR
    owner_dir: Path = WATCHDOG_STATE_DIR

    def acquire(self, pair: str, purpose: str, ttl_s: float | None = None,
                takeover: Collection[str] = ()) -> Lease:
        return _past_gone(lambda t: store.acquire(pair, self.kind, purpose, who=self.who, ttl_s=ttl_s, takeover=t,
                                                  directory=self.directory, owner_dir=self.owner_dir)[0],
                          takeover)

    def release(self, pair: str, takeover: Collection[str] = ()) -> Lease | None:
        return _past_gone(lambda t: store.release(pair, self.kind, who=self.who, takeover=t,
                                                  directory=self.directory), takeover)

    def read(self, pair: str) -> Lease | None:
        """The pair's lease (None: free); LeaseError when this process could not take one here (the watchdog
        decides nothing it could not act on)."""
        store.writable(self.directory, self.owner_dir)
        return store.read(pair, self.directory)


@dataclass
class RemoteLeases:
    """The store on the gateway host ``host``, reached through ``run`` with ``prefix`` ("" as root, "sudo -n ");
    one that root creates there gets the owner of ``owner_dir``, the watchdog's state directory."""

    run: Runner
    host: str
    kind: str
    prefix: str = ""
    who: str = field(default_factory=store.who_am_i)
    directory: Path = LEASE_DIR
    owner_dir: Path = WATCHDOG_STATE_DIR

    def _call(self, request: dict[str, Any], wanted: str) -> dict[str, Any]:
        request = {**request, "dir": str(self.directory), "owner_dir": str(self.owner_dir)}
        rc, out, err = self.run(self.host, self.prefix + store.remote_command(request))
        answer = store.parse_answer(rc, out, err, f"host {self.host} (the gateway, lease store {self.directory})")
        if answer.get("ok"):
            return answer
        if answer.get("error") == "held":
            raise LeaseHeld(Lease.from_dict(answer["lease"]), wanted)
        raise LeaseError(f"host {self.host}: {answer.get('message')}")

    def acquire(self, pair: str, purpose: str, ttl_s: float | None = None,
                takeover: Collection[str] = ()) -> Lease:
        answer = _past_gone(lambda t: self._call(
            {"op": "acquire", "pair": pair, "kind": self.kind, "who": self.who, "purpose": purpose, "ttl_s": ttl_s,
             "takeover": list(t)}, f"taken for {purpose}"), takeover)
        return Lease.from_dict(answer["lease"])

    def release(self, pair: str, takeover: Collection[str] = ()) -> Lease | None:
        answer = _past_gone(lambda t: self._call(
            {"op": "release", "pair": pair, "kind": self.kind, "who": self.who, "takeover": list(t)}, "released"),
            takeover)
        return Lease.from_dict(answer["previous"]) if answer.get("previous") else None

    def read(self, pair: str) -> Lease | None:
        leases = self._call({"op": "read", "pair": pair}, "read")["leases"]
        return Lease.from_dict(leases[0]) if leases else None

    def list(self) -> list[Lease]:
        return [Lease.from_dict(x) for x in self._call({"op": "list"}, "read")["leases"]]
