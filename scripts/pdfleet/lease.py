"""One lease per pair, shared by the watchdog, `pdfleet ops` and the rollout, so none of them puts back into the
router what another took out, and two of them never work on the same pair at once.

The store is a directory on the gateway (router) host, the one host every actor reaches: constants.yml's
``lease_dir`` (pdfleet.versions.LEASE_DIR; every caller passes it: this module runs remotely, alone), the
pdfleet_watchdog unit's second StateDirectory, owned by the watchdog's user, mode 0755. A root actor that finds it
missing creates it owned as the watchdog's own state directory (constants.yml's ``watchdog_state_dir``,
pdfleet.versions.WATCHDOG_STATE_DIR: callers pass it too, as ``owner_dir``). One JSON file per pair,
``<pair host>.json``: holder kind (watchdog | ops | rollout), who (user@machine pid N), purpose, since, expires (null:
held until released, as a person's drain), and in_gateway: whether the holder keeps the pair in the gateway while it
holds it (true only for the half a split-fleet swap takes out, which serves until the swap; every other holder takes
the pair out, and the gateway's registrar, pdfleet.fleet.members, leaves such a pair to it). Every change is made
under an exclusive ``flock`` on ``.lock`` in that directory (a read-only descriptor is enough, so root and the
watchdog's user share it), and files are written atomically (temp file, then rename). A record past its
``expires`` may be taken by anyone.

The holder kind is the actor: an actor may take or drop a lease of its own kind (a rerun of the rollout, a
restarted watchdog, `pdfleet ops undrain` of a person's drain), except a `pdfleet ops` command at work (an ops lease
with an expiry: restart, undrain), which only its own holder (who) may change: two people's `ops restart` of one
pair never run at once. Another kind only through ``takeover`` entries: a kind ("rollout": any lease of that
kind), kind:purpose ("watchdog:left_out"), "who:<holder>" (a holder known to be gone: ``gone_here``), or "*" (an
operator's override).

Standard library only: the module also runs on the gateway host with its system python3, as a script that reads
one JSON request from its first argument and prints one JSON answer (``remote_command`` builds the command line
that carries this file's own source, so the host needs nothing of pdfleet installed):

    {"op": "acquire", "pair": "node2", "kind": "ops", "who": "...", "purpose": "drain", "ttl_s": null,
     "takeover": [], "in_gateway": false}
                                                  -> {"ok": true, "changed": true, "lease": {...}, "previous": null}
    {"op": "release", "pair": "node2", "kind": "ops", "who": "...", "takeover": []}
    {"op": "check", ...same as acquire}           -> whether acquire would succeed; nothing written (check mode)
    {"op": "read", "pair": "node2"} / {"op": "list"}
Every request also carries "dir", the store's directory, and "owner_dir", the watchdog's state directory (whose
owner a store created by root gets).
Exit code 0 ok, 1 held by another actor ({"ok": false, "error": "held", "lease": the holder}), 2 the store cannot
be used or a bad request ({"ok": false, "error": "store", "message": ...}).
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import fcntl
import getpass
import json
import os
import shlex
import socket
import sys
import tempfile
import time
import zlib
from collections.abc import Collection, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

LOCK_NAME = ".lock"
KINDS = ("watchdog", "ops", "rollout")


class LeaseError(Exception):
    """The lease store cannot be used (missing, not writable, damaged record), or a bad request."""


@dataclass(frozen=True)
class Lease:
    pair: str
    kind: str  # watchdog | ops | rollout
    who: str  # user@machine pid N
    purpose: str  # restart, drain, leave_out, rollout ...
    since: float
    expires: float | None  # None: held until released
    # the holder keeps the pair in the gateway (a split-fleet swap's serving half); False: it takes the pair out
    in_gateway: bool = False

    def expired(self, now: float) -> bool:
        return self.expires is not None and now >= self.expires

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Lease:
        expires = doc.get("expires")
        return cls(str(doc["pair"]), str(doc["kind"]), str(doc["who"]), str(doc["purpose"]), float(doc["since"]),
                   None if expires is None else float(expires), doc.get("in_gateway") is True)

    def describe(self) -> str:
        until = "no expiry" if self.expires is None else f"expires {_utc(self.expires)}"
        return f"{self.kind} ({self.who}) for {self.purpose} since {_utc(self.since)}, {until}"


def _utc(epoch: float) -> str:
    # timezone.utc, not UTC (3.11): the gateway host's system python3 may be older than the project's
    return dt.datetime.fromtimestamp(epoch, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: UP017


def at_work(lease: Lease) -> bool:
    """An ops command working on the pair (restart, undrain: held with an expiry), not a person's drain."""
    return lease.kind == "ops" and lease.expires is not None


