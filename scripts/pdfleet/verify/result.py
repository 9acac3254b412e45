"""One check's outcome: status, what was measured, the thresholds it was held to, per-node detail."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PASS = "pass"
FAIL = "fail"
INCONCLUSIVE = "inconclusive"  # ran, but cannot prove anything (e.g. no abort reached the abort path)
ERROR = "error"  # could not run (unreachable, bad input)
SKIPPED = "skipped"  # not run on purpose (--skip) or because an earlier check made it meaningless
NO_BASELINE = "no-baseline"  # the benchmark ran but has nothing to compare with: not a failure
DEFERRED = "deferred"  # the logs check, left for a later `--resume … --journal-dir` run
STATUSES = (PASS, FAIL, INCONCLUSIVE, ERROR, SKIPPED, NO_BASELINE, DEFERRED)

# The checks in protocol order.
CHECK_NAMES = ("config", "liveness", "cascade", "recovery", "logs", "bench")


@dataclass
class CheckResult:
    name: str
    status: str
    summary: str
    measured: dict[str, Any] = field(default_factory=dict)
    thresholds: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)  # one line per broken threshold
    detail: dict[str, Any] = field(default_factory=dict)  # per node (worker/router/host)
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "summary": self.summary, "measured": self.measured,
                "thresholds": self.thresholds, "failures": self.failures, "detail": self.detail,
                "duration_s": round(self.duration_s, 3)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CheckResult:
        return cls(name=d["name"], status=d["status"], summary=d.get("summary", ""),
                   measured=d.get("measured", {}), thresholds=d.get("thresholds", {}),
                   failures=list(d.get("failures", [])), detail=d.get("detail", {}),
                   duration_s=float(d.get("duration_s", 0.0)))


def skipped(name: str, why: str) -> CheckResult:
    return CheckResult(name, SKIPPED, why)


def status_from(failures: list[str]) -> str:
    return FAIL if failures else PASS
