"""What a converge removes: the pdfleet units a host has that the plan no longer names for it.

Every unit pdfleet renders carries ``X-Pdfleet-Kind/Role/Url`` lines in its ``[Unit]`` section
(templates/*.service.j2; systemd ignores ``X-`` keys). A ``pdfleet-*.service`` in /etc/systemd/system with
those lines whose name the plan does not give that host is *stale*: the units role drains it (a worker),
stops, disables and deletes it and its own environment file before the planned units start. One named
``pdfleet-*`` without them was not made by pdfleet: it is *foreign*, never touched, and reported.

The same parser serves the three readers: the units role (the ``pdfleet_units_prune`` filter over the
files it slurped), ``pdfleet plan --removals`` (over SSH, :data:`SCAN_COMMAND`) and conformance.

A unit another role installs beside a planned unit (the watchdog beside the router: ansible/playbooks/
watchdog.yml) says so with ``X-Pdfleet-Beside=<unit>``: it is planned wherever that unit is planned, and
stale, like the rest, on a host where it is not (the router moved).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pdfleet.inventory import Inventory

UNIT_DIR = "/etc/systemd/system"
UNIT_PREFIX = "pdfleet-"
UNIT_GLOB = f"{UNIT_PREFIX}*.service"
MARKER_KEYS = ("X-Pdfleet-Kind", "X-Pdfleet-Role", "X-Pdfleet-Url", "X-Pdfleet-Beside")
_SCAN_SEPARATOR = "@@pdfleet-unit"
# One SSH round trip: every pdfleet-*.service file of the unit directory, each after a separator line
# that carries its path and `systemctl is-active` state. Read-only.
SCAN_COMMAND = (
    f"for f in {UNIT_DIR}/{UNIT_GLOB}; do [ -e \"$f\" ] || continue; "
    f"echo \"{_SCAN_SEPARATOR} $f $(systemctl is-active \"${{f##*/}}\" 2>/dev/null)\"; cat \"$f\"; echo; done"
)


@dataclass(frozen=True)
class InstalledUnit:
    """A ``pdfleet-*.service`` file found on a host."""

    name: str  # without .service
    path: str
    marked: bool  # carries pdfleet's X-Pdfleet-* marker: pdfleet created it
    kind: str = ""  # worker | router (marked units only)
    role: str = ""  # prefill | decode | mono | router
    url: str = ""  # where it serves (a worker's URL as the router lists it)
    env_files: tuple[str, ...] = ()  # its own environment file(s): <config_dir>/<name>.env
    active: str = ""  # systemctl is-active, when the reader asked
    beside: str = ""  # the planned unit it belongs beside (X-Pdfleet-Beside), e.g. the watchdog's router


@dataclass(frozen=True)
class HostRemovals:
    """What a converge does to one host's unplanned ``pdfleet-*`` units."""

    host: str
    stale: tuple[InstalledUnit, ...] = ()  # pdfleet's, not planned here: drained, stopped, removed
    foreign: tuple[InstalledUnit, ...] = ()  # not pdfleet's: left alone, reported
    planned: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, object]:
        def plain(u: InstalledUnit) -> dict[str, object]:
            return dict(asdict(u), env_files=list(u.env_files))

        return {"host": self.host, "planned": list(self.planned), "stale": [plain(u) for u in self.stale],
                "foreign": [plain(u) for u in self.foreign]}

    def warnings(self) -> list[str]:
        return [foreign_warning(self.host, u) for u in self.foreign]


def foreign_warning(host: str, unit: InstalledUnit) -> str:
    return (f"{host}: {unit.path} is named like a pdfleet unit but pdfleet did not create it (no X-Pdfleet-Kind "
            f"line); left alone. Rename it outside the {UNIT_PREFIX}* convention, or remove it by hand.")


def unit_name(path: str) -> str:
    name = PurePosixPath(path).name
    return name[: -len(".service")] if name.endswith(".service") else name


