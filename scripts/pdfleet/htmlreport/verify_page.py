"""The verification report's page: the verdict, the protocol's checks on one time axis, the abort cascade's
timeline (cycles, kill moments, pauses, settle; where each killed session was), the latency distribution, and
each check's evidence (summary, broken thresholds, measured values, thresholds, per-node detail).

Drawn from the report's JSON (``pdfleet.verify.report.Report.to_dict``): ``checks[].duration_s`` and
``timings.checks_s``; the cascade's ``detail.cycles[]`` (``open_s``, ``kill_s``, ``duration_s``,
``killed_phases``, ``completed``, ``failed``), ``measured.pauses_s``/``settle_s`` and ``thresholds.window_s``/
``kill_mode``; latencies from ``liveness.measured.latency_s``, ``recovery.measured``/``detail`` (fresh
request, probe p50/max, health) and the bench's ``measured`` medians with, where pdfleet's own load ran,
every request's TTFT/TPOT/end-to-end time (``bench.detail.latency_samples``).
"""

from __future__ import annotations

import math
from typing import Any

from pdfleet.htmlreport.page import (
    badge,
    bullets,
    details,
    document,
    kv_table,
    pre_json,
    rows_table,
    value_text,
)
from pdfleet.htmlreport.svg import Scale, Svg, esc

WIDTH = 940
LEFT = 190
RIGHT = 110
PHASES = ("waiting-headers", "before-first-token", "streaming")


