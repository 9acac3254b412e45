"""The rollout report's page: per host, a timeline of the rollout (fleet gate, out of the router, drained,
stopped, applied, started, gated, back; a failure and a rollback marked) on one time axis, against the
client-visible request outcomes over the same time and the re-add's pairing samples; then the per-host table,
the benchmark, the swap and the plan.

Drawn from the report's JSON (``pdfleet.rollout.report.build``): ``started``/``finished``, ``order``,
``hosts[h].timeline`` (epoch marks ``begin``, ``removed_begin``, ``removed``, ``idle``, ``stopped``, ``applied``,
``started``, ``gated``, ``readded``, ``failed``, ``rolled_back``; ``drain``, ``gate``, ``readd``) and
``hosts[h].seconds``, ``outcome``, ``bench``, ``swap``, ``batches``. The pairing samples are the re-add's
``readd.samples`` (each read of the pair members' own request counters, each probe through the production
router). rollout.yml sends no client traffic of its own, so client outcomes over time are drawn only when a
caller hands them in (``client``: the outcomes of a load it ran alongside, ``{"started": epoch, "seconds": s,
"kind": "ok" | "failed" | "cut"}`` each); otherwise the page says so.
"""

from __future__ import annotations

import math
from pathlib import PurePath
from typing import Any
from urllib.parse import quote

from pdfleet.htmlreport.page import Html, badge, bullets, details, document, kv_table, pre_json, rows_table, value_text
from pdfleet.htmlreport.svg import Scale, Svg, esc

WIDTH = 940
LEFT = 150
RIGHT = 30
ROW = 34
# (timeline mark that ends the phase, the phase's name, its CSS class); each phase starts at the previous mark
PHASES: tuple[tuple[str, str, str], ...] = (
    ("removed_begin", "fleet gate", "ph-wait"), ("removed", "out", "ph-out"), ("idle", "drained", "ph-drained"),
    ("stopped", "stopped", "ph-stopped"), ("applied", "applied", "ph-applied"), ("started", "started", "ph-started"),
    ("gated", "gated", "ph-gated"), ("readded", "back", "ph-back"))
OUTCOMES = ("ok", "cut", "failed")


def _failure(report: dict[str, Any]) -> dict[str, Any]:
    """The failure of the outcome (rollout_rollback.yml nests it under ``failure``: host, step, message)."""
    outcome = _dict(report.get("outcome"))
    return _dict(outcome.get("failure")) or outcome


