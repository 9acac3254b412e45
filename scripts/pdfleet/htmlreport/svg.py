"""SVG drawing for the report pages: a builder that escapes every string it is given, a linear scale, an axis.

Colours come from CSS classes (:mod:`pdfleet.htmlreport.page` holds the stylesheet), so the SVG carries no
style of its own; a shape's ``title`` becomes an SVG ``<title>`` (the browser's tooltip, no script needed).
"""

from __future__ import annotations

import math
from html import escape


def esc(value: object) -> str:
    """Any value as text safe inside an element or a quoted attribute."""
    return escape(str(value), quote=True)


def num(value: float) -> str:
    """A coordinate: finite, two decimals at most."""
    v = float(value)
    if not math.isfinite(v):
        v = 0.0
    text = f"{v:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


class Scale:
    """Linear map of the domain [d0, d1] onto [r0, r1]; a domain of zero width maps onto r0."""

    def __init__(self, d0: float, d1: float, r0: float, r1: float) -> None:
        self.d0, self.d1, self.r0, self.r1 = float(d0), float(d1), float(r0), float(r1)

    def __call__(self, value: float) -> float:
        if self.d1 == self.d0:
            return self.r0
        v = min(max(float(value), min(self.d0, self.d1)), max(self.d0, self.d1))
        return self.r0 + (v - self.d0) * (self.r1 - self.r0) / (self.d1 - self.d0)


def ticks(d0: float, d1: float, count: int = 6) -> list[float]:
    """Round values spread over [d0, d1] (1, 2 or 5 times a power of ten apart)."""
    span = float(d1) - float(d0)
    if span <= 0 or not math.isfinite(span):
        return [float(d0)]
    raw = span / max(1, count)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(d0 / step) * step
    out, v = [], first
    while v <= d1 + step * 1e-9:
        out.append(round(v, 10))
        v += step
    return out


class Svg:
    """An inline ``<svg>`` (HTML5 needs no namespace on it) built shape by shape. ``label`` names the figure
    for people and ``figure`` for tests (``aria-label``, ``data-figure``)."""

    def __init__(self, width: float, height: float, label: str, figure: str) -> None:
        self.width, self.height, self.label, self.figure = width, height, label, figure
        self.parts: list[str] = []

    @staticmethod
    def _title(title: str | None) -> str:
        return f"<title>{esc(title)}</title>" if title else ""

    def rect(self, x: float, y: float, w: float, h: float, cls: str, title: str | None = None,
             data: dict[str, str] | None = None) -> None:
        attrs = "".join(f' data-{esc(k)}="{esc(v)}"' for k, v in (data or {}).items())
        self.parts.append(f'<rect x="{num(x)}" y="{num(y)}" width="{num(max(w, 0.0))}" height="{num(max(h, 0.0))}" '
                          f'class="{esc(cls)}"{attrs}>{self._title(title)}</rect>')

    def line(self, x1: float, y1: float, x2: float, y2: float, cls: str, title: str | None = None) -> None:
        self.parts.append(f'<line x1="{num(x1)}" y1="{num(y1)}" x2="{num(x2)}" y2="{num(y2)}" class="{esc(cls)}">'
                          f'{self._title(title)}</line>')

    def circle(self, x: float, y: float, r: float, cls: str, title: str | None = None) -> None:
        self.parts.append(f'<circle cx="{num(x)}" cy="{num(y)}" r="{num(r)}" class="{esc(cls)}">'
                          f'{self._title(title)}</circle>')

    def text(self, x: float, y: float, content: object, cls: str = "", anchor: str = "start") -> None:
        anchor = anchor if anchor in ("start", "middle", "end") else "start"
        self.parts.append(f'<text x="{num(x)}" y="{num(y)}" text-anchor="{anchor}" class="{esc(cls)}">'
                          f'{esc(content)}</text>')

    def legend(self, x: float, y: float, items: list[tuple[str, str]]) -> None:
        """Swatches with their labels, left to right from (x, y): ``(css class, label)``."""
        for cls, label in items:
            self.rect(x, y - 9, 10, 10, cls)
            self.text(x + 14, y, label, "small")
            x += 24 + 6 * len(label)

    def x_axis(self, scale: Scale, y: float, unit: str = "s", count: int = 6) -> None:
        """A horizontal axis at ``y`` with round ticks of the scale's domain, labelled ``<value> <unit>``."""
        self.line(scale.r0, y, scale.r1, y, "axis")
        lo, hi = sorted((scale.d0, scale.d1))
        for t in ticks(lo, hi, count):
            x = scale(t)
            self.line(x, y, x, y + 4, "axis")
            self.text(x, y + 15, f"{t:g} {unit}".strip(), "tick", "middle")

    def render(self) -> str:
        return (f'<svg class="figure" data-figure="{esc(self.figure)}" '
                f'role="img" aria-label="{esc(self.label)}" width="{num(self.width)}" height="{num(self.height)}" '
                f'viewBox="0 0 {num(self.width)} {num(self.height)}"><title>{esc(self.label)}</title>'
                + "".join(self.parts) + "</svg>")
