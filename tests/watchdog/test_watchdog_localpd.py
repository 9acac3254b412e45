"""The watchdog's real probes and remediation steps against a real pair on 127.0.0.1 behind the real router
(sglang-router 0.3.2). Short deadlines keep it fast; the rules are the same as with the service's defaults.
Prints the measured times.

* ``test_watchdog_names_a_real_sglang_wedge``: the prefill runs SGLang 0.5.15.post1's real, pristine NIXL
  ``bootstrap_thread`` (the heavy CPU runtime). One foreign frame into ONE TP rank's bootstrap socket kills that
  rank's thread with SGLang's own assert; the watchdog must name the pair WEDGED within
  failures x deadline + interval, its journal scan (over the workers' log files) must find the death in the
  traceback Python printed for SGLang's thread, and ``pdfleet verify`` against the same pair must fail with that
  signature. Nothing in this test or in the simulated worker prints the signature: the real code does.
* ``test_restart_heals_and_the_limit_leaves_out``: remediation (restart, re-add through the production router,
  the once-an-hour limit). It wedges the pair with the light KV stand-in's fake backend
  (``PDFLEET_SIM_FAKE_ABORT_KILLS_THREAD``: an ABORT stops its bootstrap thread) because it is about what the
  watchdog does to a wedged pair, not about recognising a real one (the test above): its journal is not read,
  and nothing here depends on what the stand-in prints.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pdfleet import fleet
from pdfleet.paths import REPO_ROOT
from pdfleet.watchdog.actions import FleetActions
from pdfleet.watchdog.journal import JournalWatch
from pdfleet.watchdog.loop import Config, Watchdog
from pdfleet.watchdog.remediate import Remediator
from pdfleet.watchdog.state import State
from pdfleet_sim.testing.localpd import HOST, LocalPD, RouterSpec, free_port, http_get, stop_process
from pdfleet_sim.testing.realwedge import SGLANG_VERSION, FileJournal, foreign_frame, runtime_pd_env
from pdfleet_sim.testing.waiting import wait_until

pytestmark = pytest.mark.slow

SGLANG_ASSERT = "AssertionError: First message should be b'NixlMsgGuard'. Foreign traffic?"


def _pair(pd: LocalPD) -> fleet.Pair:
    return fleet.Pair("local", (
        fleet.Member("prefill", "prefill", pd.prefill_url, "local", HOST, pd.bootstrap_port),
        fleet.Member("decode", "decode", pd.decode_url, "local", HOST)))


def kill_client_mid_transfer(pd: LocalPD) -> None:
    """A client killed while its KV transfer is pending: the decode pushes ABORT to the prefill."""
    body = {"model": pd.model, "stream": True, "max_tokens": 8, "bootstrap_host": HOST,
            "bootstrap_port": pd.bootstrap_port, "bootstrap_room": 4343,
            "messages": [{"role": "user", "content": "never prefilled"}]}
    raw = json.dumps(body).encode()
    s = socket.create_connection((HOST, pd.decode_port))
    try:
        s.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(raw)}\r\n\r\n".encode() + raw)
        # the decode holds the request, waiting for its KV: only then does a disconnect make it send ABORT
        wait_until("the decode holding the request", lambda: fleet.read_load(pd.decode_url, "decode").busy, 30,
                   detail=lambda: fleet.read_load(pd.decode_url, "decode").describe())
    finally:
        s.close()


@pytest.fixture
def watching() -> Iterator[Any]:
    """Runs a watchdog in a thread; stops it at the end of the test."""
    started: list[tuple[threading.Event, threading.Thread]] = []

    def start(dog: Watchdog) -> Watchdog:
        stop = threading.Event()
        runner = threading.Thread(target=dog.run, args=(stop,), daemon=True)
        runner.start()
        started.append((stop, runner))
        wait_until("the watchdog's first round", lambda: dog.rounds >= 1, 60)
        return dog

    yield start
    for stop, runner in started:
        stop.set()
        runner.join(30)


@pytest.fixture(scope="module")
def sglang_runtime() -> Any:
    """The heavy CPU runtime with SGLang 0.5.15.post1's real conn.py (built once, cached, when missing)."""
    from pdfleet.patch.runtime import ensure_runtime

    return ensure_runtime([SGLANG_VERSION])


