"""Watching the fleet while a rollout runs: the router's listing with each listed worker's SGLang version."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any


def get_json(url: str, timeout: float = 5) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


@dataclass
class ListingWatch:
    """Polls GET /workers and every listed worker's /server_info version; keeps each distinct snapshot."""

    router: str
    interval_s: float = 0.2
    snapshots: list[dict[str, Any]] = field(default_factory=list)
    errors: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                urls = sorted(w["url"] for w in get_json(self.router + "/workers")["workers"])
                versions = {u: str(get_json(u + "/server_info", 3).get("version")) for u in urls}
                still = sorted(w["url"] for w in get_json(self.router + "/workers")["workers"])
                if still == urls:  # a consistent snapshot: the listing did not change while we asked
                    snap = {"t": time.time(), "urls": urls, "versions": versions}
                    if not self.snapshots or self.snapshots[-1]["versions"] != versions:
                        self.snapshots.append(snap)
            except (OSError, ValueError, KeyError):
                self.errors += 1
            self._stop.wait(self.interval_s)

    def __enter__(self) -> ListingWatch:
        self._t = threading.Thread(target=self._poll, daemon=True)
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join(10)

    def mixed(self) -> list[dict[str, Any]]:
        return [s for s in self.snapshots if len(set(s["versions"].values())) > 1]
