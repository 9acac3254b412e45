"""A real headless browser for the report pages: Debian's chromium-headless-shell (scripts/host-packages.sh
installs it; `make test` runs that) loads the page from its file and dumps the DOM it built; the DOM is then
read with the standard library's parser. Shared by tests/htmlreport and the sim test of the verify stage
(tests/sim/test_site.py). A missing browser fails the test with the install hint: nothing is skipped."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest

BROWSER = "chromium-headless-shell"
INSTALL_HINT = (f"{BROWSER} is not installed: as root, apt-get install {BROWSER} (or scripts/host-packages.sh --tests, "
                "which `make test` runs)")


def browser() -> str:
    found = shutil.which(BROWSER) or next((p for p in (f"/usr/bin/{BROWSER}",) if Path(p).is_file()), None)
    if found is None:
        pytest.fail(INSTALL_HINT)
    return found


def dump_dom(page: Path, timeout_s: float = 120.0) -> str:
    """The DOM the browser built from ``page`` (no network: the page needs none, and file:// is all it gets)."""
    with tempfile.TemporaryDirectory(prefix="pdfleet-browser-") as profile:
        proc = subprocess.run([browser(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                               f"--user-data-dir={profile}", "--dump-dom", page.resolve().as_uri()],
                              capture_output=True, text=True, timeout=timeout_s, check=False)
    assert proc.returncode == 0 and "<html" in proc.stdout, (
        f"{BROWSER} exited {proc.returncode} on {page}: {proc.stderr[-2000:]}")
    return proc.stdout


@dataclass
class Dom:
    """What the report tests look for in a dumped DOM."""

    figures: list[str] = field(default_factory=list)  # data-figure of each <svg>
    shapes: list[dict[str, str]] = field(default_factory=list)  # attributes of each rect/circle/line inside an svg
    tags: set[str] = field(default_factory=set)
    links: list[str] = field(default_factory=list)  # every src/href
    verdict: str = ""  # the text of #verdict
    text: str = ""  # all text

    def phases(self, host: str) -> list[str]:
        return [s["data-phase"] for s in self.shapes if s.get("data-host") == host and "data-phase" in s]


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.dom = Dom()
        self._svg = 0
        self._verdict = 0
        self._text: list[str] = []
        self._verdict_text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.dom.tags.add(tag)
        self.dom.links += [a[k] for k in ("src", "href") if k in a]
        if tag == "svg":
            self._svg += 1
            self.dom.figures.append(a.get("data-figure", ""))
        elif self._svg and tag in ("rect", "circle", "line"):
            self.dom.shapes.append(a)
        if self._verdict:
            self._verdict += 1
        elif a.get("id") == "verdict":
            self._verdict = 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self._svg = max(0, self._svg - 1)
        if self._verdict:
            self._verdict -= 1

    def handle_data(self, data: str) -> None:
        self._text.append(data)
        if self._verdict:
            self._verdict_text.append(data)

    def close(self) -> None:
        super().close()
        self.dom.text = " ".join(self._text)
        self.dom.verdict = " ".join("".join(self._verdict_text).split())


def read_dom(html: str) -> Dom:
    reader = _Reader()
    reader.feed(html)
    reader.close()
    return reader.dom


def load(page: Path) -> Dom:
    """``page`` as a headless browser built it."""
    return read_dom(dump_dom(page))
