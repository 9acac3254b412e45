"""The real remediation steps: ``pdfleet.fleet``'s router client, isolated gate and re-add, and a unit restart
on the pair's host (locally through ``sudo -n systemctl``, or over SSH through ``pdfleet.remote``)."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pdfleet import fleet
from pdfleet.errors import PdfleetError
from pdfleet.fleet.http import HTTPError, call
from pdfleet.privilege import AccessError, privileged, restart_prefix
from pdfleet.remote import RemoteError
from pdfleet.watchdog.journal import JournalUnavailable, JournalWatch, Runner

# The checks of the gate after a restart: config, deep liveness and recovery through a private router. No
# abort cascade: the pair was just restarted because it wedged, and on a stack without the fix a cascade
# would wedge it again; the journal scan is the watchdog's own (below), on the new invocation only.
GATE_SKIP = ("cascade", "logs", "bench")


class RestartError(PdfleetError):
    """A unit could not be restarted or did not come back."""


def restart_commands(unit: str) -> list[str]:
    """Kill, then restart: the pair is out of the router and its requests are stuck for good, and SGLang's
    SIGTERM handler would wait for them with no timeout (operations-facts.md)."""
    u = shlex.quote(unit)
    return [f"systemctl --no-ask-password kill --signal=SIGKILL {u}", f"systemctl --no-ask-password restart {u}"]


def local_shell(host: str, command: str) -> tuple[int, str, str]:
    """Run a systemctl command on this host as this (unprivileged) user: systemd asks polkit, and the role's
    polkit rule allows the watchdog's user exactly kill and restart of this host's worker units. No sudo: the
    unit keeps NoNewPrivileges and the rest of its sandbox."""
    del host
    proc = subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=120, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def privileged_ssh(ssh: Runner) -> Runner:
    """``ssh`` for unit restarts on other hosts: as root, or through `sudo -n` for an unprivileged SSH user (the
    production operator; plain, systemctl asks for interactive authentication and fails), as `pdfleet ops restart`
    runs them; each host asked once. A host where the user has neither: RestartError naming it."""
    prefixes: dict[str, str] = {}
    wrapped = privileged(ssh, prefixes)

    def run(host: str, command: str) -> tuple[int, str, str]:
        if host not in prefixes:
            try:
                prefixes[host] = restart_prefix(ssh, host)
            except (AccessError, RemoteError) as e:
                raise RestartError(f"cannot restart units on {host}: {e}") from None
        return wrapped(host, command)

    return run


@dataclass
class FleetActions:
    router: fleet.RouterClient
    model: str
    sglang_version: str | None
    shell: Runner  # (host, command) -> (rc, out, err) for unit restarts
    journal_runner: Runner | None
    router_python: str = sys.executable
    startup_timeout_s: float = 900.0
    gate_overrides: dict[str, object] = field(default_factory=dict)
    router_module: str = fleet.DEFAULT_ROUTER_MODULE
    log: Callable[[str], None] = print

    def router_members(self) -> set[str]:
        return {w.spec.url for w in self.router.workers()}

    def remove(self, pair: fleet.Pair) -> list[fleet.WorkerSpec]:
        return fleet.remove_pair(self.router, pair)

    def restart(self, pair: fleet.Pair) -> None:
        for m in pair.members:
            for cmd in restart_commands(m.name):
                rc, _, err = self.shell(m.host, cmd)
                if rc != 0 and " kill " not in cmd:  # kill fails harmlessly on a unit that is not running
                    raise RestartError(f"{m.name} on {m.host}: `{cmd}` exited {rc}: {err.strip()[:200]}")
        deadline = time.monotonic() + self.startup_timeout_s
        for m in pair.members:
            while True:
                try:
                    if call("GET", m.url + "/health", timeout_s=5.0)[0] == 200:
                        break
                except HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RestartError(f"{m.name} on {m.host}: /health not 200 within {self.startup_timeout_s:g} s "
                                       f"after the restart (journalctl -u {m.name})")
                time.sleep(1.0)

    def gate(self, pair: fleet.Pair) -> tuple[bool, str]:
        # The cascade, logs and benchmark are left out on purpose (a cascade would wedge an unfixed stack again;
        # the journal is scanned below): the protocol reports that evidence as missing, which is accepted here.
        settings = fleet.gate_settings(skip=GATE_SKIP, allow_incomplete=True, **self.gate_overrides)
        result = fleet.isolated_gate(pair, settings, None, self.model, self.sglang_version,
                                     router_python=self.router_python, router_module=self.router_module)
        if not result.ok:
            return False, result.describe()
        if self.journal_runner is None:
            return True, result.describe() + " (journal not scanned: no journal source for this host)"
        watch = JournalWatch(self.journal_runner)
        for m in pair.members:
            try:
                bad = watch.scan(m.host, m.name).alarming()
            except JournalUnavailable as e:
                return False, f"{pair.host}: journal scan after the restart: {e}"
            if bad:
                return False, f"{pair.host}: {m.name} logged {bad} since its restart"
        return True, result.describe()

    def readd(self, pair: fleet.Pair, specs: list[fleet.WorkerSpec] | None) -> tuple[bool, str]:
        result = fleet.readd(self.router, pair, specs, self.model)
        return result.confirmed, "; ".join(result.problems) or f"confirmed after {result.probes} probe(s)"
