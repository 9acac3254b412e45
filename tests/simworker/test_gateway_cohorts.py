"""smg keeps two cohorts apart by pairing protocol, on the real gateway in front of two simulated pairs: the version
swap's guarantee (pdfleet.fleet.RouterClient.swap_cohorts). Each simulated decode counts its requests per prefill
(bootstrap address), so every pairing smg made is seen.

Without protocols smg pairs any prefill with any decode (the control: the check sees the mixed pairs); with each
pair under its own protocol it never crosses them, and the cohort swap under steady client requests moves the
traffic from one pair to the other with no failed and no refused request.

The gateway picks prefill and decode at random here. Its default, cache-aware, sends every repeat of the test's one
prompt to the worker the first request took: the control then crossed on every request or on none, a coin toss (CI
once saw all 40 on pair b), and the protocol check could pass without ever being tried."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from pdfleet import fleet
from pdfleet_sim.testing.localpd import LocalPD, RouterSpec

from .helpers import chat_status, prefill_peers

pytestmark = pytest.mark.slow


def _specs(pd: LocalPD) -> list[fleet.WorkerSpec]:
    return [fleet.WorkerSpec(pd.prefill_url, "prefill", pd.bootstrap_port), fleet.WorkerSpec(pd.decode_url, "decode")]


def _addr(pd: LocalPD) -> str:
    return f"127.0.0.1:{pd.bootstrap_port}"


@pytest.fixture
def two_pairs(sim_python: str, fake_env: dict[str, str], router: RouterSpec, tmp_path: Path):  # type: ignore[no-untyped-def]
    if router.kind != "smg":
        pytest.skip("pairing protocols are smg's")
    with (LocalPD([sim_python], tmp_path / "a", fake_env, router,
                  router_args=("--prefill-policy", "random", "--decode-policy", "random")) as a,
          LocalPD([sim_python], tmp_path / "b", fake_env, None) as b):
        yield a, b


def test_without_protocols_smg_pairs_across_the_two_pairs(two_pairs: tuple[LocalPD, LocalPD]) -> None:
    a, b = two_pairs
    client = fleet.RouterClient(a.router_url, poll_interval_s=0.1)
    for spec in _specs(b):
        client.add(spec)
    fleet_wait = time.monotonic() + 30
    while time.monotonic() < fleet_wait and sum(w.status == "ready" for w in client.workers()) < 4:
        time.sleep(0.2)
    for _ in range(40):
        assert chat_status(a.router_url, a.model) == 200
    crossed = prefill_peers(a.decode_url).get(_addr(b), 0) + prefill_peers(b.decode_url).get(_addr(a), 0)
    assert crossed > 0, (prefill_peers(a.decode_url), prefill_peers(b.decode_url))


def test_the_cohort_swap_never_pairs_across_and_drops_nothing(two_pairs: tuple[LocalPD, LocalPD]) -> None:
    a, b = two_pairs
    client = fleet.RouterClient(a.router_url, poll_interval_s=0.1)
    statuses: list[int] = []
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set():
            statuses.append(chat_status(a.router_url, a.model))
            time.sleep(0.05)

    t = threading.Thread(target=load, daemon=True)
    t.start()
    try:
        time.sleep(1.0)
        res = client.swap([a.prefill_url, a.decode_url], _specs(b), wait_s=30,
                          cohorts=(fleet.cohort_label("old"), fleet.cohort_label("new")))
        time.sleep(1.0)
    finally:
        stop.set()
        t.join(30)
    assert res["gap_s"] == 0.0 and res["cohorts"] == ["sglang-old", "sglang-new"], res
    assert statuses and all(s == 200 for s in statuses), sorted(set(statuses))
    peers_a, peers_b = prefill_peers(a.decode_url), prefill_peers(b.decode_url)
    assert set(peers_a) == {_addr(a)} and set(peers_b) == {_addr(b)}, (peers_a, peers_b)
    assert peers_b[_addr(b)] > 0, "the new cohort never served"
    assert {w.spec.url for w in client.workers()} == {b.prefill_url, b.decode_url}