@pytest.mark.sglang
def test_watchdog_names_a_real_sglang_wedge(sglang_runtime: Any, router_spec: RouterSpec, watching: Any,
                                            tmp_path: Path) -> None:
    rt = sglang_runtime
    args = ["--prometheus-port", str(free_port()), "--prometheus-host", HOST]
    with LocalPD([str(rt.python)], tmp_path / "pd", runtime_pd_env(rt, patched=False), router_spec,
                 router_args=args) as pd:
        router = fleet.RouterClient(pd.router_url)
        logs: list[str] = []
        config = Config(interval_s=2.0, canary_deadline_s=4.0, failures_to_wedge=2, stall_window_s=30.0)
        journal = JournalWatch(FileJournal({"prefill": pd.log_dir / "prefill.log",
                                            "decode": pd.log_dir / "decode.log"}))
        dog = watching(Watchdog({"local": _pair(pd)}, pd.model, config, router, Remediator("alert", 1, None,
                                log=logs.append), journal=journal, log=logs.append))
        tracker = dog.trackers["local"]
        assert tracker.state == State.OK, (tracker.reasons, logs)
        assert dog.observers["local"].workers["prefill"].journal is not None, "the journal is read"
        assert journal.units[("local", "prefill")].alarming() == {}, "... and clean before the frame"

        foreign_frame(HOST, pd.bootstrap_port, rank=1)
        sent = time.monotonic()
        # The thread's death in the journal is conclusive: named by the round that reads it, i.e. within the
        # round under way when the frame arrived (its canary) and the next one (interval, its canary).
        budget = config.interval_s + 2 * config.canary_deadline_s
        wait_until("WEDGED", lambda: tracker.state == State.WEDGED, 4 * budget, detail=lambda: (tracker.reasons, logs))
        detect = time.monotonic() - sent
        assert detect <= budget + 5, (detect, tracker.reasons, logs)
        by_canaries = config.failures_to_wedge * config.canary_deadline_s + config.interval_s
        print(f"\nwatchdog (real SGLang wedge): WEDGED {detect:.1f} s after the foreign frame "
              f"(one round: {budget:g} s; failed canaries alone: {by_canaries:g} s)")
        named = [r for r in tracker.reasons if r.startswith("journal: prefill: ") and "thread_death" in r]
        assert named, tracker.reasons
        # the logs half: the journal scan found the death in what SGLang's thread and Python wrote
        scanned = wait_until("the prefill's thread death in its journal",
                             lambda: journal.units[("local", "prefill")].counts.get("thread_death"), 30)
        assert scanned >= 1
        examples = journal.units[("local", "prefill")].examples
        assert SGLANG_ASSERT in examples, examples
        assert not journal.units[("local", "decode")].alarming(), journal.units[("local", "decode")]
        text = pd.log_text("prefill")
        # ... printed from the pristine conn.py of the runtime, in its bootstrap thread
        assert f'File "{rt.conn_file(SGLANG_VERSION, False)}", line' in text and "in bootstrap_thread" in text
        # Every death is SGLang's assert (the frame killed one rank; the decode's ABORTs for the canaries that
        # timed out then kill the others: pristine 0.5.15.post1 has no ABORT branch)
        deaths = text.count("Exception in thread")
        assert deaths >= 1 and text.count(SGLANG_ASSERT) == deaths, text[-3000:]
        assert http_get(pd.prefill_url + "/health")[0] == 200, "the wedge keeps /health at 200"
        seen = dog.rounds
        wait_until("two more rounds", lambda: dog.rounds >= seen + 2, 4 * budget)
        assert tracker.state == State.WEDGED and dog.remediator.counts == {}, (tracker.reasons, logs)
        assert router.find(pd.prefill_url) is not None, "alert mode touches nothing"

        # the verification protocol against the same wedged pair fails, naming the same death
        report = tmp_path / "verify.json"
        proc = subprocess.run(
            [sys.executable, "-m", "pdfleet.verify", "--router", pd.router_url, "--prefill", pd.prefill_url,
             "--decode", pd.decode_url, "--log-file", f"prefill={pd.log_dir / 'prefill.log'}",
             "--log-file", f"decode={pd.log_dir / 'decode.log'}", "--expect-model", pd.model,
             "--report", str(report), "--cycles", "1", "--concurrency", "8", "--window", "2", "--pause", "1",
             "--settle", "1", "--liveness-deadline", "5", "--recovery-deadline", "5", "--probe-concurrency", "4",
             "--probe-deadline", "5", "--idle-deadline", "5", "--skip", "bench",
             "--baseline-file", str(tmp_path / "baselines.json")],
            capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "scripts")})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads(report.read_text())
    assert data["verdict"] == "fail"
    checks = {c["name"]: c for c in data["checks"]}
    assert checks["logs"]["status"] == "fail", checks["logs"]
    # the deaths it names are SGLang's thread's (before the protocol or during it): Python's header for the
    # bootstrap_thread or SGLang's assert (threads dying at once may interleave their reports: any, not all)
    measured = checks["logs"]["measured"]
    lines = [d["line"] for d in measured["deaths"]]  # the decode has none (asserted by the journal above)
    assert measured["thread_death"] >= 1 and lines, measured
    assert any("(bootstrap_thread)" in line or SGLANG_ASSERT in line for line in lines), lines
    assert checks["liveness"]["status"] == "fail", checks["liveness"]
    print(f"verify on the wedged pair: exit {proc.returncode}, failed: {[f['check'] for f in data['failures']]}")


