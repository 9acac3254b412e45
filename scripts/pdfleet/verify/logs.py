"""Where workers' logs come from, behind one interface, and check 5 (the logs) itself.

Sources:

* :class:`FileLogs` — local files (LocalPD, or any ``--log-file NAME=PATH``); the protocol marks each
  file's size when it starts and reads only what was written after.
* :class:`JournalDirLogs` — a directory of journal dumps collected by Ansible after the protocol
  (``<dir>/<host>/<unit>.log``, or ``<dir>/<unit>.log``), already limited to ``--since @<start>``.
* :class:`SSHJournalLogs` — journald over SSH for standalone runs against an inventory (fabric, reaching each
  host as ``pdfleet.inventory`` says): ``journalctl -u <unit> --since @<epoch> -o cat``.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pdfleet.inventory import InventorySource, load_inventory
from pdfleet.verify.result import INCONCLUSIVE, CheckResult
from pdfleet.verify.settings import Settings
from pdfleet.verify.signatures import LogScan, scan_text
from pdfleet.verify.targets import Worker


class LogUnavailable(Exception):
    """A worker's log could not be read; the message says which and why."""


class LogSource(Protocol):
    description: str

    def mark(self, workers: list[Worker]) -> None:
        """Called when the protocol starts: remember where 'since the start' begins."""

    def read(self, worker: Worker) -> str:
        """Everything the worker logged since the mark."""


@dataclass
class FileLogs:
    files: dict[str, Path]
    offsets: dict[str, int] = field(default_factory=dict)
    description: str = "local log files"

    def mark(self, workers: list[Worker]) -> None:
        for name, path in self.files.items():
            self.offsets[name] = path.stat().st_size if path.is_file() else 0

    def read(self, worker: Worker) -> str:
        path = self.files.get(worker.name)
        if path is None:
            raise LogUnavailable(f"{worker.name}: no --log-file given for it (have: {', '.join(self.files)})")
        try:
            with path.open("rb") as fh:
                fh.seek(self.offsets.get(worker.name, 0))
                return fh.read().decode(errors="replace")
        except OSError as e:
            raise LogUnavailable(f"{worker.name}: cannot read {path}: {e}") from e


@dataclass
class JournalDirLogs:
    directory: Path
    description: str = "journal dumps"

    def mark(self, workers: list[Worker]) -> None:
        """Nothing to do: the dumps were taken with --since the protocol start."""

    def read(self, worker: Worker) -> str:
        candidates = [self.directory / worker.host / f"{worker.name}.log", self.directory / f"{worker.name}.log"]
        for path in candidates:
            if path.is_file():
                return path.read_text(errors="replace")
        raise LogUnavailable(f"{worker.name}: no journal dump at {' or '.join(str(p) for p in candidates)}")


@dataclass
class SSHJournalLogs:
    """journald of each worker's unit on its host, over SSH (fabric), reached as the inventory says."""

    inventory: InventorySource
    since_epoch: float = 0.0
    description: str = "journald over SSH"
    _connections: dict[str, Any] = field(default_factory=dict)

    def mark(self, workers: list[Worker]) -> None:
        self.since_epoch = time.time()

    def _connection(self, host: str) -> Any:
        if host not in self._connections:
            from pdfleet.remote import fabric_connection

            self._connections[host] = fabric_connection(load_inventory(self.inventory).connection(host), 15)
        return self._connections[host]

    def read(self, worker: Worker) -> str:
        if not worker.host:
            raise LogUnavailable(f"{worker.name}: no inventory host to read its journal from")
        cmd = journal_command(worker.name, self.since_epoch)
        try:
            res = self._connection(worker.host).run(cmd, hide=True, warn=True, timeout=120)
        except Exception as e:  # fabric/paramiko raise many types; all mean the same here
            raise LogUnavailable(f"{worker.name}: journalctl over SSH on {worker.host} failed: {e}") from e
        if res.return_code != 0:
            raise LogUnavailable(f"{worker.name}: journalctl on {worker.host} exited {res.return_code}: "
                                 f"{res.stderr.strip()[:200]}")
        return str(res.stdout)


def journal_command(unit: str, since_epoch: float) -> str:
    return (f"journalctl -u {shlex.quote(unit)} --since @{int(since_epoch)} -o cat --no-pager")