def _f(value: Any) -> float | None:
    """A finite number, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    v = float(value)
    return v if math.isfinite(v) else None


def _checks(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in report.get("checks") or [] if isinstance(c, dict)]


def _check(report: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((c for c in _checks(report) if c.get("name") == name), None)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _dur(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 0.1 else f"{seconds:.1f} s"


def protocol_figure(report: dict[str, Any]) -> str:
    """Each check as a bar on one axis, in protocol order, coloured by its status."""
    checks = _checks(report)
    if not checks:
        return '<p class="missing">No check ran: the report holds no checks.</p>'
    timed = _dict(_dict(report.get("timings")).get("checks_s"))
    spans, t = [], 0.0
    for c in checks:
        d = _f(timed.get(c.get("name"))) or _f(c.get("duration_s")) or 0.0
        spans.append((c, t, max(d, 0.0)))
        t += max(d, 0.0)
    row = 22
    height = 30 + row * len(checks) + 30
    x = Scale(0.0, max(t, 1e-3), LEFT, WIDTH - RIGHT)
    svg = Svg(WIDTH, height, "the protocol's checks over time (s since the protocol began)", "protocol")
    for i, (c, start, d) in enumerate(spans):
        y = 20 + i * row
        status = str(c.get("status") or "unknown")
        svg.text(LEFT - 8, y + 14, c.get("name", "?"), "", "end")
        svg.rect(x(start), y + 3, max(x(start + d) - x(start), 2.0), row - 6, f"s-{status}",
                 f"{c.get('name')}: {status.upper()} in {_dur(d)}: {c.get('summary', '')}",
                 {"check": str(c.get("name")), "status": status})
        svg.text(x(start + d) + 4, y + 14, f"{status.upper()} {_dur(d)}", "small")
    svg.x_axis(x, 26 + row * len(checks))
    return svg.render()


def cascade_figure(report: dict[str, Any]) -> str:
    """The cascade's cycles on a time axis (sessions open, the kill moments, the pauses and the settle), and
    under it where each cycle's sessions were when the cascade ended them."""
    cascade = _check(report, "cascade")
    if cascade is None:
        return '<p class="missing">No abort cascade in this report: the abort path was not exercised.</p>'
    cycles = [c for c in _dict(cascade.get("detail")).get("cycles") or [] if isinstance(c, dict)]
    if not cycles:
        return (f'<p class="missing">The cascade recorded no cycle ({esc(str(cascade.get("status")).upper())}: '
                f'{esc(cascade.get("summary", ""))}).</p>')
    measured, thresholds = _dict(cascade.get("measured")), _dict(cascade.get("thresholds"))
    pauses = [p for p in (_f(v) for v in measured.get("pauses_s") or []) if p is not None]
    settle = _f(measured.get("settle_s")) or 0.0
    window = _f(thresholds.get("window_s"))
    mode = str(thresholds.get("kill_mode", ""))
    segments: list[tuple[str, float, float, dict[str, Any] | None]] = []
    t = 0.0
    for i, cyc in enumerate(cycles):
        if i and i - 1 < len(pauses):
            segments.append(("pause", t, pauses[i - 1], None))
            t += pauses[i - 1]
        d = _f(cyc.get("duration_s")) or 0.0
        segments.append(("cycle", t, d, cyc))
        t += d
    segments.append(("settle", t, settle, None))
    total = max(t + settle, 1e-3)
    x = Scale(0.0, total, LEFT, WIDTH - RIGHT)
    bar_rows = len(cycles)
    height = 30 + 34 + 40 + 22 * bar_rows + 40
    svg = Svg(WIDTH, height, f"the abort cascade: {len(cycles)} cycle(s), kill mode {mode}", "cascade")
    y = 16
    svg.text(LEFT - 8, y + 14, "timeline", "", "end")
    for kind, start, d, cyc in segments:
        if kind == "cycle" and cyc is not None:
            n = cyc.get("cycle", "?")
            svg.rect(x(start), y, max(x(start + d) - x(start), 1.0), 20, "cy-open",
                     f"cycle {n}: {d:.1f} s, opened {cyc.get('opened')}, killed {cyc.get('killed')}",
                     {"cycle": str(n)})
            svg.text(x(start) + 3, y + 14, f"cycle {n}", "small")
            opened = _f(cyc.get("open_s"))
            if opened is not None:
                svg.line(x(start + opened), y - 3, x(start + opened), y + 23, "mark",
                         f"cycle {n}: every request sent after {opened:.2f} s")
            if mode == "window" and window is not None and (_f(cyc.get("killed")) or 0) > 0:
                kx = x(start + min(window, d))
                svg.line(kx, y - 5, kx, y + 25, "mark-kill", f"cycle {n}: {cyc.get('killed')} session(s) killed "
                         f"at {window:g} s")
        elif d > 0:
            cls = "cy-pause" if kind == "pause" else "cy-settle"
            svg.rect(x(start), y, max(x(start + d) - x(start), 1.0), 20, cls,
                     f"{kind}: {d:.2f} s (until the workers' queues were empty, or the limit)")
    if mode == "spread":
        svg.text(x(0), y + 36, "kill mode spread: a third of each cycle's sessions killed at 0-10 %, a third at "
                 "10-60 %, a third at 60-100 % of the window", "small")
    svg.x_axis(x, y + 44)
    # where the sessions were: one stacked bar per cycle
    top = y + 86
    svg.legend(LEFT, top - 8, [("k-waiting-headers", "killed waiting for headers"),
                               ("k-before-first-token", "killed before the first token"),
                               ("k-streaming", "killed streaming"), ("o-ok", "completed"), ("o-failed", "failed")])
    most = max([int(_f(c.get("opened")) or 0) for c in cycles] + [1])
    most = max(most, max(sum(int(_f(v) or 0) for v in _dict(c.get("killed_phases")).values())
                         + int(_f(c.get("completed")) or 0) + int(_f(c.get("failed")) or 0) for c in cycles))
    bx = Scale(0.0, float(most), LEFT, WIDTH - RIGHT)
    for i, cyc in enumerate(cycles):
        by = top + i * 22
        svg.text(LEFT - 8, by + 14, f"cycle {cyc.get('cycle', i + 1)}", "", "end")
        phases = _dict(cyc.get("killed_phases"))
        parts = [(f"k-{p}", f"killed {p}", int(_f(phases.get(p)) or 0)) for p in PHASES]
        other = sum(int(_f(v) or 0) for k, v in phases.items() if k not in PHASES)
        parts += [("k-other", "killed (other phase)", other), ("o-ok", "completed", int(_f(cyc.get("completed")) or 0)),
                  ("o-failed", "failed", int(_f(cyc.get("failed")) or 0))]
        at = 0
        for cls, label, n in parts:
            if n <= 0:
                continue
            svg.rect(bx(at), by + 2, bx(at + n) - bx(at), 16, cls, f"cycle {cyc.get('cycle')}: {label}: {n}",
                     {"phase": label})
            at += n
        svg.text(bx(at) + 4, by + 14, f"{at} of {cyc.get('opened')} opened", "small")
    return svg.render()