def parse_unit(path: str, text: str, active: str = "") -> InstalledUnit:
    """Read pdfleet's marker and the unit's own environment files from a unit file's text."""
    name = unit_name(path)
    values: dict[str, str] = {}
    env_files: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        key, sep, value = line.partition("=")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key in MARKER_KEYS:
            values[key] = value
        elif key == "EnvironmentFile":
            env = value.lstrip("-")
            # only the unit's own file: secrets.env and anything else are shared or not ours to delete
            if PurePosixPath(env).name == f"{name}.env":
                env_files.append(env)
    marked = bool(values.get("X-Pdfleet-Kind"))
    return InstalledUnit(name=name, path=path, marked=marked, kind=values.get("X-Pdfleet-Kind", ""),
                         role=values.get("X-Pdfleet-Role", ""), url=values.get("X-Pdfleet-Url", "").rstrip("/"),
                         env_files=tuple(env_files) if marked else (), active=active,
                         beside=unit_name(values.get("X-Pdfleet-Beside", "")) if marked else "")


def parse_scan(stdout: str) -> list[InstalledUnit]:
    """Units from the output of :data:`SCAN_COMMAND`."""
    out: list[InstalledUnit] = []
    path, active = "", ""
    lines: list[str] = []
    for line in [*stdout.splitlines(), f"{_SCAN_SEPARATOR} "]:
        if line.startswith(_SCAN_SEPARATOR + " "):
            if path:
                out.append(parse_unit(path, "\n".join(lines), active))
            words = line.split()
            path, active, lines = (words[1] if len(words) > 1 else ""), (words[2] if len(words) > 2 else ""), []
        else:
            lines.append(line)
    return out


def with_companions(installed: Iterable[InstalledUnit], planned: Iterable[str]) -> set[str]:
    """The planned unit names and pdfleet's units that say they belong beside one of them (X-Pdfleet-Beside)."""
    names = set(planned)
    return names | {u.name for u in installed if u.marked and u.beside and u.beside in names}


def removals(host: str, installed: Iterable[InstalledUnit], planned: Iterable[str]) -> HostRemovals:
    """Sort a host's unplanned pdfleet-* units into stale (ours) and foreign (not ours)."""
    installed = list(installed)
    names = tuple(sorted(with_companions(installed, planned)))
    unplanned = sorted((u for u in installed if u.name.startswith(UNIT_PREFIX) and u.name not in names),
                       key=lambda u: u.name)
    # Workers before the router: a stale router goes last, so it keeps serving while its workers drain.
    stale = tuple(sorted((u for u in unplanned if u.marked), key=lambda u: (u.kind == "router", u.name)))
    return HostRemovals(host, stale, tuple(u for u in unplanned if not u.marked), names)


def removals_from_slurp(host: str, slurped: Iterable[Mapping[str, object]], planned: Iterable[str]) -> HostRemovals:
    """The units role's view: ``ansible.builtin.slurp`` results (base64 ``content``, ``source``) of its files."""
    import base64

    units = []
    for result in slurped:
        if result.get("skipped") or "content" not in result:
            continue
        text = base64.b64decode(str(result["content"])).decode("utf-8", errors="replace")
        units.append(parse_unit(str(result.get("source", "")), text))
    return removals(host, units, planned)


def active_unplanned(host: str, active_names: Iterable[str], installed: Iterable[InstalledUnit],
                     planned: Iterable[str]) -> list[str]:
    """Conformance: one problem per running ``pdfleet-*`` unit the plan does not name for ``host``."""
    installed = list(installed)
    by_name = {u.name: u for u in installed}
    wanted = with_companions(installed, planned)
    out = []
    for name in sorted({n[: -len(".service")] if n.endswith(".service") else n for n in active_names}):
        if not name.startswith(UNIT_PREFIX) or name in wanted:
            continue
        unit = by_name.get(name)
        if unit is not None and unit.marked:
            fix = "pdfleet created it: run site.yml to drain and remove it"
        else:
            fix = "pdfleet did not create it: stop it, or rename it outside the pdfleet-* convention"
        out.append(f"{host}: {name}.service is running but the plan does not name it for this host ({fix})")
    return out



def read_host(inventory: Inventory, host: str, planned: Iterable[str]) -> HostRemovals:
    """One host's removals, read over SSH (RemoteError when it cannot be reached)."""
    from pdfleet.remote import RemoteError, connection_for, run

    rc, stdout, stderr = run(connection_for(inventory, host), SCAN_COMMAND)
    if rc != 0:
        raise RemoteError(f"host {host}: listing {UNIT_DIR}/{UNIT_GLOB} failed (rc {rc}): {stderr.strip()[:200]}")
    return removals(host, parse_scan(stdout), planned)