def logs_check(workers: list[Worker], source: LogSource | None, s: Settings,
               metric_deltas: dict[str, dict[str, float]] | None = None) -> CheckResult:
    """Check 5: zero thread deaths / transfer errors (/ dropped frames), and proof that aborts happened.

    ``metric_deltas``: per worker, the increase of SGLang's abort counters over the protocol; they count
    as abort evidence alongside the log lines. Zero aborts => INCONCLUSIVE (the cascade proved nothing).
    """
    t0 = time.monotonic()
    from pdfleet.verify.metrics import TRANSFER_ABORT_COUNTERS

    total = LogScan()
    detail: dict[str, Any] = {}
    failures: list[str] = []
    unreadable: list[str] = []
    if source is None:
        return CheckResult("logs", INCONCLUSIVE, "no log source: thread deaths cannot be ruled out "
                           "(give --log-file, --journal-dir or an inventory with SSH access)",
                           failures=["no log source"])
    for w in workers:
        try:
            scan = scan_text(source.read(w))
        except LogUnavailable as e:
            unreadable.append(str(e))
            detail[w.name] = {"error": str(e)}
            continue
        total.add(scan)
        detail[w.name] = scan.to_dict()
        if scan.lines == 0:  # a worker that served the protocol's requests logs something: wrong unit or source?
            unreadable.append(f"{w.name}: its log since the protocol start is empty ({source.description})")
    metric_aborts = metric_transfer_aborts = 0.0
    for name, deltas in (metric_deltas or {}).items():
        metric_aborts += sum(deltas.values())
        metric_transfer_aborts += sum(v for k, v in deltas.items() if k in TRANSFER_ABORT_COUNTERS)
        detail.setdefault(name, {})["metric_deltas"] = deltas
    c = total.counts
    if c["thread_death"]:
        failures.append(f"{c['thread_death']} thread-death signature line(s) "
                        f"(e.g. {total.examples.get('thread_death', ['?'])[0]!r})")
    if c["transfer_error"]:
        failures.append(f"{c['transfer_error']} transfer-worker error line(s) "
                        f"(e.g. {total.examples.get('transfer_error', ['?'])[0]!r})")
    if c["dropped_frame"] and not s.allow_dropped_frames:
        failures.append(f"{c['dropped_frame']} dropped/foreign KV frame warning(s): the thread survived, but a "
                        f"message was lost (e.g. {total.examples.get('dropped_frame', ['?'])[0]!r})")
    aborts = max(c["abort"], int(metric_aborts))
    transfer_aborts = max(total.transfer_abort, int(metric_transfer_aborts))
    measured = {"thread_death": c["thread_death"], "transfer_error": c["transfer_error"],
                "dropped_frame": c["dropped_frame"], "abort_events": aborts, "abort_log_lines": c["abort"],
                "abort_metric_delta": int(metric_aborts), "transfer_aborts": transfer_aborts,
                "uncaught_tracebacks": total.uncaught_tracebacks, "lines_scanned": total.lines,
                "source": source.description}
    thresholds = {"thread_death": 0, "transfer_error": 0,
                  "dropped_frame": "counted only" if s.allow_dropped_frames else 0,
                  "abort_events_min": s.min_abort_events, "transfer_aborts_min": s.min_transfer_aborts}
    # A monolithic (non-PD) cluster has no KV transfer to abort: only the PD rule is waived there.
    is_pd = any(w.role in ("prefill", "decode") for w in workers)
    status, summary = _logs_status(failures, unreadable, aborts, transfer_aborts if is_pd else None, s)
    if unreadable:
        failures += unreadable
    return CheckResult("logs", status, summary, measured, thresholds, failures, detail, time.monotonic() - t0)


def _logs_status(failures: list[str], unreadable: list[str], aborts: int, transfer_aborts: int | None,
                 s: Settings) -> tuple[str, str]:
    if failures:
        return "fail", "; ".join(failures)
    gap = (f"{len(unreadable)} worker log(s) unreadable or empty: cannot rule out a thread death"
           if unreadable else "")
    if aborts < s.min_abort_events:
        return INCONCLUSIVE, (f"{aborts} abort event(s) (need >= {s.min_abort_events}): the cascade did not "
                              "exercise the abort path, so a clean log proves nothing" + (f"; {gap}" if gap else ""))
    if gap:
        return INCONCLUSIVE, gap
    if transfer_aborts is None:
        return "pass", f"clean: 0 thread deaths, 0 transfer errors; {aborts} aborts (no PD workers)"
    if transfer_aborts < s.min_transfer_aborts:
        return INCONCLUSIVE, (f"{aborts} abort(s) but {transfer_aborts} hit a pending KV transfer (need >= "
                              f"{s.min_transfer_aborts}): no ABORT reached the prefill; use --kill-mode spread "
                              "or longer prompts")
    return "pass", f"clean: 0 thread deaths, 0 transfer errors; {aborts} aborts ({transfer_aborts} mid-transfer)"
