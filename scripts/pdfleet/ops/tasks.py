"""The ops commands' work, one function per command, over injectable runners so they can be tested."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pdfleet import fleet
from pdfleet.fleet.http import HTTPError, call
from pdfleet.lease import Lease
from pdfleet.planner import Plan
from pdfleet.privilege import Runner
from pdfleet.remote import RemoteError
from pdfleet.versions import RECORD_NAME
from pdfleet.watchdog.statefile import DEFAULT_STATE_FILE

OK, FAILED, UNREACHABLE = 0, 1, 2


@dataclass
class HostLine:
    host: str
    code: int  # OK | FAILED | UNREACHABLE
    text: str

    def render(self) -> str:
        word = {OK: "ok", FAILED: "FAIL", UNREACHABLE: "UNREACHABLE"}[self.code]
        return f"{self.host}: {word}: {self.text}"

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "code": self.code, "text": self.text}


def exit_code(lines: Sequence[HostLine]) -> int:
    return max((line.code for line in lines), default=OK)


def parallel(hosts: Sequence[str], work: Callable[[str], HostLine]) -> list[HostLine]:
    """``work`` on every host at once; a host that cannot be reached is a line of its own, never a crash."""

    def guarded(host: str) -> HostLine:
        try:
            return work(host)
        except RemoteError as e:
            return HostLine(host, UNREACHABLE, str(e))
        except (fleet.RouterError, fleet.FleetError) as e:
            return HostLine(host, FAILED, str(e))

    with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as ex:
        return list(ex.map(guarded, hosts))


def units_of(plan: Plan, host: str) -> list[str]:
    return [u.name for u in plan.hosts.get(host, [])]


def gateway_version_command(plan: Plan) -> str:
    """Prints the router package's installed version from the gateway's own venv (nothing when it is missing)."""
    python = f"{plan.sglang['router_venv']}/bin/python"
    code = f"import importlib.metadata as m; print(m.version({str(plan.sglang['router_package'])!r}))"
    return f"{shlex.quote(python)} -c {shlex.quote(code)} 2>/dev/null || true"


def status(plan: Plan, run: Runner, router_states: Mapping[str, str] | None, last_verify: str,
           leases: Mapping[str, Lease] | None = None) -> list[HostLine]:
    """Per host: units active, SGLang version and patch (the sglang role's record), each worker's gateway state
    (``router_states``: URL -> smg's ready/draining/…; None: the gateway did not answer), the pair's lease
    (pdfleet.lease; None: unknown), on the router host the gateway's package and installed version and the
    watchdog's view, and the last verification."""
    venv = plan.sglang["venv"]
    pairs = fleet.pairs_from_plan(plan)
    gateway = plan.gateway_host()
    package, pinned = str(plan.sglang["router_package"]), str(plan.sglang["router_version"])

    def one(host: str) -> HostLine:
        units = units_of(plan, host)
        cmd = (f"systemctl is-active {' '.join(shlex.quote(u) for u in units)}; echo '--'; "
               f"cat {shlex.quote(venv + '/' + RECORD_NAME)} 2>/dev/null; echo; echo '--'; "
               f"cat {shlex.quote(str(DEFAULT_STATE_FILE))} 2>/dev/null || true; echo; echo '--'; "
               + (gateway_version_command(plan) if host == gateway else "true"))
        _, out, _ = run(host, cmd)
        active_txt, _, rest = out.partition("--\n")
        record_txt, _, rest = rest.partition("--\n")
        wd_txt, _, gw_txt = rest.partition("--\n")
        states = dict(zip(units, active_txt.split(), strict=False))
        problems = [f"{u} {s}" for u, s in states.items() if s != "active"]
        parts = [f"units {len(states) - len(problems)}/{len(units)} active"]
        try:
            rec = json.loads(record_txt.strip() or "{}")
            parts.append(f"sglang {rec.get('version', '?')} patched={rec.get('patched', '?')}")
        except ValueError:
            parts.append("sglang record unreadable")
        if host == gateway:
            installed = gw_txt.strip()
            parts.append(f"gateway {package} {installed or 'not installed'}")
            if installed != pinned:
                problems.append(f"gateway {package} {installed or 'missing'}, the plan pins {pinned}")
        if host in pairs:
            if router_states is None:
                parts.append("router membership unknown (router unreachable)")
            else:
                urls = pairs[host].urls
                inside = [u for u in urls if u in router_states]
                seen = [router_states.get(u, "absent") for u in urls]
                parts.append(f"in router {len(inside)}/{len(urls)} ({', '.join(seen)})")
                if len(inside) != len(urls):
                    problems.append("drained (not every worker is in the router)")
                elif any(s != "ready" for s in seen):
                    problems.append(f"not every worker is ready in the gateway ({', '.join(seen)})")
            if leases is None:
                parts.append("lease unknown")
            elif host in leases:
                parts.append(f"leased to {leases[host].describe()}")
        try:
            wd = json.loads(wd_txt.strip()) if wd_txt.strip() else None
        except ValueError:
            wd = None
        if wd:
            bad = {h: p["state"] for h, p in wd["pairs"].items() if p["state"] != "OK"}
            parts.append(f"watchdog: {', '.join(f'{h} {s}' for h, s in bad.items()) or 'all pairs OK'}")
            if bad:
                problems.append(f"watchdog says {bad}")
        parts.append(f"last verification {last_verify}")
        code = FAILED if problems else OK
        return HostLine(host, code, "; ".join(([f"{', '.join(problems)}"] if problems else []) + parts))

    return parallel(list(plan.hosts), one)


def logs(plan: Plan, run: Runner, unit: str, since: str) -> list[tuple[HostLine, str]]:
    hosts = [h for h in plan.hosts if unit in units_of(plan, h)]
    texts: dict[str, str] = {}

    def one(host: str) -> HostLine:
        rc, out, err = run(host, f"journalctl -u {shlex.quote(unit)} --since {shlex.quote(since)} -o short-iso "
                                 "--no-pager")
        texts[host] = out
        if rc != 0:
            return HostLine(host, FAILED, f"journalctl exited {rc}: {err.strip()[:200]}")
        return HostLine(host, OK, f"{len(out.splitlines())} line(s) of {unit} since {since}")

    return [(line, texts.get(line.host, "")) for line in parallel(hosts, one)]


def no_answer(url: str, timeout_s: float = 5.0) -> str | None:
    """Why ``url`` gives no HTTP answer at all (refused, no route, timed out), or None when it answers."""
    try:
        call("GET", url + "/health", timeout_s=timeout_s)
    except HTTPError as e:
        return str(e)
    return None


def canary(pairs: Mapping[str, fleet.Pair], model: str, deadline_s: float,
           silent: Callable[[str], str | None] = no_answer) -> list[HostLine]:
    """A canary through every pair. A failed canary is a failed check (1), unless a member of the pair gives no
    HTTP answer at all: then its host is unreachable (2), as the watchdog calls such a pair DEAD."""

    def one(host: str) -> HostLine:
        r = fleet.pair_canary(pairs[host], model, deadline_s=deadline_s)
        if r.ok:
            return HostLine(host, OK, f"canary {r.latency_s:.2f} s, {r.completion_tokens} token(s)")
        down = [f"{m.name} ({why})" for m in pairs[host].members if (why := silent(m.url)) is not None]
        if down:
            return HostLine(host, UNREACHABLE, f"no HTTP answer from {'; '.join(down)}: is the host up?")
        return HostLine(host, FAILED, f"canary failed after {r.latency_s:.1f} s: {r.problem}")

    return parallel(list(pairs), one)


def latest_verification(reports: Path) -> str:
    files = sorted(reports.glob("verify-*.json"), key=lambda p: p.stat().st_mtime) if reports.is_dir() else []
    if not files:
        return "none found"
    try:
        doc = json.loads(files[-1].read_text())
    except (OSError, ValueError):
        return f"{files[-1].name} unreadable"
    return f"{doc.get('verdict', '?')} ({files[-1].name})"
