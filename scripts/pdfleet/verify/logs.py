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

import math
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pdfleet.inventory import HostConnection, InventorySource, load_inventory
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

    def read_before(self, worker: Worker) -> str:
        """What the worker logged between its unit's (process's) last start and the mark."""


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

    def read_before(self, worker: Worker) -> str:
        """The file up to the mark (a LocalPD log begins when its process starts)."""
        path = self.files.get(worker.name)
        if path is None or not path.is_file():
            return ""
        try:
            with path.open("rb") as fh:
                return fh.read(self.offsets.get(worker.name, 0)).decode(errors="replace")
        except OSError as e:
            raise LogUnavailable(f"{worker.name}: cannot read {path}: {e}") from e


BEFORE_SUFFIX = ".before.log"  # a journal dump of the unit's last start up to the protocol start


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

    def read_before(self, worker: Worker) -> str:
        name = worker.name + BEFORE_SUFFIX
        candidates = [self.directory / worker.host / name, self.directory / name]
        for path in candidates:
            if path.is_file():
                return path.read_text(errors="replace")
        raise LogUnavailable(f"{worker.name}: no dump of its journal since the unit's last start at "
                             f"{' or '.join(str(p) for p in candidates)}")


@dataclass
class SSHJournalLogs:
    """journald of each worker's unit on its host, over SSH (fabric), reached as the inventory says
    (``hosts``: connection settings already read, e.g. by the play's pdfleet_connections filter)."""

    inventory: InventorySource
    since_epoch: float = 0.0
    description: str = "journald over SSH"
    hosts: dict[str, HostConnection] = field(default_factory=dict)
    _connections: dict[str, Any] = field(default_factory=dict)

    def mark(self, workers: list[Worker]) -> None:
        self.since_epoch = time.time()

    def _connection(self, host: str) -> Any:
        if host not in self._connections:
            from pdfleet.remote import fabric_connection

            conn = self.hosts.get(host) or load_inventory(self.inventory).connection(host)
            self._connections[host] = fabric_connection(conn, 15)
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

    def read_before(self, worker: Worker) -> str:
        if not worker.host:
            raise LogUnavailable(f"{worker.name}: no inventory host to read its journal from")
        cmd = journal_before_command(worker.name, self.since_epoch)
        try:
            res = self._connection(worker.host).run(cmd, hide=True, warn=True, timeout=120)
        except Exception as e:  # fabric/paramiko raise many types; all mean the same here
            raise LogUnavailable(f"{worker.name}: journalctl over SSH on {worker.host} failed: {e}") from e
        if res.return_code != 0:
            raise LogUnavailable(f"{worker.name}: journalctl (since the unit's last start) on {worker.host} "
                                 f"exited {res.return_code}: {res.stderr.strip()[:200]}")
        return str(res.stdout)


def journal_before_command(unit: str, until_epoch: float) -> str:
    """The unit's journal from its current invocation (last start) up to ``until_epoch``, with times."""
    q = shlex.quote(unit)
    return (f"id=$(systemctl show -p InvocationID --value {q}) && test -n \"$id\" && "
            f"journalctl _SYSTEMD_INVOCATION_ID=$id --until @{int(until_epoch)} -o short-iso --no-pager")


def journal_command(unit: str, since_epoch: float) -> str:
    return (f"journalctl -u {shlex.quote(unit)} --since @{int(since_epoch)} -o cat --no-pager")


def abort_floor(s: Settings, killed_waiting: int | None) -> int:
    """The handled ABORTs a PD run needs: ``min_abort_events``, and at least ``min_abort_share`` of the sessions
    the cascade killed before their first token (``killed_waiting``; None when the cascade did not report it).
    ``--min-abort-events 0`` asks for no evidence (the run is then incomplete, see report.py): no share either."""
    if s.min_abort_events == 0:
        return 0
    share = math.ceil(s.min_abort_share * killed_waiting - 1e-9) if killed_waiting else 0
    return max(s.min_abort_events, share)