class LocalActions(FleetActions):
    """The real fleet steps, with the unit restart done on the local processes instead of systemctl."""

    pd: LocalPD

    def restart(self, pair: fleet.Pair) -> None:
        env = {**os.environ, **self.pd.worker_env}
        for proc in [p for p in self.pd.procs if p.name in ("prefill", "decode")]:
            stop_process(proc.popen, grace_s=0.5)
            self.pd.procs.remove(proc)
            new = self.pd._spawn(proc.name, self.pd.worker_command(proc.name), env)
            self.pd._wait_http(new, (self.pd.prefill_url if proc.name == "prefill" else self.pd.decode_url)
                               + "/health")


def test_restart_heals_and_the_limit_leaves_out(sim_python: str, router_spec: RouterSpec, light_env: Any,
                                                watching: Any, tmp_path: Path) -> None:
    args = ["--prometheus-port", str(free_port()), "--prometheus-host", HOST]
    env = light_env(wedge=True, tokens_per_s=400.0)
    with LocalPD([sim_python], tmp_path / "pd", env, router_spec, router_args=args) as pd:
        router = fleet.RouterClient(pd.router_url)
        actions = LocalActions(router, pd.model, None, lambda h, c: (1, "", "unused"), None)
        actions.pd = pd
        logs: list[str] = []
        config = Config(interval_s=2.0, canary_deadline_s=4.0, failures_to_wedge=2, stall_window_s=30.0,
                        state_file=tmp_path / "state.json")
        remediator = Remediator("restart", 1, actions, log=logs.append)
        dog = watching(Watchdog({"local": _pair(pd)}, pd.model, config, router, remediator, log=logs.append))
        tracker = dog.trackers["local"]
        assert tracker.state == State.OK, logs
        kill_client_mid_transfer(pd)
        wedged_at = time.monotonic()
        wait_until("WEDGED or a restart", lambda: tracker.state == State.WEDGED or remediator.counts, 120,
                   detail=lambda: logs)
        wait_until("OK after the restart", lambda: tracker.state == State.OK
                   and remediator.counts.get(("local", "restart", "ok")), 240, 0.2, detail=lambda: logs)
        print(f"\nwatchdog (restart): serving again {time.monotonic() - wedged_at:.1f} s after the wedge")
        assert remediator.counts[("local", "restart", "ok")] == 1, logs
        assert any("-> WEDGED" in line for line in logs), logs
        # the pair is back in the production router and a request through it completes
        assert router.find(pd.prefill_url) is not None and router.find(pd.decode_url) is not None
        res = fleet.pair_canary(_pair(pd), pd.model, deadline_s=10)
        assert res.ok, res.problem
        # wedged again right after its restart: the limit (1 per hour) leaves it out of the router
        kill_client_mid_transfer(pd)
        wait_until("left out", lambda: "local" in remediator.left_out, 120, 0.2, detail=lambda: logs)
        assert remediator.counts[("local", "leave_out", "ok")] == 1, logs
        assert router.find(pd.prefill_url) is None and router.find(pd.decode_url) is None
        assert remediator.counts[("local", "restart", "ok")] == 1
