"""The decode's prefill heartbeat (SGLang's, see pdfleet_sim.worker.heartbeat) on two simulated workers.

A prefill killed with SIGKILL and started again on the same ports: the pair heals when the prefill stays
down for the heartbeat's limit, requests in flight to it fail with SGLang's "Lost connection" reason,
and a restart faster than the heartbeat leaves the decode with the dead process's registration.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from pdfleet_sim.testing.localpd import HOST, free_port
from pdfleet_sim.testing.simclient import chat_body
from pdfleet_sim.worker.heartbeat import HeartbeatSettings, PrefillHeartbeat

from .helpers import Worker, pd_request, wait_until


class TestSettings:
    def test_defaults_are_sglangs(self) -> None:
        s = HeartbeatSettings.from_env({}, "0.5.15.post1")
        assert (s.interval_s, s.max_failures) == (5.0, 2)

    def test_clamped_like_sglang(self) -> None:
        env = {"SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL": "0.5", "SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE": "0"}
        s = HeartbeatSettings.from_env(env, "0.5.23")
        assert (s.interval_s, s.max_failures) == (2.0, 1)

    def test_count_kept_by_0_5_15_and_forgotten_by_0_5_23(self) -> None:
        assert not HeartbeatSettings.from_env({}, "0.5.15.post1").forget_count_on_failure
        assert HeartbeatSettings.from_env({}, "0.5.23").forget_count_on_failure

    def test_bad_value_is_named(self) -> None:
        with pytest.raises(ValueError, match="SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL='x'"):
            HeartbeatSettings.from_env({"SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL": "x"}, "0.5.23")


@pytest.mark.parametrize("version, second_miss_drops", [("0.5.15.post1", True), ("0.5.23", False)])
def test_round_counts_failures_per_version(version: str, second_miss_drops: bool) -> None:
    """Two misses drop the address; after a drop 0.5.15.post1 drops it again at the next miss."""
    import aiohttp

    async def run() -> list[list[str]]:
        settings = HeartbeatSettings.from_env({}, version)
        dropped: list[str] = []
        async with aiohttp.ClientSession() as session:
            dead = f"{HOST}:{free_port()}"  # nothing listens there: connection refused
            hb = PrefillHeartbeat(settings, session, lambda: [dead], dropped.append)
            return [await hb.check_round() for _ in range(3)]

    rounds = asyncio.run(run())
    assert rounds[0] == [] and rounds[1] != []
    assert (rounds[2] != []) is second_miss_drops


@dataclass
class Pair:
    python: str
    env: dict[str, str]
    tmp: Path
    bootstrap_port: int = field(default_factory=free_port)
    prefill_port: int = field(default_factory=free_port)
    prefill: Worker | None = None
    decode: Worker | None = None
    starts: int = 0

    def argv(self, mode: str) -> list[str]:
        return ["--disaggregation-mode", mode, "--disaggregation-transfer-backend", "nixl",
                "--disaggregation-bootstrap-port", str(self.bootstrap_port)]

    def start_prefill(self, env: dict[str, str] | None = None) -> None:
        self.starts += 1
        self.prefill = Worker(self.python, {**self.env, **(env or {})}, self.tmp / f"prefill{self.starts}.log",
                              self.argv("prefill"), port=self.prefill_port)

    def kill_prefill(self) -> None:
        assert self.prefill is not None
        os.killpg(self.prefill.proc.pid, signal.SIGKILL)
        self.prefill.proc.wait(timeout=10)

    def request(self, timeout: float = 15.0) -> tuple[int, object]:
        assert self.prefill is not None and self.decode is not None
        return pd_request(self.prefill.url, self.decode.url, self.bootstrap_port, "/v1/chat/completions",
                          chat_body("dsv4-sim", "In one sentence, what is PCIe?", 4, False), timeout)

    def decode_log(self) -> str:
        assert self.decode is not None
        return self.decode.log.read_text()

    def close(self) -> None:
        for w in (self.decode, self.prefill):
            if w is not None:
                w.close()


def _pair(sim_python: str, fake_env: dict[str, str], tmp: Path, interval: str) -> Pair:
    env = {**fake_env, "PDFLEET_SIM_DECODE_TOKENS_PER_S": "400",
           "SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL": interval, "SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE": "2"}
    p = Pair(sim_python, env, tmp)
    p.start_prefill()
    p.decode = Worker(sim_python, env, tmp / "decode.log", p.argv("decode"))
    return p


@pytest.fixture
def fast_pair(sim_python: str, fake_env: dict[str, str], tmp_path: Path) -> Iterator[Pair]:
    p = _pair(sim_python, fake_env, tmp_path, "2")
    yield p
    p.close()


@pytest.fixture
def slow_pair(sim_python: str, fake_env: dict[str, str], tmp_path: Path) -> Iterator[Pair]:
    p = _pair(sim_python, fake_env, tmp_path, "60")  # the heartbeat cannot notice a restart of seconds
    yield p
    p.close()


def test_prefill_down_past_the_heartbeat_heals(fast_pair: Pair) -> None:
    p = fast_pair
    assert p.request()[0] == 200
    p.kill_prefill()
    wait_until(lambda: "Lost connection with prefill instance" in p.decode_log(), 30, "the heartbeat to drop it")
    p.start_prefill()
    status, res = p.request()
    assert status == 200, res


def test_in_flight_request_fails_with_lost_connection(fast_pair: Pair) -> None:
    """A request whose prefill dies mid-forward ends with SGLang's node-failure reason, not a hang."""
    p = fast_pair
    assert p.request()[0] == 200
    p.close()
    p.start_prefill({"PDFLEET_SIM_PREFILL_OVERHEAD_MS": "60000"})  # the forward pass never ends in time
    p.decode = Worker(p.python, p.env, p.tmp / "decode2.log", p.argv("decode"))
    out: dict[str, tuple[int, object]] = {}
    t = threading.Thread(target=lambda: out.setdefault("r", p.request(timeout=60)), daemon=True)
    t.start()
    wait_until(lambda: _decode_stage(p) == "transfer", 20, "the request to reach the transfer queue")
    p.kill_prefill()
    t.join(60)
    status, res = out["r"]
    assert status == 500, res
    assert "Decode transfer failed" in str(res) and "Lost connection with prefill instance" in str(res), res


def _decode_stage(p: Pair) -> str:
    assert p.decode is not None
    stages = p.decode.state()["stages"]
    return next(iter(stages), "")


def test_restart_faster_than_the_heartbeat_leaves_a_stale_registration(slow_pair: Pair) -> None:
    """The failure the planner's hold-down rule prevents: the decode keeps pushing to the dead process."""
    p = slow_pair
    assert p.request()[0] == 200
    p.kill_prefill()
    p.start_prefill()  # back on the same ports within seconds, long before two 60 s heartbeats
    status, res = p.request(timeout=8)
    assert status != 200, res
    assert "Lost connection" not in p.decode_log()