def fix_for(lease: Lease) -> str:
    """How an operator gets past ``lease``: wait, or the command that releases it."""
    if at_work(lease):
        return (f"another `pdfleet ops {lease.purpose}` is working on the pair: wait for it to finish; if it was "
                f"stopped, `pdfleet ops undrain {lease.pair} --break-lease` puts the pair back and releases it")
    if lease.kind == "ops":
        return (f"wait for that command to finish, or if the pair was drained by hand, `pdfleet ops undrain "
                f"{lease.pair}` puts it back and releases it")
    if lease.kind == "rollout":
        return (f"wait for the rollout, or if it stopped, rerun rollout.yml (it takes the lease over) or, once the "
                f"pair is fixed, `pdfleet ops undrain {lease.pair} --break-lease`")
    if lease.purpose == "left_out":
        return f"the watchdog left the pair out for a person: fix it, then `pdfleet ops undrain {lease.pair}`"
    return ("wait for the watchdog's remediation to end (pdfleet-watchdog status), or `pdfleet ops undrain "
            f"{lease.pair} --break-lease` if it is stuck")


class LeaseHeld(LeaseError):
    """Another actor holds the pair's lease."""

    def __init__(self, lease: Lease, wanted: str) -> None:
        self.lease = lease
        super().__init__(f"pair {lease.pair}: not {wanted}: its lease is held by {lease.describe()}; "
                         f"{fix_for(lease)}")


def who_am_i() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()} pid {os.getpid()}"


def may_take(lease: Lease, kind: str, who: str, takeover: Collection[str], now: float) -> bool:
    """Whether ``kind`` (holder ``who``, with ``takeover``) may take or drop ``lease``."""
    if lease.expired(now) or "*" in takeover or f"who:{lease.who}" in takeover:
        return True
    if lease.kind == kind:
        return lease.who == who or not at_work(lease)
    return lease.kind in takeover or f"{lease.kind}:{lease.purpose}" in takeover


def gone_here(lease: Lease) -> bool:
    """Whether ``lease``'s holder was a process of this user on this machine that no longer runs (an ops command
    interrupted here): its own rerun may take the lease over ("who:<holder>")."""
    user_host, _, pid = lease.who.rpartition(" pid ")
    if user_host != f"{getpass.getuser()}@{socket.gethostname()}" or not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, another user's
        return False
    return False


def _path(directory: Path, pair: str) -> Path:
    if not pair or "/" in pair or pair.startswith("."):
        raise LeaseError(f"{pair!r} is not a pair's host name")
    return directory / f"{pair}.json"


def _ensure_dir(directory: Path, owner_dir: Path | None) -> None:
    """A root actor creates a missing store (0755, owned as ``owner_dir``, the watchdog's state directory, when
    that exists); anyone else is told."""
    if directory.is_dir():
        return
    if os.geteuid() != 0:
        _missing(directory)
    directory.mkdir(mode=0o755, parents=True, exist_ok=True)
    if owner_dir is not None:
        with contextlib.suppress(OSError):
            ref = owner_dir.stat()
            os.chown(directory, ref.st_uid, ref.st_gid)


def writable(directory: Path, owner_dir: Path | None = None) -> None:
    """LeaseError, naming the host, the directory and the fix, unless this user can take leases in ``directory``."""
    if not directory.is_dir():
        _ensure_dir(directory, owner_dir)  # root creates it; anyone else is told how
    elif not os.access(directory, os.W_OK | os.X_OK):
        raise LeaseError(f"{socket.gethostname()}: the lease directory {directory} is not writable by "
                         f"{getpass.getuser()}: it belongs to the watchdog's user (the pdfleet-watchdog unit's "
                         "StateDirectory); run as root, through sudo -n, or as that user")