def logs_check(workers: list[Worker], source: LogSource | None, s: Settings,
               metric_deltas: dict[str, dict[str, float]] | None = None,
               version: str | None = None, killed_waiting: int | None = None) -> CheckResult:
    """Check 5: zero thread deaths / transfer errors (/ dropped frames), and proof that aborts happened.

    Thread deaths count from each worker's last start, not only from the protocol start: a thread that died
    before the run (a wedge that predates it) fails the check and is named with its time. Abort evidence is
    only what the prefill prints after handling a decode's ABORT (see :mod:`pdfleet.verify.signatures`,
    per ``version``); ``metric_deltas`` (SGLang's generic failure counters) are reported, never counted as
    evidence: they also rise on the prefill's own aborts and on timeouts. Less evidence than
    :func:`abort_floor` (``killed_waiting``: sessions the cascade killed before their first token) => INCONCLUSIVE.
    """
    t0 = time.monotonic()
    total = LogScan()
    before_total = LogScan()
    detail: dict[str, Any] = {}
    failures: list[str] = []
    unreadable: list[str] = []
    gaps: list[str] = []
    if source is None:
        return CheckResult("logs", INCONCLUSIVE, "no log source: thread deaths cannot be ruled out "
                           "(give --log-file, --journal-dir or an inventory with SSH access)",
                           failures=["no log source"])
    for w in workers:
        try:
            scan = scan_text(source.read(w), version)
        except LogUnavailable as e:
            unreadable.append(str(e))
            detail[w.name] = {"error": str(e)}
            continue
        total.add(scan)
        detail[w.name] = scan.to_dict()
        before = _read_before(source, w)
        # An empty log since the protocol start: the wrong unit or source, unless the same source shows this unit's
        # own lines since its last start. A prefill all of whose sessions got their first token before the kill
        # (a freshly restarted one, ahead of its queue) logs nothing at info level, and a thread death would have
        # logged its line through that same source.
        if scan.lines == 0:
            if isinstance(before, LogUnavailable) or not before.strip():
                unreadable.append(f"{w.name}: its log since the protocol start is empty ({source.description})")
            else:
                detail[w.name]["quiet"] = ("no line since the protocol start; the same source shows its lines since "
                                           "the unit's last start")
        if isinstance(before, LogUnavailable):
            gaps.append(str(before))
            detail[w.name]["before_protocol"] = {"error": str(before)}
            continue
        early = scan_text(before, version)
        before_total.add(early)
        for death in early.deaths:
            death["worker"] = w.name
        detail[w.name]["before_protocol"] = {"lines": early.lines, "thread_death": early.counts["thread_death"],
                                             "transfer_error": early.counts["transfer_error"],
                                             "deaths": early.deaths}
    for name, deltas in (metric_deltas or {}).items():
        detail.setdefault(name, {})["metric_deltas"] = deltas
    c = total.counts
    early_deaths = before_total.counts["thread_death"]
    if early_deaths:
        first = before_total.deaths[0]
        failures.append(f"{early_deaths} thread death(s) BEFORE the protocol started (since the unit's last "
                        f"start): {first.get('worker', '?')} at {first['time']}: {first['line']!r}")
    if c["thread_death"]:
        failures.append(f"{c['thread_death']} thread-death signature line(s) "
                        f"(e.g. {total.examples.get('thread_death', ['?'])[0]!r})")
    if c["transfer_error"] or before_total.counts["transfer_error"]:
        example = (total.examples.get("transfer_error") or before_total.examples.get("transfer_error") or ["?"])[0]
        failures.append(f"{c['transfer_error'] + before_total.counts['transfer_error']} transfer-worker error "
                        f"line(s) (e.g. {example!r})")
    if c["dropped_frame"] and not s.allow_dropped_frames:
        failures.append(f"{c['dropped_frame']} dropped/foreign KV frame warning(s): the thread survived, but a "
                        f"message was lost (e.g. {total.examples.get('dropped_frame', ['?'])[0]!r})")
    # A monolithic (non-PD) cluster has no KV transfer and no ABORT message: there the client aborts are the
    # evidence: the lines the server logs for them (http_server "Client disconnected", the scheduler's debug
    # "Abort ... request.") or, since SGLang's OpenAI disconnect path logs nothing at info level, the increase of
    # sglang:num_aborted_requests_total, which that path always counts (tokenizer_manager.abort_request:
    # 0.5.15.post1 tokenizer_manager.py:1677-1692, 0.5.23 :2241-2265). The PD failure counters never count.
    is_pd = any(w.role in ("prefill", "decode") for w in workers)
    aborted_counter = int(sum(d.get("sglang:num_aborted_requests_total", 0.0) for d in (metric_deltas or {}).values()))
    aborts = total.aborts_handled if is_pd else max(c["abort"], aborted_counter)
    deaths = total.deaths + before_total.deaths
    measured = {"thread_death": c["thread_death"] + early_deaths, "thread_death_before_protocol": early_deaths,
                "transfer_error": c["transfer_error"] + before_total.counts["transfer_error"],
                "dropped_frame": c["dropped_frame"], "abort_events": aborts,
                "aborts_handled_by_prefill": total.aborts_handled, "client_abort_lines": c["abort"],
                "generic_failure_metric_delta": int(sum(sum(d.values()) for d in (metric_deltas or {}).values())),
                "uncaught_tracebacks": total.uncaught_tracebacks + before_total.uncaught_tracebacks,
                "lines_scanned": total.lines, "lines_before_protocol": before_total.lines,
                "deaths": deaths[:10], "sglang_version": version, "source": source.description}
    floor = abort_floor(s, killed_waiting) if is_pd else s.min_abort_events
    measured["killed_before_first_token"] = killed_waiting
    thresholds = {"thread_death": 0, "transfer_error": 0,
                  "dropped_frame": "counted only" if s.allow_dropped_frames else 0,
                  "abort_events_min": floor, "abort_share_min": s.min_abort_share if is_pd else None,
                  "abort_evidence": "prefill handled a decode ABORT" if is_pd
                  else "client aborts: log lines or sglang:num_aborted_requests_total (no PD)"}
    status, summary = _logs_status(failures, unreadable, aborts, is_pd, s, floor, killed_waiting)
    if gaps:
        summary += f"; {len(gaps)} worker(s) without their log since the last start (deaths before the " \
                   "protocol not ruled out)"
        detail["gaps"] = gaps
    if unreadable:
        failures += unreadable
    return CheckResult("logs", status, summary, measured, thresholds, failures, detail, time.monotonic() - t0)


