"""The pair leases (``pdfleet.lease``) as each actor reaches them: in this process (the deployed watchdog, on the
gateway host itself) or on the gateway host through a runner (``pdfleet ops`` and a watchdog run from the control
machine: SSH, as root or through ``sudo -n``)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pdfleet import lease as store
from pdfleet.lease import Lease, LeaseError, LeaseHeld

Runner = Callable[[str, str], tuple[int, str, str]]  # (host, command) -> (rc, out, err)


class Leases(Protocol):
    def acquire(self, pair: str, purpose: str, ttl_s: float | None = None,
                takeover: Collection[str] = ()) -> Lease: ...
    def release(self, pair: str, takeover: Collection[str] = ()) -> Lease | None: ...
    def read(self, pair: str) -> Lease | None: ...


@dataclass
class LocalLeases:
    """The store in this process's file system, for one holder (kind and who)."""

    kind: str
    who: str = field(default_factory=store.who_am_i)
    directory: Path = store.DEFAULT_DIR

    def acquire(self, pair: str, purpose: str, ttl_s: float | None = None,
                takeover: Collection[str] = ()) -> Lease:
        return store.acquire(pair, self.kind, purpose, who=self.who, ttl_s=ttl_s, takeover=takeover,
                             directory=self.directory)[0]

    def release(self, pair: str, takeover: Collection[str] = ()) -> Lease | None:
        return store.release(pair, self.kind, takeover=takeover, directory=self.directory)

    def read(self, pair: str) -> Lease | None:
        """The pair's lease (None: free); LeaseError when this process could not take one here (the watchdog
        decides nothing it could not act on)."""
        store.writable(self.directory)
        return store.read(pair, self.directory)


@dataclass
class RemoteLeases:
    """The store on the gateway host ``host``, reached through ``run`` with ``prefix`` ("" as root, "sudo -n ")."""

    run: Runner
    host: str
    kind: str
    prefix: str = ""
    who: str = field(default_factory=store.who_am_i)
    directory: Path = store.DEFAULT_DIR

    def _call(self, request: dict[str, Any], wanted: str) -> dict[str, Any]:
        request = {**request, "dir": str(self.directory)}
        rc, out, err = self.run(self.host, self.prefix + store.remote_command(request))
        answer = store.parse_answer(rc, out, err, f"host {self.host} (the gateway, lease store {self.directory})")
        if answer.get("ok"):
            return answer
        if answer.get("error") == "held":
            raise LeaseHeld(Lease.from_dict(answer["lease"]), wanted)
        raise LeaseError(f"host {self.host}: {answer.get('message')}")

    def acquire(self, pair: str, purpose: str, ttl_s: float | None = None,
                takeover: Collection[str] = ()) -> Lease:
        answer = self._call({"op": "acquire", "pair": pair, "kind": self.kind, "who": self.who, "purpose": purpose,
                             "ttl_s": ttl_s, "takeover": list(takeover)}, f"taken for {purpose}")
        return Lease.from_dict(answer["lease"])

    def release(self, pair: str, takeover: Collection[str] = ()) -> Lease | None:
        answer = self._call({"op": "release", "pair": pair, "kind": self.kind, "takeover": list(takeover)},
                            "released")
        return Lease.from_dict(answer["previous"]) if answer.get("previous") else None

    def read(self, pair: str) -> Lease | None:
        leases = self._call({"op": "read", "pair": pair}, "read")["leases"]
        return Lease.from_dict(leases[0]) if leases else None

    def list(self) -> list[Lease]:
        return [Lease.from_dict(x) for x in self._call({"op": "list"}, "read")["leases"]]
