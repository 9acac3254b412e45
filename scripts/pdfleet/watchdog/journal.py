"""The thread-death and transfer-error signatures in a worker unit's journal since the unit started.

"Since the unit started" is the unit's current invocation (``systemctl show -p InvocationID``; journald tags
every line the service logs with ``_SYSTEMD_INVOCATION_ID``): a restart starts a clean count. Each round reads
only what was logged after the previous round's cursor, and classifies it with the verification's own
signature list (``pdfleet.verify.signatures.scan_text``: one list for both).

Where the journal is read (the honest part): the deployed watchdog runs unprivileged on the router host and
reads the *local* journal only (its user is in ``systemd-journal``); workers on other hosts are watched through
their canary and metrics alone, and their journal is reported as not scanned. Run from the control machine
with an inventory (``-i``), it reads every host's journal over SSH through ``pdfleet.remote``.
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass, field

from pdfleet.privilege import Runner
from pdfleet.verify.signatures import scan_text

# Categories that make a pair DEGRADED (the protocol's "must be 0" ones; dropped frames are the patched code
# surviving a foreign frame by design, counted but not alarming here).
ALARMING = ("thread_death", "transfer_error")
CURSOR_PREFIX = "-- cursor: "
INVOCATION_PREFIX = "pdfleet-invocation: "



class JournalUnavailable(Exception):
    """The journal of a unit could not be read; the message says where and why."""


def journal_command(unit: str, cursor: str | None) -> str:
    """One shell command: the unit's invocation id, then its lines since ``cursor`` (with the new cursor)."""
    u = shlex.quote(unit)
    after = f" --after-cursor {shlex.quote(cursor)}" if cursor else ""
    return (f"inv=$(systemctl show -p InvocationID --value {u}) && echo \"{INVOCATION_PREFIX}$inv\" && "
            f"if [ -n \"$inv\" ]; then journalctl _SYSTEMD_INVOCATION_ID=\"$inv\" -o cat --no-pager "
            f"--show-cursor{after}; fi")


def local_runner(host: str, command: str) -> tuple[int, str, str]:
    del host
    proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60, check=False)
    return proc.returncode, proc.stdout, proc.stderr


@dataclass
class UnitJournal:
    """Counts for one unit's current invocation, kept across rounds."""

    invocation: str = ""
    cursor: str | None = None
    counts: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)

    def alarming(self) -> dict[str, int]:
        return {k: v for k, v in self.counts.items() if k in ALARMING and v}


@dataclass
class JournalWatch:
    """Scans units' journals incrementally; ``runner`` runs a shell command on a host (local or SSH)."""

    runner: Runner
    units: dict[tuple[str, str], UnitJournal] = field(default_factory=dict)

    def scan(self, host: str, unit: str) -> UnitJournal:
        key = (host, unit)
        state = self.units.setdefault(key, UnitJournal())
        rc, out, err = self.runner(host, journal_command(unit, state.cursor))
        if rc != 0:
            raise JournalUnavailable(f"{unit} on {host}: reading its journal exited {rc}: {err.strip()[:200]}")
        lines = out.splitlines()
        if not lines or not lines[0].startswith(INVOCATION_PREFIX):
            raise JournalUnavailable(f"{unit} on {host}: unexpected answer {out[:200]!r}")
        invocation = lines[0][len(INVOCATION_PREFIX):].strip()
        if invocation != state.invocation:  # (re)started: a clean count, and the cursor of the old run is moot
            if state.invocation and state.cursor:
                self.units[key] = state = UnitJournal()
                return self.scan(host, unit)
            state.invocation, state.counts, state.examples = invocation, {}, []
        body = lines[1:]
        if body and body[-1].startswith(CURSOR_PREFIX):
            state.cursor = body.pop()[len(CURSOR_PREFIX):].strip()
        found = scan_text("\n".join(body))
        for k, v in found.counts.items():
            state.counts[k] = state.counts.get(k, 0) + v
        for k in ALARMING:
            state.examples.extend(found.examples.get(k, [])[: 3 - len(state.examples)])
        return state
