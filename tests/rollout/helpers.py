"""Running rollout.yml on a scratch cluster, and watching the fleet while it runs: the router's listing with
each listed worker's SGLang version. Shared by tests/rollout and the fleet scenario (tests/scenario)."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from pdfleet.paths import REPO_ROOT
from simcluster import BIN, ScratchCluster, keyed_request

ROLLOUT = REPO_ROOT / "rollout.yml"


@dataclass
class Run:
    rc: int
    stdout: str
    seconds: float
    report: dict[str, Any] | None

    def recap(self) -> dict[str, dict[str, int]]:
        out = {}
        for line in self.stdout.split("PLAY RECAP", 1)[-1].splitlines():
            if "ok=" in line and ":" in line:
                host = line.split()[0]
                out[host] = {k: int(v) for k, v in (w.split("=") for w in line.split()[2:])}
        return out


def rollout(c: ScratchCluster, *extra: str, timeout: float = 3600) -> Run:
    """Run rollout.yml on the cluster; its report lands in the cluster's reports dir."""
    reports = c.reports_dir / f"rollout-run-{time.time_ns()}"
    env = dict(os.environ, ANSIBLE_NOCOLOR="1")
    t0 = time.monotonic()
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(c.inventory), str(ROLLOUT),
                           "-e", f"pdfleet_rollout_reports_dir={reports}", *c.vault_args, *extra], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout, check=False)
    found = sorted(reports.glob("rollout-*/rollout.json"))
    report = json.loads(found[-1].read_text()) if found else None
    return Run(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - t0, report)


def get_json(url: str, timeout: float = 5) -> Any:
    with urllib.request.urlopen(keyed_request(url), timeout=timeout) as resp:
        return json.loads(resp.read())


@dataclass
class ListingWatch:
    """Polls GET /workers and every listed worker's /server_info version; keeps each distinct snapshot, the
    number of consistent polls, the fewest workers any of them listed, and every error (a listed worker that
    does not answer is one: a drain stops a worker only after the router stopped listing it)."""

    router: str
    interval_s: float = 0.2
    snapshots: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    polls: int = 0
    fewest_listed: int | None = None
    _stop: threading.Event = field(default_factory=threading.Event)

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                urls = sorted(w["url"] for w in get_json(self.router + "/workers")["workers"])
                versions = {u: str(get_json(u + "/server_info", 3).get("version")) for u in urls}
                still = sorted(w["url"] for w in get_json(self.router + "/workers")["workers"])
                if still == urls:  # a consistent snapshot: the listing did not change while we asked
                    self.polls += 1
                    self.fewest_listed = min(len(urls), self.fewest_listed if self.fewest_listed is not None
                                             else len(urls))
                    snap = {"t": time.time(), "urls": urls, "versions": versions}
                    if not self.snapshots or self.snapshots[-1]["versions"] != versions:
                        self.snapshots.append(snap)
            except (OSError, ValueError, KeyError) as e:
                self.errors.append(f"{time.time():.1f}: {type(e).__name__}: {e}")
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