def _latency_points(report: dict[str, Any]) -> list[tuple[str, float]]:
    """(what, milliseconds) of every single latency the report holds."""
    out: list[tuple[str, float]] = []
    live = _dict(_dict(_check(report, "liveness")).get("measured"))
    if (v := _f(live.get("latency_s"))) is not None:
        out.append(("liveness: fresh request", v * 1000))
    rec = _check(report, "recovery") or {}
    rm, rd = _dict(rec.get("measured")), _dict(rec.get("detail"))
    if (v := _f(rm.get("fresh_latency_s"))) is not None:
        out.append(("recovery: fresh request", v * 1000))
    probe = _dict(rd.get("probe"))
    for key, label in (("p50_s", "recovery probe p50"), ("max_s", "recovery probe max")):
        if (v := _f(probe.get(key))) is not None:
            out.append((label, v * 1000))
    for node, h in _dict(rd.get("health")).items():
        if (v := _f(_dict(h).get("latency_s"))) is not None:
            out.append((f"recovery: /health {node}", v * 1000))
    bm = _dict(_dict(_check(report, "bench")).get("measured"))
    for key, label in (("median_ttft_ms", "bench median TTFT"), ("median_tpot_ms", "bench median TPOT")):
        if (v := _f(bm.get(key))) is not None:
            out.append((label, v))
    return [(k, v) for k, v in out if v > 0]


def _histogram(svg: Svg, values: list[float], top: float, label: str, unit: str, cls: str) -> None:
    lo, hi = min(values), max(values)
    if hi <= lo:
        hi = lo + max(abs(lo) * 0.1, 1.0)
    bins = 24
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int((v - lo) / (hi - lo) * bins))] += 1
    x = Scale(lo, hi, LEFT, WIDTH - RIGHT)
    y = Scale(0.0, float(max(counts)), top + 70, top + 8)
    svg.text(LEFT - 8, top + 40, label, "", "end")
    svg.text(LEFT - 8, top + 54, f"n={len(values)}", "small", "end")
    width = (hi - lo) / bins
    for i, n in enumerate(counts):
        if n:
            a, b = lo + i * width, lo + (i + 1) * width
            svg.rect(x(a) + 0.5, y(n), max(x(b) - x(a) - 1, 1.0), top + 70 - y(n), cls,
                     f"{label}: {n} request(s) between {a:.1f} and {b:.1f} {unit}", {"bin": str(i)})
    svg.x_axis(x, top + 70, unit)


def latency_figure(report: dict[str, Any]) -> str:
    """Every per-request latency of the benchmark as histograms, and every single latency of the protocol on
    one logarithmic axis."""
    bench = _check(report, "bench") or {}
    samples = _dict(_dict(bench.get("detail")).get("latency_samples"))
    series = [(label, unit, cls, [v for v in (_f(x) for x in samples.get(key) or []) if v is not None])
              for key, label, unit, cls in (("ttft_ms", "bench TTFT", "ms", "bar"),
                                            ("tpot_ms", "bench TPOT", "ms", "bar2"),
                                            ("e2e_s", "bench end-to-end", "s", "bar"))]
    series = [s for s in series if s[3]]
    points = _latency_points(report)
    if not series and not points:
        return '<p class="missing">The report holds no latency: no request of the protocol completed.</p>'
    height = 20 + 95 * len(series) + (70 if points else 0) + 20 * len(points)
    svg = Svg(WIDTH, height, "latency distribution", "latency")
    top = 10.0
    for label, unit, cls, values in series:
        _histogram(svg, values, top, label, unit, cls)
        top += 95
    if points:
        logs = [math.log10(v) for _, v in points]
        lo, hi = math.floor(min(logs)), math.ceil(max(logs))
        if hi == lo:
            hi = lo + 1
        x = Scale(float(lo), float(hi), LEFT, WIDTH - RIGHT)
        svg.text(LEFT, top + 14, "single latencies (ms, logarithmic axis)", "small")
        for i, (label, v) in enumerate(points):
            py = top + 30 + i * 20
            svg.line(LEFT, py, WIDTH - RIGHT, py, "grid")
            svg.text(LEFT - 8, py + 4, value_text(label, 34), "small", "end")
            svg.circle(x(math.log10(v)), py, 4.5, "pt", f"{label}: {v:.1f} ms")
            svg.text(x(math.log10(v)) + 8, py + 4, f"{v:.1f} ms", "small")
        axis_y = top + 30 + len(points) * 20
        svg.line(LEFT, axis_y, WIDTH - RIGHT, axis_y, "axis")
        for d in range(lo, hi + 1):
            svg.line(x(d), axis_y, x(d), axis_y + 4, "axis")
            svg.text(x(d), axis_y + 15, f"{10 ** d:g} ms", "tick", "middle")
    note = "" if series else ('<p class="note">No per-request latencies in this report (the benchmark did not run '
                              "pdfleet's own load, or the report predates them): the single values only.</p>")
    return svg.render() + note


