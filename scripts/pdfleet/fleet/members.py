"""The gateway's workers after it starts (smg): every planned worker registered under its own SGLang version's
pairing protocol, so that a gateway that restarts, in the middle of a version swap too, never pairs a prefill of
one version with a decode of another.

smg takes the workers on its command line without labels (its CLI has no way to give one), so two versions
listed there pair with each other. pdfleet's smg unit therefore lists none, and this registrar adds each planned
worker through the API with the label read from the worker itself: its ``/server_info`` version, as
``cohort_label`` names it (the label the version swap gives each cohort). A planned worker is left alone when:

- the gateway lists it already (whoever added it chose its label);
- its pair's lease (pdfleet.lease) is held by an actor that took the pair out of the gateway (a rollout's host, the
  watchdog's remediation, a person's drain): that holder puts it back. The half a split-fleet swap is about to
  take out is leased ``in_gateway``: it serves until the swap, so it is registered;
- its version cannot be read yet (not started, still loading): it is tried again the next round.

A pair's prefill goes before its decode, as ``readd`` does. The registrar ends once every planned worker is listed
or held out; it never removes a worker, and never adds back what anyone removes after it ended (README, "The
gateway": pdfleet's actors decide membership).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from pdfleet import lease
from pdfleet.fleet.http import HTTPError, call
from pdfleet.fleet.pairs import Member, Pair
from pdfleet.fleet.router import RouterClient, RouterError, cohort_label
from pdfleet.lease import Lease

ROLE_ORDER = {"prefill": 0, "mono": 1, "decode": 2}


@dataclass
class Round:
    """What one pass over the planned workers did: the URLs added (with their protocol), those left to their
    lease holder, and those still waiting (URL -> why)."""

    added: dict[str, str] = field(default_factory=dict)
    held_out: dict[str, str] = field(default_factory=dict)
    waiting: dict[str, str] = field(default_factory=dict)
    listed: int = 0

    @property
    def done(self) -> bool:
        return not self.waiting


def read_version(url: str, timeout_s: float = 5.0) -> tuple[str | None, str]:
    """The SGLang version a worker reports (``/server_info``), or None and why not."""
    try:
        status, info = call("GET", url + "/server_info", timeout_s=timeout_s)
    except HTTPError as e:
        return None, str(e)
    version = info.get("version") if isinstance(info, dict) else None
    if status != 200 or not version:
        return None, f"GET {url}/server_info answered {status} without a version"
    return str(version), ""


def register_round(router: RouterClient, pairs: list[Pair], lease_of: Callable[[str], Lease | None],
                   version_of: Callable[[str], tuple[str | None, str]], wait_s: float = 30.0) -> Round:
    """One pass: add every planned worker that is neither listed nor held out and whose version reads."""
    out = Round()
    listed = {w.spec.url for w in router.workers()}
    out.listed = len(listed)
    for pair in pairs:
        held = lease_of(pair.host)
        members: list[Member] = sorted(pair.members, key=lambda m: ROLE_ORDER.get(m.role, 3))
        for m in members:
            if m.url in listed:
                continue
            if held is not None and not held.in_gateway:
                out.held_out[m.url] = f"pair {pair.host} is out of the gateway: {held.describe()}"
                continue
            version, why = version_of(m.url)
            if version is None:
                out.waiting[m.url] = why
                continue
            label = cohort_label(version)
            try:
                router.queue_add(replace(m.spec(), pairing=label))
            except RouterError as e:
                out.waiting[m.url] = str(e)
                continue
            out.added[m.url] = label
    if out.added:  # queued jobs: confirmed in the listing before the round counts them
        try:
            router.wait_listed(list(out.added), wait_s)
        except RouterError as e:
            shown = {w.spec.url for w in router.workers()}
            for url in [u for u in out.added if u not in shown]:
                out.waiting[url] = str(e)
                del out.added[url]
    return out


def run(router: RouterClient, pairs: list[Pair], lease_of: Callable[[str], Lease | None],
        version_of: Callable[[str], tuple[str | None, str]], interval_s: float = 1.0,
        log: Callable[[str], None] = print, sleep: Callable[[float], None] = time.sleep,
        max_rounds: int | None = None) -> Round:
    """Rounds until every planned worker is listed or held out (or ``max_rounds``); each addition and each change
    of why a worker waits is logged once, not every round. A gateway that does not answer is waited for."""
    said: dict[str, str] = {}
    rounds = 0
    while True:
        rounds += 1
        try:
            r = register_round(router, pairs, lease_of, version_of)
        except RouterError as e:
            r = Round(waiting={"": str(e)})
        for url, label in r.added.items():
            log(f"registered {url} as {label}")
        for url, why in {**r.held_out, **r.waiting}.items():
            if said.get(url) != why:
                log(f"{'left to its lease holder' if url in r.held_out else 'waiting for'} {url or 'the gateway'}: "
                    f"{why}")
                said[url] = why
        if r.done or (max_rounds is not None and rounds >= max_rounds):
            if r.done:
                log(f"every planned worker is registered or held out ({r.listed + len(r.added)} listed, "
                    f"{len(r.held_out)} held out) after {rounds} round(s)")
            return r
        sleep(interval_s)


def _members(rows: list[list[str]]) -> list[Pair]:
    """``--member HOST ROLE URL BOOTSTRAP_PORT|-`` rows as pairs, in their order."""
    by_host: dict[str, list[Member]] = {}
    for host, role, url, bootstrap in rows:
        if role not in ROLE_ORDER:
            raise ValueError(f"--member {host} {role} {url}: the role is one of {', '.join(ROLE_ORDER)}")
        port = None if bootstrap == "-" else int(bootstrap)
        by_host.setdefault(host, []).append(Member(f"{host}:{role}", role, url.rstrip("/"), host, bootstrap_port=port))
    return [Pair(h, tuple(ms)) for h, ms in by_host.items()]


def _detach() -> bool:
    """Fork: the parent returns True (and exits: the unit's ExecStartPost is done at once), the child goes on in the
    unit's control group, so it is stopped with the gateway and started again with it."""
    return os.fork() > 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pdfleet.fleet.members", description=__doc__.split("\n")[0])
    parser.add_argument("--gateway", required=True, help="the gateway's URL")
    parser.add_argument("--member", nargs=4, action="append", default=[], metavar=("HOST", "ROLE", "URL", "BOOTSTRAP"),
                        help="a planned worker: its pair's host, role (prefill, decode, mono), URL and bootstrap "
                             "port (- for none); repeated")
    parser.add_argument("--lease-dir", type=Path, required=True, help="the pair leases' directory (pdfleet.lease)")
    parser.add_argument("--key-env", default="", help="the environment variable that holds the gateway's key")
    # a second: the verification play waits for each worker's /health, then its config gate wants it listed
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between rounds (1)")
    parser.add_argument("--rounds", type=int, default=None, help="stop after N rounds (default: until done)")
    parser.add_argument("--detach", action="store_true",
                        help="return at once and register in a child process (a unit's ExecStartPost)")
    args = parser.parse_args(argv)
    try:
        pairs = _members(args.member)
    except ValueError as e:
        parser.error(str(e))
    router = RouterClient(args.gateway, api_key=os.environ.get(args.key_env) or None if args.key_env else None)

    def lease_of(host: str) -> Lease | None:
        try:
            held = lease.read(host, args.lease_dir)
        except lease.LeaseError as e:  # unreadable: the pair is held out (never add what a holder took out)
            return Lease(host, "rollout", "unknown", f"an unreadable lease record ({e})", time.time(), None)
        return None if held is None or held.expired(time.time()) else held

    def say(msg: str) -> None:
        print(f"pdfleet-members: {msg}", flush=True)

    if args.detach and _detach():
        return 0
    say(f"registering {sum(len(p.members) for p in pairs)} planned worker(s) of {len(pairs)} pair(s) with "
        f"{args.gateway}, each under its own SGLang version's pairing protocol")
    result = run(router, pairs, lease_of, read_version, args.interval, say, max_rounds=args.rounds)
    return 0 if result.done else 1


if __name__ == "__main__":
    raise SystemExit(main())
