"""Self-contained HTML pages of the verification and rollout reports: inline CSS and SVG, no script, no
network. Written next to the JSON report (same stem, ``.html``) whenever that is written; every string that
comes from a report is escaped. One job per module: :mod:`.svg` (drawing), :mod:`.page` (the document and its
tables), :mod:`.verify_page`, :mod:`.rollout_page`."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def page_path(json_path: Path) -> Path:
    """Where the page of the JSON report at ``json_path`` goes: the same stem, ``.html``."""
    return json_path.with_suffix(".html")


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path


def write_verify_page(json_path: Path, report: dict[str, Any]) -> Path:
    """Render the verification report ``report`` (its JSON dict) next to ``json_path``; the page's path."""
    from pdfleet.htmlreport.verify_page import render

    return _write(page_path(json_path), render(report))


def write_rollout_page(json_path: Path, report: dict[str, Any],
                       client: list[dict[str, Any]] | None = None) -> Path:
    """Render the rollout report ``report`` next to ``json_path`` (``client``: optional client-side request
    outcomes, see :func:`pdfleet.htmlreport.rollout_page.render`); the page's path."""
    from pdfleet.htmlreport.rollout_page import render

    return _write(page_path(json_path), render(report, client))
