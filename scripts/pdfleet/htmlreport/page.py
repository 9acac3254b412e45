"""The HTML document around the figures: one inline stylesheet, headings, key/value tables, the verdict badge.
Nothing here loads anything: no script, no external stylesheet, font or image."""

from __future__ import annotations

import json
from typing import Any

from pdfleet.htmlreport.svg import esc

# Status and phase colours, shared by the figures (SVG classes) and the tables.
STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1d1d1f;background:#fff;max-width:1200px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:18px 0 6px} .sub{color:#555;margin:0 0 12px}
table{border-collapse:collapse;margin:6px 0} td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;
vertical-align:top} th{background:#f4f4f6} code,pre{font:12px/1.35 ui-monospace,monospace}
pre{white-space:pre-wrap;word-break:break-all;background:#f7f7f9;padding:6px;margin:4px 0}
.badge{display:inline-block;padding:2px 10px;border-radius:4px;font-weight:700;color:#fff}
.verdict{font-size:20px}
.b-pass,.b-ok{background:#1a7f37} .b-fail,.b-failed{background:#cf222e} .b-inconclusive,.b-error,
.b-incomplete,.b-deferred{background:#bf8700} .b-skipped,.b-no-baseline,.b-unknown{background:#6e7781}
.missing{color:#8a4600} .note{color:#555} ul{margin:4px 0 4px 20px;padding:0}
svg.figure{display:block;margin:8px 0;background:#fcfcfd;border:1px solid #e3e3e8}
svg text{font:11px system-ui,sans-serif;fill:#1d1d1f} svg text.tick{fill:#555} svg text.small{font-size:10px}
svg .axis{stroke:#888;stroke-width:1} svg .grid{stroke:#e6e6ea;stroke-width:1}
svg .s-pass,svg .o-ok{fill:#2da44e} svg .s-fail,svg .o-failed{fill:#cf222e} svg .o-cut{fill:#fb8500}
svg .s-inconclusive,svg .s-error,svg .s-deferred{fill:#d4a72c} svg .s-skipped,svg .s-no-baseline{fill:#afb8c1}
svg .ph-out{fill:#8250df} svg .ph-drained{fill:#a475f9} svg .ph-idle{fill:#c297ff} svg .ph-stopped{fill:#cf222e}
svg .ph-applied{fill:#fb8500} svg .ph-started{fill:#0969da} svg .ph-gated{fill:#1a7f37}
svg .ph-back{fill:#2da44e} svg .ph-wait{fill:#d0d7de}
svg .mark-fail{stroke:#cf222e;stroke-width:2} svg .mark-kill{stroke:#cf222e;stroke-width:2}
svg .mark{stroke:#1d1d1f;stroke-width:1;stroke-dasharray:3 2}
svg .cy-open{fill:#54aeff} svg .cy-pause{fill:#d0d7de} svg .cy-settle{fill:#eaeef2}
svg .k-waiting-headers{fill:#8250df} svg .k-before-first-token{fill:#bf3989} svg .k-streaming{fill:#0969da}
svg .k-other{fill:#6e7781} svg .bar{fill:#0969da} svg .bar2{fill:#8250df} svg .pt{fill:#1d1d1f}
svg .probe{fill:#0969da} svg .band{fill:#eaeef2}
"""


def value_text(value: Any, limit: int = 400) -> str:
    """A report value as short text (nested values as compact JSON)."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def badge(status: object, extra: str = "") -> str:
    s = str(status or "unknown").lower()
    cls = s if s in ("pass", "ok", "fail", "failed", "inconclusive", "error", "incomplete", "deferred",
                     "skipped", "no-baseline") else "unknown"
    return f'<span class="badge b-{cls} {esc(extra)}" data-status="{esc(s)}">{esc(s.upper())}</span>'


def kv_table(values: dict[str, Any] | None, cls: str = "kv") -> str:
    if not values:
        return '<p class="note">none recorded</p>'
    rows = "".join(f"<tr><th>{esc(k)}</th><td><code>{esc(value_text(v))}</code></td></tr>"
                   for k, v in values.items())
    return f'<table class="{esc(cls)}">{rows}</table>'


def rows_table(head: list[str], rows: list[list[Any]], cls: str = "rows") -> str:
    """A table of plain cells (escaped); a cell already rendered as HTML is passed as ``Html``."""
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c.html if isinstance(c, Html) else esc(value_text(c))}</td>"
                                    for c in row) + "</tr>" for row in rows)
    return f'<table class="{esc(cls)}"><tr>{th}</tr>{body}</table>'


class Html:
    """Markup this package built itself (already escaped), for a table cell."""

    def __init__(self, html: str) -> None:
        self.html = html


def bullets(items: list[Any], cls: str = "") -> str:
    if not items:
        return ""
    return f'<ul class="{esc(cls)}">' + "".join(f"<li>{esc(value_text(i, 2000))}</li>" for i in items) + "</ul>"


def details(summary: str, body_html: str) -> str:
    """A block the reader opens (HTML's own <details>: no script)."""
    return f"<details><summary>{esc(summary)}</summary>{body_html}</details>"


def pre_json(value: Any, limit: int = 20000) -> str:
    text = json.dumps(value, indent=2, sort_keys=True, default=str)
    if len(text) > limit:
        text = text[:limit] + "\n... (cut; the JSON report has all of it)"
    return f"<pre>{esc(text)}</pre>"


def document(title: str, body: str, kind: str) -> str:
    return ("<!DOCTYPE html>\n"
            f'<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<style>{STYLE}</style></head>"
            f'<body data-report="{esc(kind)}">{body}</body></html>\n')
