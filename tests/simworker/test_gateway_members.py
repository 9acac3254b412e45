"""The gateway's registrar (pdfleet.fleet.members) on the real gateway (smg, started with no worker, as pdfleet's
unit starts it) in front of two simulated pairs that report two SGLang versions: each worker is registered under
its own version's pairing protocol, so smg never pairs a prefill of one version with a decode of the other while
both serve; a pair whose lease holder took it out is left out until the lease is gone.

The control is tests/simworker/test_gateway_cohorts.py::test_without_protocols_smg_pairs_across_the_two_pairs: the
same two pairs, unlabelled (as smg's command line lists them), cross on a good share of the requests."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pdfleet import fleet, lease
from pdfleet.fleet import members
from pdfleet_sim.testing.localpd import HOST, LocalPD, RouterSpec, free_port, http_get, stop_process

from .helpers import chat_status, prefill_peers

pytestmark = pytest.mark.slow

VERSIONS = {"a": "1.0.0", "b": "2.0.0"}


@pytest.fixture
def gateway(router: RouterSpec, tmp_path: Path) -> Iterator[str]:
    """smg in PD mode with no worker on its command line (random picks, so a crossing would show)."""
    if router.kind != "smg":
        pytest.skip("pairing protocols are smg's")
    port = free_port()
    cmd = [*router.head(), "--pd-disaggregation", "--host", HOST, "--port", str(port), "--prometheus-host", HOST,
           "--prometheus-port", str(free_port()), "--prefill-policy", "random", "--decode-policy", "random",
           "--worker-startup-check-interval", "1"]
    with (tmp_path / "gateway.log").open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin"})
    url = f"http://{HOST}:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if http_get(url + "/health", timeout=1.0)[0] == 200:
                    break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "gateway.log").read_text()
            time.sleep(0.2)
        yield url
    finally:
        stop_process(proc)


@pytest.fixture
def two_versions(sim_python: str, fake_env: dict[str, str], tmp_path: Path):  # type: ignore[no-untyped-def]
    with (LocalPD([sim_python], tmp_path / "a", {**fake_env, "PDFLEET_SIM_FAKE_VERSION": VERSIONS["a"]}) as a,
          LocalPD([sim_python], tmp_path / "b", {**fake_env, "PDFLEET_SIM_FAKE_VERSION": VERSIONS["b"]}) as b):
        yield a, b


def _argv(gateway: str, leases: Path, *pds: tuple[str, LocalPD]) -> list[str]:
    argv = ["--gateway", gateway, "--lease-dir", str(leases), "--interval", "0.2", "--rounds", "50"]
    for host, pd in pds:
        argv += ["--member", host, "prefill", pd.prefill_url, str(pd.bootstrap_port),
                 "--member", host, "decode", pd.decode_url, "-"]
    return argv


def test_each_worker_is_registered_under_its_versions_protocol_and_never_crosses(
        gateway: str, two_versions: tuple[LocalPD, LocalPD], tmp_path: Path) -> None:
    a, b = two_versions
    client = fleet.RouterClient(gateway, poll_interval_s=0.1)
    assert client.workers() == []  # nothing on its command line
    assert members.main(_argv(gateway, tmp_path / "leases", ("node-a", a), ("node-b", b))) == 0
    listed = {w.spec.url: w.spec.pairing for w in client.workers()}
    assert listed == {a.prefill_url: "sglang-1.0.0", a.decode_url: "sglang-1.0.0",
                      b.prefill_url: "sglang-2.0.0", b.decode_url: "sglang-2.0.0"}, listed
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and sum(w.status == "ready" for w in client.workers()) < 4:
        time.sleep(0.2)
    statuses = [chat_status(gateway, "dsv4-sim") for _ in range(40)]
    assert statuses == [200] * 40, statuses
    peers_a, peers_b = prefill_peers(a.decode_url), prefill_peers(b.decode_url)
    assert set(peers_a) == {f"127.0.0.1:{a.bootstrap_port}"} and set(peers_b) == {f"127.0.0.1:{b.bootstrap_port}"}, \
        (peers_a, peers_b)  # both cohorts served (random picks), neither across


def test_a_pair_its_lease_holder_took_out_waits_for_the_holder(
        gateway: str, two_versions: tuple[LocalPD, LocalPD], tmp_path: Path) -> None:
    a, b = two_versions
    leases = tmp_path / "leases"
    lease.acquire("node-b", "ops", "drain", who="a person", directory=leases)
    client = fleet.RouterClient(gateway, poll_interval_s=0.1)
    assert members.main(_argv(gateway, leases, ("node-a", a), ("node-b", b))) == 0
    assert {w.spec.url for w in client.workers()} == {a.prefill_url, a.decode_url}
    lease.release("node-b", "ops", who="a person", directory=leases)
    assert members.main(_argv(gateway, leases, ("node-a", a), ("node-b", b))) == 0  # the next start of the gateway
    assert {w.spec.url for w in client.workers()} == {a.prefill_url, a.decode_url, b.prefill_url, b.decode_url}