def _read_before(source: LogSource, worker: Worker) -> str | LogUnavailable:
    """What the worker logged between its unit's last start and the mark ('' when the source has none)."""
    reader = getattr(source, "read_before", None)
    if reader is None:
        return LogUnavailable(f"{worker.name}: {source.description} cannot read the log before the protocol")
    try:
        return str(reader(worker))
    except LogUnavailable as e:
        return e


def _logs_status(failures: list[str], unreadable: list[str], aborts: int, is_pd: bool,
                 s: Settings, floor: int, killed_waiting: int | None) -> tuple[str, str]:
    if failures:
        return "fail", "; ".join(failures)
    gap = (f"{len(unreadable)} worker log(s) unreadable or empty: cannot rule out a thread death"
           if unreadable else "")
    if is_pd and aborts < floor and floor > s.min_abort_events:
        return INCONCLUSIVE, (f"{aborts} ABORT message(s) handled by the prefill for {killed_waiting} session(s) "
                              f"killed before their first token (need >= {floor}: {s.min_abort_share:g} of them): "
                              "most kills left no trace at the prefill, so a clean log does not show the abort "
                              "path holding up (is the prefill's log level above info, or the patch missing?)"
                              + (f"; {gap}" if gap else ""))
    if aborts < s.min_abort_events:
        what = ("ABORT message(s) handled by the prefill" if is_pd else "client abort line(s)")
        return INCONCLUSIVE, (f"{aborts} {what} (need >= {s.min_abort_events}): the cascade did not exercise "
                              "the abort path, so a clean log proves nothing"
                              + (" (use --kill-mode spread or longer prompts)" if is_pd else "")
                              + (f"; {gap}" if gap else ""))
    if gap:
        return INCONCLUSIVE, gap
    if not is_pd:
        return "pass", f"clean: 0 thread deaths, 0 transfer errors; {aborts} aborts of departed clients (no PD workers)"
    return "pass", (f"clean since the workers' last start: 0 thread deaths, 0 transfer errors; {aborts} ABORT "
                    "message(s) handled by the prefill")
