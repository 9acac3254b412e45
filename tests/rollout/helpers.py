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
from pathlib import Path
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
    path: Path | None = None  # the JSON report (its page beside it: same stem, .html)

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
    return Run(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - t0, report, found[-1] if found else None)


def get_json(url: str, timeout: float = 5) -> Any:
    with urllib.request.urlopen(keyed_request(url), timeout=timeout) as resp:
        return json.loads(resp.read())


class _Poller:
    """A daemon thread that calls ``_round`` every ``interval_s`` while the with block runs."""

    interval_s: float
    _stop: threading.Event

    def _round(self) -> None:
        raise NotImplementedError

    def _poll(self) -> None:
        while not self._stop.is_set():
            self._round()
            self._stop.wait(self.interval_s)

    def __enter__(self) -> _Poller:
        self._t = threading.Thread(target=self._poll, daemon=True)
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join(10)


@dataclass
class ListingWatch(_Poller):
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

    def _round(self) -> None:
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

    def __enter__(self) -> ListingWatch:
        super().__enter__()
        return self

    def mixed(self) -> list[dict[str, Any]]:
        return [s for s in self.snapshots if len(set(s["versions"].values())) > 1]


@dataclass
class PairingWatch(_Poller):
    """Samples, the whole time, each decode's requests per prefill (the simulated decode's ``prefill_peers``, by
    bootstrap address) and every worker's SGLang version: a request that a decode of one version took from a
    prefill of another is a mixed pairing (``mixed``). Counts are compared between two samples in which both
    workers kept their versions; a restarted worker (its counts start again) only resets its baseline, and a worker
    that does not answer (stopped for its upgrade) is skipped."""

    pairs: dict[str, Any]  # host -> pdfleet.fleet.Pair (the plan's)
    interval_s: float = 0.25
    samples: int = 0
    paired: dict[str, int] = field(default_factory=dict)  # "prefill-version > decode-version" -> requests
    mixed: list[dict[str, Any]] = field(default_factory=list)
    _last: dict[str, tuple[str, dict[str, int]]] = field(default_factory=dict)  # decode URL -> (version, peers)
    _versions: dict[str, str] = field(default_factory=dict)  # worker URL -> version at the last sample
    _stop: threading.Event = field(default_factory=threading.Event)

    def _addresses(self) -> dict[str, str]:
        """Bootstrap address (host:port, as the gateway hands it to the decode) -> the prefill's URL."""
        from urllib.parse import urlsplit

        return {f"{urlsplit(m.url).hostname}:{m.bootstrap_port}": m.url
                for p in self.pairs.values() for m in p.members if m.role == "prefill"}

    def _sample(self, prefills: dict[str, str]) -> None:
        versions: dict[str, str] = {}
        states: dict[str, dict[str, Any]] = {}
        for p in self.pairs.values():
            for m in p.members:
                try:
                    states[m.url] = get_json(m.url + "/pdfleet/sim", 2)
                    versions[m.url] = str(states[m.url]["sglang_version"])
                except (OSError, ValueError, KeyError):
                    continue
        self.samples += 1
        for url, st in states.items():
            if st.get("mode") != "decode":
                continue
            version, peers = versions[url], {str(k): int(v) for k, v in (st.get("prefill_peers") or {}).items()}
            last = self._last.get(url)
            self._last[url] = (version, peers)
            if last is None or last[0] != version:
                continue
            for addr, n in peers.items():
                grew = n - last[1].get(addr, 0)
                prefill = prefills.get(addr, "")
                pv, before = versions.get(prefill), self._versions.get(prefill)
                if grew <= 0 or pv is None or pv != before:
                    continue
                key = f"{pv} > {version}"
                self.paired[key] = self.paired.get(key, 0) + grew
                if pv != version:
                    self.mixed.append({"t": time.time(), "decode": url, "decode_version": version,
                                       "prefill": prefill, "prefill_version": pv, "requests": grew})
        self._versions = versions

    def _round(self) -> None:
        self._sample(self._prefills)

    def __enter__(self) -> PairingWatch:
        self._prefills = self._addresses()
        super().__enter__()
        return self