def check_section(c: dict[str, Any]) -> str:
    name, status = str(c.get("name", "?")), str(c.get("status", "unknown"))
    dur = _f(c.get("duration_s"))
    parts = [f'<section class="check" id="check-{esc(name)}" data-check="{esc(name)}">',
             f"<h3>{esc(name)} {badge(status)}" + (f' <span class="note">{dur:.1f} s</span>'
                                                           if dur is not None else "") + "</h3>",
             f'<p class="summary">{esc(c.get("summary", ""))}</p>']
    failures = c.get("failures") or []
    if failures:
        parts.append("<h4>broken thresholds</h4>" + bullets(list(failures), "failures"))
    measured, thresholds = _dict(c.get("measured")), _dict(c.get("thresholds"))
    keys = list(dict.fromkeys([*measured, *thresholds]))
    if keys:
        parts.append(rows_table(["value", "measured", "threshold"],
                                [[k, measured.get(k, "") if k in measured else "", thresholds.get(k, "")
                                  if k in thresholds else ""] for k in keys], "evidence"))
    detail = _dict(c.get("detail"))
    if detail:
        parts.append(details(f"{name}: per-node detail", pre_json(detail)))
    parts.append("</section>")
    return "".join(parts)


def render(report: dict[str, Any]) -> str:
    """The whole page of one verification report (its JSON dict); tolerant of missing fields."""
    report = report if isinstance(report, dict) else {}
    target = _dict(report.get("target"))
    verdict = str(report.get("verdict") or "unknown")
    exit_code = report.get("exit_code")
    wall = _f(_dict(report.get("timings")).get("wall_s"))
    head = (f'<h1>pdfleet verify: {esc(target.get("profile", "?"))}</h1>'
            f'<p class="sub">router <code>{esc(target.get("router", "?"))}</code> · model '
            f'<code>{esc(target.get("model", "?"))}</code> · SGLang {esc(target.get("sglang_version", "?"))} · '
            f'started {esc(report.get("started", "?"))}' + (f" · {wall:.1f} s" if wall is not None else "") + "</p>"
            f'<p class="verdict" id="verdict">VERDICT: {badge(verdict, "verdict-badge")} '
            f'<span class="note">exit {esc(exit_code)}</span></p>')
    body = [head]
    if report.get("error"):
        body.append(f'<p class="missing">could not run: {esc(report["error"])}</p>')
    failures = [f for f in report.get("failures") or [] if isinstance(f, dict)]
    if failures:
        body.append("<h2>What failed</h2>" + rows_table(
            ["check", "status", "summary", "problems"],
            [[f.get("check"), f.get("status"), f.get("summary"), "; ".join(map(str, f.get("problems") or []))]
             for f in failures], "failures"))
    if report.get("missing_evidence"):
        body.append('<h2>Missing evidence</h2>' + bullets(list(report["missing_evidence"]), "missing"))
    if report.get("notes"):
        body.append("<h2>Notes</h2>" + bullets(list(report["notes"]), "note"))
    body.append("<h2>The protocol over time</h2>" + protocol_figure(report))
    body.append("<h2>The abort cascade</h2>" + cascade_figure(report))
    body.append("<h2>Latency distribution</h2>" + latency_figure(report))
    body.append("<h2>Each check's evidence</h2>" + "".join(check_section(c) for c in _checks(report)))
    if report.get("metric_deltas"):
        body.append("<h2>Worker metric deltas over the protocol</h2>" + rows_table(
            ["worker", "deltas"], [[k, v] for k, v in _dict(report.get("metric_deltas")).items()]))
    body.append("<h2>Target, versions, settings</h2>"
                + details("target", pre_json(target)) + details("versions", kv_table(_dict(report.get("versions"))))
                + details("server versions", kv_table(_dict(report.get("server_versions"))))
                + details("settings", kv_table(_dict(report.get("settings")))))
    title = f"pdfleet verify {verdict.upper()}: {value_text(target.get('profile', '?'), 80)}"
    return document(title, "".join(body), "verify")
