"""The verdict: one JSON document for machines, one table for people, one exit code.

Rule: any check ``fail`` -> verdict ``fail`` (exit 1); otherwise any ``error`` (could not run) or
``inconclusive`` -> ``inconclusive`` (exit 2); otherwise, when the run lacks the evidence the protocol exists
for (:func:`missing_evidence`: the cascade or the logs check skipped, 0 cycles, 0 abort events required)
-> ``incomplete`` (exit 2) unless ``allow_incomplete`` was set (the report then lists what is missing);
otherwise ``pass`` (exit 0). ``skipped``, ``no-baseline`` are
listed as notes and do not block a pass; ``deferred`` (logs left for a ``--resume`` run) makes it
inconclusive until resumed. A definite failure outranks an inconclusive part: a wedge found while
something else could not be measured is still a wedge.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pdfleet.table import format_table
from pdfleet.verify.result import (
    DEFERRED,
    ERROR,
    FAIL,
    INCONCLUSIVE,
    NO_BASELINE,
    SKIPPED,
    CheckResult,
)

EXIT_CODES = {"pass": 0, "fail": 1, "inconclusive": 2, "incomplete": 2}
SCHEMA = "pdfleet-verify/1"


def verdict_of(checks: list[CheckResult]) -> str:
    statuses = {c.status for c in checks}
    if FAIL in statuses:
        return "fail"
    if statuses & {ERROR, INCONCLUSIVE, DEFERRED}:
        return "inconclusive"
    return "pass"


def missing_evidence(settings: dict[str, Any], checks: list[CheckResult]) -> list[str]:
    """What a run lacks to show that the abort path was exercised and held (empty: nothing)."""
    out: list[str] = []
    ran = {c.name: c for c in checks}
    for name, why in (("cascade", "no abort cascade ran: the abort path was never exercised"),
                      ("logs", "the logs were not checked: thread deaths cannot be ruled out")):
        check = ran.get(name)
        if check is None or check.status == SKIPPED:
            out.append(f"{name}: {why}" + (f" ({check.summary})" if check is not None else ""))
    if int(settings.get("cycles", 1)) == 0:
        out.append("cycles: --cycles 0 kills nothing")
    if int(settings.get("min_abort_events", 1)) == 0:
        out.append("min_abort_events: --min-abort-events 0 accepts a run in which no ABORT reached the prefill")
    return out


@dataclass
class Report:
    target: dict[str, Any]
    settings: dict[str, Any]
    started_epoch: float
    checks: list[CheckResult] = field(default_factory=list)
    server_versions: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, Any] = field(default_factory=dict)
    metric_deltas: dict[str, dict[str, float]] = field(default_factory=dict)
    error: str | None = None  # why the protocol could not run, if it could not
    baseline_note: str | None = None  # whether this run's benchmark was stored as the baseline

    @property
    def missing(self) -> list[str]:
        return missing_evidence(self.settings, self.checks)

    @property
    def verdict(self) -> str:
        if self.error and not any(c.status == FAIL for c in self.checks):
            return "inconclusive"
        verdict = verdict_of(self.checks)
        if verdict == "pass" and self.missing and not self.settings.get("allow_incomplete"):
            return "incomplete"
        return verdict

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def check(self, name: str) -> CheckResult | None:
        return next((c for c in self.checks if c.name == name), None)

    def replace(self, result: CheckResult) -> None:
        self.checks = [result if c.name == result.name else c for c in self.checks]
        if self.check(result.name) is None:
            self.checks.append(result)

    def failures(self) -> list[dict[str, Any]]:
        out = []
        for c in self.checks:
            if c.status in (FAIL, ERROR, INCONCLUSIVE, DEFERRED):
                out.append({"check": c.name, "status": c.status, "summary": c.summary, "problems": c.failures,
                            "measured": c.measured, "thresholds": c.thresholds})
        if self.error:
            out.append({"check": "protocol", "status": ERROR, "summary": self.error, "problems": [self.error],
                        "measured": {}, "thresholds": {}})
        if self.verdict == "incomplete":
            out.append({"check": "protocol", "status": "incomplete", "summary": "missing evidence",
                        "problems": self.missing, "measured": {}, "thresholds": {}})
        return out

    def to_dict(self) -> dict[str, Any]:
        notes = [f"{c.name}: {c.summary}" for c in self.checks if c.status in (SKIPPED, NO_BASELINE)]
        missing = self.missing
        if self.baseline_note:
            notes.append(self.baseline_note)
        if missing and self.settings.get("allow_incomplete"):
            notes.append("INCOMPLETE evidence accepted (--allow-incomplete): " + "; ".join(missing))
        return {"schema": SCHEMA, "ok": self.verdict == "pass", "verdict": self.verdict,
                "exit_code": self.exit_code, "failures": self.failures(), "notes": notes,
                "missing_evidence": missing,
                "incomplete_allowed": bool(missing and self.settings.get("allow_incomplete")),
                "checks": [c.to_dict() for c in self.checks], "target": self.target,
                "server_versions": self.server_versions, "versions": _versions(self),
                "settings": self.settings,
                "started_epoch": self.started_epoch,
                "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started_epoch)),
                "timings": self.timings, "metric_deltas": self.metric_deltas, "error": self.error}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Report:
        if d.get("schema") != SCHEMA:
            raise ValueError(f"not a pdfleet verify report (schema {d.get('schema')!r}, expected {SCHEMA})")
        return cls(target=d["target"], settings=d["settings"], started_epoch=float(d["started_epoch"]),
                   checks=[CheckResult.from_dict(c) for c in d["checks"]],
                   server_versions=d.get("server_versions", {}), timings=d.get("timings", {}),
                   metric_deltas=d.get("metric_deltas", {}), error=d.get("error"))

    def write(self, path: Path) -> Path:
        """The JSON report at ``path`` and its page beside it (same stem, ``.html``); the page's path."""
        from pdfleet.htmlreport import write_verify_page

        path.parent.mkdir(mode=0o750, parents=True, exist_ok=True)
        data = self.to_dict()
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
        tmp.replace(path)
        return write_verify_page(path, data)

    def table(self) -> str:
        rows = []
        for c in self.checks:
            rows.append([c.name, c.status.upper(), _short(c.measured), _short(c.thresholds), f"{c.duration_s:.1f}s"])
        head = (f"pdfleet verify: {self.target.get('profile')} via {self.target.get('router')}  "
                f"model {self.target.get('model')}  SGLang {self.target.get('sglang_version')}")
        lines = [head, "", format_table(["check", "status", "measured", "threshold", "time"], rows), ""]
        for c in self.checks:
            if c.failures and c.status != SKIPPED:
                lines += [f"{c.name}:"] + [f"  - {f}" for f in c.failures]
        if self.error:
            lines.append(f"could not run: {self.error}")
        if self.missing:
            allowed = self.settings.get("allow_incomplete")
            lines.append("missing evidence" + (" (accepted: --allow-incomplete):" if allowed else
                                               " (INCOMPLETE; --allow-incomplete accepts it):"))
            lines += [f"  - {m}" for m in self.missing]
        wall = self.timings.get("wall_s")
        lines.append(f"VERDICT: {self.verdict.upper()} (exit {self.exit_code})"
                     + (f" in {wall:.1f}s" if isinstance(wall, int | float) else ""))
        return "\n".join(lines)


