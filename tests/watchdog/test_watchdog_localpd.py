"""The watchdog's real probes and remediation steps against a real pair: simulated prefill and decode on
127.0.0.1 (the affected stack: an ABORT kills the prefill's bootstrap thread) behind the real router
(sglang-router 0.3.2). The pair is wedged the way the incident did it (a client killed while its KV transfer
was pending), the watchdog must name it WEDGED within failures x deadline + interval, and with ``restart``
the pair must serve again through the production router, unattended. Short deadlines keep it fast; the
rules are the same as with the service's defaults. Prints the measured times."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pdfleet import fleet
from pdfleet.testing.localpd import HOST, LocalPD, RouterSpec, free_port, stop_process
from pdfleet.watchdog.actions import FleetActions
from pdfleet.watchdog.loop import Config, Watchdog
from pdfleet.watchdog.remediate import Remediator
from pdfleet.watchdog.state import State

pytestmark = pytest.mark.slow


def _pair(pd: LocalPD) -> fleet.Pair:
    return fleet.Pair("local", (
        fleet.Member("prefill", "prefill", pd.prefill_url, "local", HOST, pd.bootstrap_port),
        fleet.Member("decode", "decode", pd.decode_url, "local", HOST)))


def wedge(pd: LocalPD) -> None:
    """A client killed while its KV transfer is pending: the decode pushes ABORT to the prefill."""
    body = {"model": pd.model, "stream": True, "max_tokens": 8, "bootstrap_host": HOST,
            "bootstrap_port": pd.bootstrap_port, "bootstrap_room": 4343,
            "messages": [{"role": "user", "content": "never prefilled"}]}
    raw = json.dumps(body).encode()
    s = socket.create_connection((HOST, pd.decode_port))
    s.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(raw)}\r\n\r\n".encode() + raw)
    time.sleep(0.5)
    s.close()


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


@pytest.mark.parametrize("mode", ["alert", "restart"])
def test_watchdog_names_the_wedged_pair_and_restart_heals_it(mode: str, sim_python: str, router_spec: RouterSpec,
                                                           light_env: Any, tmp_path: Path) -> None:
    args = ["--prometheus-port", str(free_port()), "--prometheus-host", HOST]
    env = light_env(wedge=True, tokens_per_s=400.0)
    with LocalPD([sim_python], tmp_path / "pd", env, router_spec, router_args=args) as pd:
        router = fleet.RouterClient(pd.router_url)
        actions = LocalActions(router, pd.model, None, lambda h, c: (1, "", "unused"), None)
        actions.pd = pd
        logs: list[str] = []
        config = Config(interval_s=2.0, canary_deadline_s=4.0, failures_to_wedge=2, stall_window_s=30.0,
                        state_file=tmp_path / "state.json")
        remediator = Remediator(mode, 1, actions, log=logs.append)
        dog = Watchdog({"local": _pair(pd)}, pd.model, config, router, remediator, log=logs.append)
        stop = threading.Event()
        runner = threading.Thread(target=dog.run, args=(stop,), daemon=True)
        runner.start()
        try:
            deadline = time.monotonic() + 30
            while dog.rounds < 1 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert dog.trackers["local"].state == State.OK, logs
            wedge(pd)
            wedged_at = time.monotonic()
            budget = config.failures_to_wedge * config.canary_deadline_s + config.interval_s
            while dog.trackers["local"].state != State.WEDGED and time.monotonic() - wedged_at < 4 * budget:
                time.sleep(0.1)
            detect = time.monotonic() - wedged_at
            assert dog.trackers["local"].state == State.WEDGED, logs
            # the rule is checked with the round that started just before the wedge allowed for
            assert detect <= budget + config.canary_deadline_s + 5, (detect, logs)
            print(f"\nwatchdog ({mode}): WEDGED {detect:.1f} s after the wedge (budget {budget:g} s)")
            if mode == "alert":
                time.sleep(3 * config.interval_s)
                assert dog.trackers["local"].state == State.WEDGED and remediator.counts == {}
                assert router.find(pd.prefill_url) is not None  # alert mode touches nothing
                return
            while dog.trackers["local"].state != State.OK and time.monotonic() - wedged_at < 240:
                time.sleep(0.2)
            recover = time.monotonic() - wedged_at
            assert dog.trackers["local"].state == State.OK, logs
            assert remediator.counts[("local", "restart", "ok")] == 1, logs
            print(f"watchdog (restart): serving again {recover:.1f} s after the wedge")
            # the pair is back in the production router and a request through it completes
            assert router.find(pd.prefill_url) is not None and router.find(pd.decode_url) is not None
            res = fleet.pair_canary(_pair(pd), pd.model, deadline_s=10)
            assert res.ok, res.problem
            # wedged again right after its restart: the limit (1 per hour) leaves it out of the router
            wedge(pd)
            t1 = time.monotonic()
            while "local" not in remediator.left_out and time.monotonic() - t1 < 120:
                time.sleep(0.2)
            assert "local" in remediator.left_out and remediator.counts[("local", "leave_out", "ok")] == 1, logs
            assert router.find(pd.prefill_url) is None and router.find(pd.decode_url) is None
            assert remediator.counts[("local", "restart", "ok")] == 1
        finally:
            stop.set()
            runner.join(30)