def _missing(directory: Path) -> None:
    raise LeaseError(f"{socket.gethostname()}: the lease directory {directory} is missing; it is the "
                     "pdfleet-watchdog unit's StateDirectory: deploy the watchdog (ansible-playbook site.yml "
                     "--tags watchdog) or start pdfleet-watchdog.service")


@contextlib.contextmanager
def _locked(directory: Path, owner_dir: Path | None = None) -> Iterator[None]:
    _ensure_dir(directory, owner_dir)
    try:
        fd = os.open(directory / LOCK_NAME, os.O_RDONLY | os.O_CREAT, 0o644)
    except OSError as e:
        raise LeaseError(f"{socket.gethostname()}: cannot open the lease lock {directory / LOCK_NAME}: {e} (the "
                         f"directory must be writable by this user, {getpass.getuser()})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock


def _read(path: Path) -> Lease | None:
    try:
        return Lease.from_dict(json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise LeaseError(f"{socket.gethostname()}: the lease record {path} is unreadable ({e}): remove it once "
                         "you know nobody is working on that pair") from None


def _write(path: Path, lease: Lease) -> None:
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(lease.to_dict(), sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError, UnboundLocalError):
            os.unlink(tmp)
        raise LeaseError(f"{socket.gethostname()}: cannot write the lease record {path}: {e} (the directory must "
                         f"be writable by this user, {getpass.getuser()})") from None


def _check(directory: Path, pair: str, kind: str, who: str, takeover: Collection[str], now: float,
           wanted: str) -> Lease | None:
    if kind not in KINDS:
        raise LeaseError(f"lease kind {kind!r} is not one of {', '.join(KINDS)}")
    held = _read(_path(directory, pair))
    if held is not None and not may_take(held, kind, who, takeover, now):
        raise LeaseHeld(held, wanted)
    return held


def acquire(pair: str, kind: str, purpose: str, *, who: str | None = None, ttl_s: float | None = None,
            takeover: Collection[str] = (), directory: Path, owner_dir: Path | None = None,
            now: float | None = None, in_gateway: bool = False) -> tuple[Lease, Lease | None]:
    """Take (or renew) ``pair``'s lease for ``kind``; (the lease, the one it replaced). LeaseHeld when another
    actor holds it. A renewal by the same holder keeps its ``since``. A missing store is created by root, owned
    as ``owner_dir`` (the watchdog's state directory)."""
    now = time.time() if now is None else now
    who = who or who_am_i()
    with _locked(directory, owner_dir):
        held = _check(directory, pair, kind, who, takeover, now, f"taken for {purpose}")
        same = held is not None and held.kind == kind and held.who == who and not held.expired(now)
        lease = Lease(pair, kind, who, purpose, held.since if same and held else now,
                      None if ttl_s is None else now + ttl_s, in_gateway)
        _write(_path(directory, pair), lease)
    return lease, held


def check(pair: str, kind: str, purpose: str, *, who: str | None = None, takeover: Collection[str] = (),
          directory: Path, now: float | None = None) -> Lease | None:
    """What ``acquire`` would replace (None: free), or LeaseHeld; nothing is written (check mode)."""
    now = time.time() if now is None else now
    if not directory.is_dir():
        return None
    return _check(directory, pair, kind, who or who_am_i(), takeover, now, f"taken for {purpose}")


def release(pair: str, kind: str, *, who: str | None = None, takeover: Collection[str] = (), directory: Path,
            now: float | None = None) -> Lease | None:
    """Drop ``pair``'s lease; the lease dropped (None: there was none). LeaseHeld when another actor holds it."""
    now = time.time() if now is None else now
    if not directory.is_dir():
        return None
    with _locked(directory):
        held = _check(directory, pair, kind, who or who_am_i(), takeover, now, "released")
        if held is not None:
            try:
                _path(directory, pair).unlink()
            except OSError as e:
                raise LeaseError(f"{socket.gethostname()}: cannot remove the lease record "
                                 f"{_path(directory, pair)}: {e}") from None
    return held


def read(pair: str, directory: Path) -> Lease | None:
    return _read(_path(directory, pair))


def read_all(directory: Path) -> list[Lease]:
    if not directory.is_dir():
        return []
    found = (_read(p) for p in sorted(directory.glob("*.json")))
    return [lease for lease in found if lease is not None]


def _absolute(request: dict[str, Any], key: str, what: str) -> Path:
    """The request's directory ``key``; KeyError when the caller did not name it (this module knows neither
    directory: pdfleet.versions is not here)."""
    path = Path(str(request[key]))
    if not path.is_absolute():
        raise LeaseError(f"{what} {path} is not an absolute path")
    return path


def handle(request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """One JSON request (the module's script form): (exit code, answer)."""
    try:
        op = request.get("op")
        directory = _absolute(request, "dir", "the lease directory")
        owner_dir = _absolute(request, "owner_dir", "the watchdog's state directory")
        takeover = [str(t) for t in request.get("takeover") or []]
        if op in ("read", "list"):
            leases = read_all(directory) if op == "list" else [x for x in [read(request["pair"], directory)] if x]
            return 0, {"ok": True, "changed": False, "leases": [x.to_dict() for x in leases]}
        pair, kind = str(request["pair"]), str(request["kind"])
        if op == "acquire":
            ttl = request.get("ttl_s")
            lease, previous = acquire(pair, kind, str(request["purpose"]), who=request.get("who"),
                                      ttl_s=None if ttl is None else float(ttl), takeover=takeover,
                                      directory=directory, owner_dir=owner_dir,
                                      in_gateway=request.get("in_gateway") is True)
            return 0, {"ok": True, "changed": True, "lease": lease.to_dict(),
                       "previous": previous.to_dict() if previous else None}
        if op == "check":
            previous = check(pair, kind, str(request["purpose"]), who=request.get("who"), takeover=takeover,
                             directory=directory)
            return 0, {"ok": True, "changed": False, "previous": previous.to_dict() if previous else None}
        if op == "release":
            previous = release(pair, kind, who=request.get("who"), takeover=takeover, directory=directory)
            return 0, {"ok": True, "changed": previous is not None,
                       "previous": previous.to_dict() if previous else None}
        raise LeaseError(f"unknown lease operation {op!r} (acquire, check, release, read, list)")
    except LeaseHeld as e:
        return 1, {"ok": False, "error": "held", "message": str(e), "lease": e.lease.to_dict()}
    except (LeaseError, KeyError, TypeError, ValueError) as e:
        return 2, {"ok": False, "error": "store", "message": str(e) if isinstance(e, LeaseError)
                   else f"bad lease request {request!r}: {type(e).__name__}: {e}"}


def remote_argv(request: dict[str, Any], python: str = "python3") -> list[str]:
    """The argv that runs ``request`` on another host with this module's own source (compressed into the
    command line: the runners have no stdin), so that host needs only a Python 3."""
    blob = base64.b64encode(zlib.compress(Path(__file__).read_bytes(), 9)).decode()
    code = f"import base64,zlib;exec(compile(zlib.decompress(base64.b64decode('{blob}')),'pdfleet-lease','exec'))"
    return [python, "-c", code, json.dumps(request, sort_keys=True)]


def remote_command(request: dict[str, Any], python: str = "python3") -> str:
    return shlex.join(remote_argv(request, python))


def parse_answer(rc: int, out: str, err: str, where: str) -> dict[str, Any]:
    """The answer of a remote run of ``remote_command``; LeaseError naming ``where`` when there is none."""
    try:
        answer = json.loads(out.strip().splitlines()[-1])
        if not isinstance(answer, dict):
            raise ValueError("not an object")
    except (ValueError, IndexError):
        raise LeaseError(f"{where}: the lease command gave no answer (rc {rc}: {(err or out).strip()[:300]})") \
            from None
    return answer


def main(argv: list[str]) -> int:
    try:
        request = json.loads(argv[0]) if argv else {}
    except ValueError as e:
        request = {"op": f"unparsable request: {e}"}
    code, answer = handle(request if isinstance(request, dict) else {"op": None})
    print(json.dumps(answer, sort_keys=True))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