def writable_problem(path: Path) -> str | None:
    """Why ``path`` cannot take a report (checked before any traffic), or None when it can.

    Tried for real (make the folder, create and remove a probe file next to it): permission bits say
    nothing for root, and a path under /proc or a read-only mount only fails when written.
    """
    if path.is_dir():
        return f"{path} is a directory; give a file name (e.g. {path / 'verify.json'})"
    try:
        path.parent.mkdir(mode=0o750, parents=True, exist_ok=True)
        probe = path.with_name(f".{path.name}.{os.getpid()}.probe")
        probe.write_text("")
        probe.unlink()
        if path.exists():
            with path.open("a"):
                pass
    except OSError as e:
        return f"cannot write {path} ({e.strerror or e}); pick another --report path"
    return None


def _versions(report: Report) -> dict[str, Any]:
    try:
        pdfleet = importlib.metadata.version("pdfleet")
    except importlib.metadata.PackageNotFoundError:
        pdfleet = None
    return {"pdfleet": pdfleet, "sglang_planned": report.target.get("sglang_version"),
            "sglang_reported": sorted({str(v) for v in report.server_versions.values()})}


# The few values per check worth a column in the table.
_TABLE_KEYS = ("readiness_status", "workers_reachable", "router_lists", "status", "latency_s", "completion_tokens",
               "deadline_s", "opened", "first_token", "killed", "cycles", "concurrency", "window_s", "kill_mode",
               "health_max_latency_s", "health_max_s", "fresh_latency_s", "probe_completed", "queues_idle",
               "thread_death", "transfer_error", "dropped_frame", "abort_events", "transfer_aborts",
               "abort_events_min", "output_throughput", "median_ttft_ms", "median_tpot_ms",
               "output_throughput_min", "median_ttft_ms_max", "median_tpot_ms_max")


def _short(values: dict[str, Any]) -> str:
    parts = [f"{k}={values[k]}" for k in _TABLE_KEYS if k in values and not isinstance(values[k], dict)]
    text = " ".join(parts)
    return text if len(text) <= 70 else text[:67] + "..."