def _t(value: Any) -> float | None:
    """An epoch mark (Ansible may hand them over as strings), or None."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _hosts(report: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    hosts = _dict(report.get("hosts"))
    order = [h for h in report.get("order") or [] if isinstance(h, str) and h in hosts]
    order += [h for h in hosts if h not in order]
    return [(str(h), _dict(hosts[h])) for h in order]


def _client(client: list[dict[str, Any]] | None) -> list[tuple[float, float, str]]:
    out = []
    for c in client or []:
        if not isinstance(c, dict):
            continue
        t = _t(c.get("started", c.get("t")))
        if t is None:
            continue
        kind = str(c.get("kind", "failed"))
        out.append((t, _t(c.get("seconds")) or 0.0, kind if kind in OUTCOMES else "failed"))
    return out


def _axis(svg: Svg, x: Scale, y: float) -> None:
    """The time axis in seconds since the rollout began (``x`` maps epochs)."""
    svg.x_axis(Scale(0.0, x.d1 - x.d0, x.r0, x.r1), y)


def _span(report: dict[str, Any], client: list[tuple[float, float, str]]) -> tuple[float, float]:
    times = [t for t in (_t(report.get("started")), _t(report.get("finished"))) if t is not None]
    for _, h in _hosts(report):
        tl = _dict(h.get("timeline"))
        times += [t for k, v in tl.items() if not isinstance(v, dict) and (t := _t(v)) is not None]
        times += [t for s in _dict(tl.get("readd")).get("samples") or [] if (t := _t(_dict(s).get("t"))) is not None]
    times += [t for t, _, _ in client] + [t + d for t, d, _ in client]
    if not times:
        return 0.0, 1.0
    lo, hi = min(times), max(times)
    start = _t(report.get("started"))
    lo = start if start is not None and start <= lo else lo
    return lo, max(hi, lo + 1e-3)


def timeline_figure(report: dict[str, Any], x: Scale, t0: float) -> str:
    hosts = _hosts(report)
    if not hosts:
        return '<p class="missing">The report names no host: nothing was rolled.</p>'
    outcome = _failure(report)
    height = 46 + ROW * len(hosts) + 30
    svg = Svg(WIDTH, height, "per-host rollout timeline (s since the rollout began)", "rollout-timeline")
    svg.legend(LEFT, 14, [(cls, name) for _, name, cls in PHASES])
    for i, (host, h) in enumerate(hosts):
        y = 28 + i * ROW
        tl = _dict(h.get("timeline"))
        svg.text(LEFT - 8, y + 15, value_text(host, 22), "", "end")
        prev = _t(tl.get("begin"))
        drawn = 0
        for mark, name, cls in PHASES:
            t = _t(tl.get(mark))
            if t is None:
                continue
            if prev is not None and t >= prev:
                svg.rect(x(prev), y + 4, max(x(t) - x(prev), 1.5), 16, cls,
                         f"{host}: {name} {t - prev:.1f} s (ends {t - t0:.1f} s after the start)",
                         {"host": host, "phase": name})
                drawn += 1
            prev = t
        out_from = _t(tl.get("removed_begin"))
        back = _t(tl.get("readded")) or _t(tl.get("rolled_back"))  # a rollback puts the pair back in
        if out_from is not None:
            end = back if back is not None else x.d1
            svg.rect(x(out_from), y + 22, max(x(end) - x(out_from), 1.0), 4, "ph-out",
                     f"{host}: out of the router {end - out_from:.1f} s" + ("" if back is not None else
                                                                            " (not back by the report's end)"),
                     {"host": host, "phase": "out of router"})
        for mark, label in (("failed", "failed"), ("rolled_back", "rolled back")):
            t = _t(tl.get(mark))
            if t is not None:
                step = f" at {outcome.get('step')}" if outcome.get("host") == host and outcome.get("step") else ""
                svg.line(x(t), y, x(t), y + 28, "mark-fail", f"{host}: {label}{step} ({t - t0:.1f} s)")
                near_end = x(t) > WIDTH - RIGHT - 120
                svg.text(x(t) + (-3 if near_end else 3), y + 2, f"{label}{step}", "small",
                         "end" if near_end else "start")
        if not drawn:
            svg.text(LEFT + 4, y + 16, "not reached (no step of this host ran)" if not tl else
                     "no step finished", "small")
    _axis(svg, x, 34 + ROW * len(hosts))
    return svg.render()


def client_figure(client: list[tuple[float, float, str]], x: Scale, t0: float) -> str:
    if not client:
        return ('<p class="missing" data-missing="client">No client-side request outcomes recorded for this '
                "rollout: rollout.yml sends no client traffic of its own. A caller that runs a load alongside hands "
                "its outcomes to the page (pdfleet.htmlreport.write_rollout_page); the re-add's probes through the "
                "production router are drawn under the pairing samples below.</p>")
    buckets = 60
    width = (x.d1 - x.d0) / buckets
    counts = [dict.fromkeys(OUTCOMES, 0) for _ in range(buckets)]
    for t, _, kind in client:
        counts[min(buckets - 1, max(0, int((t - x.d0) / width)))][kind] += 1
    most = max(sum(c.values()) for c in counts) or 1
    height = 150
    y = Scale(0.0, float(most), 120, 24)
    svg = Svg(WIDTH, height, "client-visible request outcomes over time (requests started per interval)",
              "client-outcomes")
    total = {k: sum(1 for _, _, kind in client if kind == k) for k in OUTCOMES}
    svg.legend(LEFT, 14, [(f"o-{k}", f"{k} {total[k]}") for k in OUTCOMES])
    svg.text(LEFT - 8, 70, "requests", "", "end")
    svg.text(LEFT - 8, 84, f"max {most} per {width:.1f} s", "small", "end")
    for i, c in enumerate(counts):
        a, b = x.d0 + i * width, x.d0 + (i + 1) * width
        base = 0
        for kind in OUTCOMES:
            n = c[kind]
            if n:
                svg.rect(x(a) + 0.5, y(base + n), max(x(b) - x(a) - 1, 1.0), y(base) - y(base + n), f"o-{kind}",
                         f"{a - t0:.1f}-{b - t0:.1f} s: {n} {kind}", {"outcome": kind})
                base += n
    _axis(svg, x, 120)
    return svg.render()


def _moved(before: dict[str, Any], counts: dict[str, Any]) -> tuple[int, int]:
    moved = sum(1 for u, v in counts.items() if (a := _t(v)) is not None and a > (_t(before.get(u)) or 0.0))
    return moved, len(counts)


def pairing_figure(report: dict[str, Any], x: Scale, t0: float) -> str:
    rows = []
    for host, h in _hosts(report):
        readd = _dict(_dict(h.get("timeline")).get("readd"))
        samples = [_dict(s) for s in readd.get("samples") or [] if _t(_dict(s).get("t")) is not None]
        if samples:
            rows.append((host, readd, samples))
    if not rows:
        return ('<p class="missing" data-missing="pairing">No pairing samples in this report (no host was re-added, '
                "or the report predates them).</p>")
    height = 40 + ROW * len(rows) + 30
    svg = Svg(WIDTH, height, "pairing samples at each re-add: members whose own request counter moved, and the "
              "probes through the production router", "pairing")
    svg.legend(LEFT, 14, [("o-ok", "every member served (counters moved)"), ("ph-wait", "not yet"),
                          ("probe", "probe answered 200"), ("o-failed", "probe failed")])
    for i, (host, readd, samples) in enumerate(rows):
        y = 28 + i * ROW
        svg.text(LEFT - 8, y + 15, value_text(host, 22), "", "end")
        before = _dict(readd.get("before"))
        for s in samples:
            t = _t(s.get("t")) or 0.0
            if "counts" in s:
                moved, n = _moved(before, _dict(s.get("counts")))
                svg.circle(x(t), y + 8, 4, "o-ok" if n and moved == n else "ph-wait",
                           f"{host} at {t - t0:.1f} s: {moved} of {n} member(s) served since the re-add began")
            else:
                status = s.get("status")
                svg.rect(x(t) - 1, y + 16, 2.5, 10, "probe" if status == 200 else "o-failed",
                         f"{host}: probe through the router at {t - t0:.1f} s: HTTP {status} in {s.get('s')} s")
        svg.text(WIDTH - RIGHT, y + 30, ("confirmed" if readd.get("confirmed") else "NOT confirmed")
                 + f" after {readd.get('probes')} probe(s)", "small", "end")
    _axis(svg, x, 36 + ROW * len(rows))
    return svg.render()


def _secs(v: Any) -> str:
    t = _t(v)
    return "-" if t is None else f"{t:.1f}"


def host_table(report: dict[str, Any]) -> str:
    keys = ["drained", "idle", "stopped", "applied", "started", "gated", "re-added"]
    rows: list[list[Any]] = []
    for host, h in _hosts(report):
        tl, sec = _dict(h.get("timeline")), _dict(h.get("seconds"))
        gate = _dict(tl.get("gate"))
        verdict: Any = "-"
        if gate:
            page = gate.get("page")
            verdict = Html(badge(gate.get("verdict") or ("pass" if gate.get("ok") else "fail")) + (
                f' <a href="{esc(quote(PurePath(str(page)).name))}">evidence</a>' if page else ""))
        readd, drain = _dict(tl.get("readd")), _dict(tl.get("drain"))
        rows.append([host, *[_secs(sec.get(k)) for k in keys], _secs(sec.get("out_of_router")), _secs(sec.get("total")),
                     verdict, "-" if not readd else f"{'yes' if readd.get('confirmed') else 'NO'} "
                     f"({readd.get('probes')} probes)",
                     "-" if not drain else f"{_secs(drain.get('idle_wait_s'))} s; "
                     f"{len(_dict(drain.get('busy_at_start')))} worker(s) busy at the start"])
    return rows_table(["host", "out", "drained", "stopped", "applied", "started", "gated", "back", "out of router",
                       "total", "gate", "routing confirmed", "drain wait"], rows, "hosts")


def render(report: dict[str, Any], client: list[dict[str, Any]] | None = None) -> str:
    """The whole page of one rollout report (its JSON dict); ``client``: outcomes of a client load that ran
    alongside (optional). A gated host whose gate wrote a page (``timeline.gate.page``, beside the report)
    links it by its file name."""
    report = report if isinstance(report, dict) else {}
    outcome = _dict(report.get("outcome"))
    ok = bool(report.get("ok"))
    target = report.get("target")
    label = _dict(target).get("label") if isinstance(target, dict) else target
    samples = _client(client)
    lo, hi = _span(report, samples)
    x = Scale(lo, hi, LEFT, WIDTH - RIGHT)  # epochs; the axes say seconds since the start
    total = _t(report.get("total_s"))
    head = (f"<h1>pdfleet rollout: {esc(report.get('strategy') or '?')} to {esc(label or '?')}</h1>"
            f'<p class="verdict" id="verdict">ROLLOUT: {badge("ok" if ok else "failed", "verdict-badge")}'
            + (f' <span class="note">in {total:.1f} s</span>' if total is not None else "") + "</p>")
    body = [head]
    facts = {"gates (sum)": report.get("sum_gates_s"), "total / gates": report.get("ratio_total_to_gates"),
             "batches": report.get("batches")}
    if report.get("swap"):
        facts["swap"] = report["swap"]
    if report.get("window_without_service_s"):
        facts["window without service (s)"] = report["window_without_service_s"]
    body.append(kv_table(facts))
    if not ok:
        failure = _failure(report)
        body.append("<h2>What failed</h2>" + (
            f'<p class="missing" id="failure">{esc(failure.get("host", "?"))} at {esc(failure.get("step", "?"))}: '
            f'{esc(failure.get("message", ""))}</p>' if failure.get("host") or failure.get("message") else "")
            + kv_table({k: v for k, v in outcome.items() if k not in ("ok", "failure")}))
    body.append("<h2>Per-host timeline</h2>" + timeline_figure(report, x, lo))
    body.append("<h2>Client-visible request outcomes</h2>" + client_figure(samples, x, lo))
    body.append("<h2>Pairing samples (re-add)</h2>" + pairing_figure(report, x, lo))
    body.append("<h2>Per host (seconds)</h2>" + host_table(report))
    bench = _dict(report.get("bench"))
    if bench:
        body.append(f"<h2>Benchmark after the last host {badge(bench.get('status'))}</h2>"
                    f"<p>{esc(bench.get('summary', ''))}</p>" + bullets(list(bench.get("failures") or []), "failures")
                    + kv_table({k: v for k, v in _dict(bench.get("measured")).items()}))
    else:
        body.append('<h2>Benchmark</h2><p class="note">No benchmark after the last host in this report.</p>')
    body.append("<h2>The plan</h2>" + details("plan", pre_json(report.get("plan")))
                + details("table", "<pre>" + esc("\n".join(map(str, report.get("table") or []))) + "</pre>"))
    title = f"pdfleet rollout {'OK' if ok else 'FAILED'}: {value_text(label or '?', 80)}"
    return document(title, "".join(body), "rollout")