def removal_rows(found: Iterable[HostRemovals]) -> list[list[str]]:
    """Table rows for people: one per unit a converge removes or leaves alone."""
    rows = []
    for r in found:
        rows += [[r.host, u.name, "remove (drain, stop, delete)", u.active or "?", u.url or "-"] for u in r.stale]
        rows += [[r.host, u.name, "leave alone: not created by pdfleet", u.active or "?", "-"] for u in r.foreign]
    return rows


# ---------------------------------------------------------------- drain, before a stale worker stops


def drain_stale(router_url: str, workers: Iterable[tuple[str, str]], keep_urls: Iterable[str],
                timeout_s: float, api_key: str | None = None) -> dict[str, object]:
    """Take each stale worker ``(url, role)`` out of the router and wait until it says idle (pdfleet.fleet's
    drain, the rollout's path), so that stopping it fails no request the router could send elsewhere.

    A URL the plan gives to a successor (an instance renamed on the same port) stays in the router: removing
    it would leave the router without it after the successor starts; stopping the old server then lets
    SGLang finish its in-flight requests (SIGTERM waits for them). A worker that does not answer serves
    nothing and is not waited for. One that is still busy after ``timeout_s`` is reported and stopped anyway
    (its unit's TimeoutStopSec bounds the rest).
    """
    from pdfleet import fleet
    from pdfleet.fleet.http import HTTPError, call

    router = fleet.RouterClient(router_url, api_key) if router_url else None
    keep = {u.rstrip("/") for u in keep_urls}
    report: list[dict[str, object]] = []
    for url, role in workers:
        url = url.rstrip("/")
        entry: dict[str, object] = {"url": url, "role": role, "removed_from_router": False, "idle": None,
                                    "note": ""}
        report.append(entry)
        if url in keep:
            entry["note"] = "the plan gives this URL to another unit: left in the router"
            continue
        if router is not None:
            try:
                entry["removed_from_router"] = router.remove(url) is not None
            except fleet.RouterError as e:
                entry["note"] = f"not removed from the router ({e})"
        try:
            call("GET", url + "/health", timeout_s=5.0)
        except HTTPError:
            entry["note"] = (str(entry["note"]) + "; " if entry["note"] else "") + "not answering: serves nothing"
            continue
        idle = fleet.wait_idle([(url, "mono" if role not in ("prefill", "decode") else role)], timeout_s)
        entry.update(idle=idle.idle, waited_s=round(idle.waited_s, 1))
        if not idle.idle:
            entry["note"] = f"still busy after {timeout_s:g} s ({idle.describe()}); stopped anyway"
    return {"router": router_url, "workers": report, "summary": [_drain_line(e) for e in report],
            "changed": any(bool(e["removed_from_router"]) for e in report)}


def _drain_line(e: dict[str, object]) -> str:
    left = "left the router" if e["removed_from_router"] else "was not in the router"
    idle = f"; idle after {e['waited_s']} s" if e.get("idle") else ""
    note = f"; {e['note']}" if e["note"] else ""
    return f"{e['url']} ({e['role']}): {left}{idle}{note}"


def main(argv: list[str] | None = None) -> int:
    """``python -m pdfleet.prune drain < request.json``: the units role's drain step.

    The request: ``{"router": URL, "timeout_s": S, "workers": [{"url": .., "role": ..}], "keep": [URL, ..]}``
    (the stale workers of one host, and the URLs the plan still gives that host), and ``"api_key"`` when the
    router has one (else ``$PDFLEET_ROUTER_API_KEY``; standard input, never the command line). Prints the JSON
    report (without the key).
    Exit 0 when it ran, 2 for a bad request.
    """
    import argparse
    import json
    import sys

    from pdfleet.routerkey import router_key

    p = argparse.ArgumentParser(prog="python -m pdfleet.prune")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("drain", help="take stale workers out of the router and wait until they are idle (JSON on stdin)")
    p.parse_args(argv)
    try:
        req = json.loads(sys.stdin.read())
        workers = [(str(w["url"]), str(w["role"])) for w in req.get("workers", [])]
        router, keep, timeout_s = str(req.get("router", "")), [str(u) for u in req.get("keep", [])], \
            float(req.get("timeout_s", 120))
        api_key = str(req.get("api_key") or "") or router_key()
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        print(f"pdfleet.prune drain: bad request on stdin ({e}); expected "
              '{"router": URL, "timeout_s": S, "workers": [{"url": URL, "role": ROLE}], "keep": [URL]}',
              file=sys.stderr)
        return 2
    print(json.dumps(drain_stale(router, workers, keep, timeout_s, api_key)))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
