"""The rollout's JSON report: each host's timeline (drained, idle, stopped, applied, started, gated, re-added;
seconds each), the outcome, and a table at the end. rollout.yml writes it under reports/, with its HTML page
beside it (pdfleet.htmlreport)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pdfleet.table import format_table

# (step, the timeline mark that ends it); each step starts at the previous mark
STEPS: tuple[tuple[str, str], ...] = (("drained", "removed"), ("idle", "idle"), ("stopped", "stopped"),
                                      ("applied", "applied"), ("started", "started"), ("gated", "gated"),
                                      ("re-added", "readded"))
SCHEMA = "pdfleet-rollout/1"


def seconds(timeline: dict[str, Any]) -> dict[str, float | None]:
    """Seconds of each step from the epoch marks (None for a step that did not happen)."""
    out: dict[str, float | None] = {}
    prev = timeline.get("begin")
    for step, mark in STEPS:
        t = timeline.get(mark)
        out[step] = round(float(t) - float(prev), 3) if t is not None and prev is not None else None
        if t is not None:
            prev = t
    removed, back = timeline.get("removed_begin"), timeline.get("readded")
    out["out_of_router"] = round(float(back) - float(removed), 3) if removed is not None and back is not None else None
    begin, end = timeline.get("begin"), timeline.get("end") or back
    out["total"] = round(float(end) - float(begin), 3) if begin is not None and end is not None else None
    return out


def build(rollout: dict[str, Any], timelines: dict[str, dict[str, Any]], outcome: dict[str, Any],
          started: float, finished: float, swap: dict[str, Any] | None = None,
          one_pair: bool = False, bench: dict[str, Any] | None = None) -> dict[str, Any]:
    hosts = {}
    for host in rollout.get("order", []):
        tl = timelines.get(host) or {}
        hosts[host] = {"timeline": tl, "seconds": seconds(tl)}
    gates = sum((h["seconds"].get("gated") or 0.0) for h in hosts.values())
    total = round(finished - started, 3)
    report = {"schema": SCHEMA, "ok": bool(outcome.get("ok")), "outcome": outcome, "strategy": rollout.get("strategy"),
              "target": rollout.get("target"), "order": rollout.get("order"), "batches": rollout.get("batches"),
              "started": started, "finished": finished, "total_s": total, "sum_gates_s": round(gates, 3),
              "ratio_total_to_gates": round(total / gates, 2) if gates else None, "hosts": hosts, "swap": swap,
              "bench": bench, "plan": rollout}
    if one_pair:
        report["window_without_service_s"] = {h: v["seconds"].get("out_of_router") for h, v in hosts.items()}
    report["table"] = table(report).splitlines()
    return report


def table(report: dict[str, Any]) -> str:
    cols = [s for s, _ in STEPS] + ["out_of_router", "total"]
    rows = [[host, *[("-" if h["seconds"].get(c) is None else f"{h['seconds'][c]:.1f}") for c in cols]]
            for host, h in report["hosts"].items()]
    head = (f"rollout {'OK' if report['ok'] else 'FAILED'} ({report['strategy']}) in {report['total_s']:.1f} s; "
            f"gates {report['sum_gates_s']:.1f} s (ratio {report['ratio_total_to_gates']})")
    if report.get("swap"):
        head += f"; swap gap {report['swap'].get('gap_s')} s"
    if report.get("bench"):
        head += f"; benchmark {report['bench'].get('status')}: {report['bench'].get('summary')}"
    return head + "\n" + format_table(["host", *cols], rows)


def write(path: Path, report: dict[str, Any], client: list[dict[str, Any]] | None = None) -> Path:
    """The JSON report at ``path`` and its page beside it (same stem, ``.html``; ``client``: outcomes of a client
    load that ran alongside, drawn on the page only); the page's path."""
    from pdfleet.htmlreport import write_rollout_page

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    return write_rollout_page(path, report, client)
