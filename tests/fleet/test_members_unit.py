"""pdfleet.fleet.members against the fake gateway: each planned worker registered under its own version's pairing
protocol, a pair held out by its lease left to the holder (a swap's serving half registered), a worker whose version
does not read yet waited for, nothing listed touched, prefills before decodes."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from pdfleet import fleet
from pdfleet.fleet import members
from pdfleet.fleet.pairs import Member, Pair
from pdfleet.lease import Lease

from .fakes import FakeRouter


@pytest.fixture
def router() -> Iterator[FakeRouter]:
    r = FakeRouter(smg=True, lag=1).start()
    yield r
    r.stop()


def _pair(host: str, n: int) -> Pair:
    return Pair(host, (Member(f"pdfleet-decode{n}", "decode", f"http://10.0.0.{n}:30001", host),
                       Member(f"pdfleet-prefill{n}", "prefill", f"http://10.0.0.{n}:30000", host,
                              bootstrap_port=8998)))


PAIRS = [_pair("node1", 1), _pair("node2", 2), _pair("node3", 3)]


def _versions(table: dict[str, str | None]):  # type: ignore[no-untyped-def]
    def version_of(url: str) -> tuple[str | None, str]:
        v = table.get(url.rsplit(":", 1)[0].rsplit(".", 1)[1])
        return (v, "") if v else (None, f"GET {url}/server_info: connection refused")
    return version_of


def _no_leases(host: str) -> Lease | None:
    return None


def _posts(r: FakeRouter) -> list[dict]:
    return [json.loads(c.split(" ", 2)[2]) for c in r.calls if c.startswith("POST /workers")]


def test_each_worker_gets_its_own_versions_protocol_and_prefills_go_first(router: FakeRouter) -> None:
    client = fleet.RouterClient(router.url, poll_interval_s=0.01)
    out = members.register_round(client, PAIRS, _no_leases, _versions({"1": "0.5.23", "2": "0.5.23",
                                                                      "3": "0.5.15.post1"}))
    assert out.done and not out.held_out and len(out.added) == 6
    listed = {w.spec.url: w.spec for w in client.workers()}
    assert {u: s.pairing for u, s in listed.items()} == {
        **{f"http://10.0.0.{n}:{p}": "sglang-0.5.23" for n in (1, 2) for p in (30000, 30001)},
        **{f"http://10.0.0.3:{p}": "sglang-0.5.15.post1" for p in (30000, 30001)}}
    assert listed["http://10.0.0.1:30000"].worker_type == "prefill"
    assert listed["http://10.0.0.1:30000"].bootstrap_port == 8998
    order = [p["url"] for p in _posts(router)]
    for n in (1, 2, 3):
        assert order.index(f"http://10.0.0.{n}:30000") < order.index(f"http://10.0.0.{n}:30001")


def test_a_pair_held_out_is_left_to_its_holder_and_a_swaps_serving_half_is_registered(router: FakeRouter) -> None:
    client = fleet.RouterClient(router.url, poll_interval_s=0.01)
    leases = {"node1": Lease("node1", "rollout", "ci@ctl pid 1", "rollout", 0.0, None),
              "node3": Lease("node3", "rollout", "ci@ctl pid 1", "rollout (split-fleet swap)", 0.0, None,
                             in_gateway=True)}
    out = members.register_round(client, PAIRS, leases.get, _versions({"1": "0.5.23", "2": "0.5.15.post1",
                                                                      "3": "0.5.15.post1"}))
    assert out.done
    assert set(out.held_out) == {"http://10.0.0.1:30000", "http://10.0.0.1:30001"}
    assert "rollout" in out.held_out["http://10.0.0.1:30000"]
    assert {w.spec.url for w in client.workers()} == {f"http://10.0.0.{n}:{p}" for n in (2, 3)
                                                       for p in (30000, 30001)}
    assert all("10.0.0.1" not in p["url"] for p in _posts(router))


def test_a_worker_not_up_waits_and_a_later_round_registers_it(router: FakeRouter) -> None:
    client = fleet.RouterClient(router.url, poll_interval_s=0.01)
    table: dict[str, str | None] = {"1": "0.5.23", "2": None, "3": "0.5.23"}
    logged: list[str] = []
    rounds: list[int] = []

    def sleep(_: float) -> None:
        rounds.append(1)
        if len(rounds) == 2:
            table["2"] = "0.5.23"  # node2's workers come up

    out = members.run(client, PAIRS, _no_leases, _versions(table), 0.0, logged.append, sleep, max_rounds=10)
    assert out.done and len(rounds) == 2
    assert len([m for m in logged if m.startswith("waiting for http://10.0.0.2")]) == 2  # said once per worker
    assert "registered http://10.0.0.2:30000 as sglang-0.5.23" in logged
    assert logged[-1].startswith("every planned worker is registered or held out (6 listed")
    assert len(_posts(router)) == 6  # nobody registered twice


def test_a_listed_worker_is_not_touched(router: FakeRouter) -> None:
    client = fleet.RouterClient(router.url, poll_interval_s=0.01)
    client.add(fleet.WorkerSpec("http://10.0.0.1:30000", "prefill", 8998, pairing="sglang-old"))
    router.calls.clear()
    out = members.register_round(client, PAIRS[:1], _no_leases, _versions({"1": "0.5.23"}))
    assert out.added == {"http://10.0.0.1:30001": "sglang-0.5.23"}
    assert client.find("http://10.0.0.1:30000").spec.pairing == "sglang-old"  # type: ignore[union-attr]
    assert not [c for c in router.calls if c.startswith(("PATCH", "DELETE"))]


def test_a_gateway_that_does_not_answer_is_waited_for() -> None:
    client = fleet.RouterClient("http://127.0.0.1:9", timeout_s=0.5, poll_interval_s=0.01)
    logged: list[str] = []
    out = members.run(client, PAIRS, _no_leases, _versions({}), 0.0, logged.append, lambda _: None, max_rounds=3)
    assert not out.done and "" in out.waiting
    assert len([m for m in logged if m.startswith("waiting for the gateway")]) == 1


def test_the_lease_says_whether_its_holder_keeps_the_pair_in_the_gateway(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from pdfleet import lease

    lease.acquire("node1", "rollout", "rollout", who="a", directory=tmp_path)
    lease.acquire("node2", "rollout", "rollout (split-fleet swap)", who="a", directory=tmp_path, in_gateway=True)
    assert lease.read("node1", tmp_path).in_gateway is False  # type: ignore[union-attr]
    assert lease.read("node2", tmp_path).in_gateway is True  # type: ignore[union-attr]
    code, answer = lease.handle({"op": "acquire", "pair": "node3", "kind": "rollout", "purpose": "swap",
                                 "who": "a", "dir": str(tmp_path), "owner_dir": str(tmp_path), "in_gateway": True})
    assert code == 0 and answer["lease"]["in_gateway"] is True
    # a record written before the field existed: the holder took the pair out
    (tmp_path / "node4.json").write_text(json.dumps({"pair": "node4", "kind": "ops", "who": "a", "purpose": "drain",
                                                     "since": 1.0, "expires": None}))
    assert lease.read("node4", tmp_path).in_gateway is False  # type: ignore[union-attr]


def test_the_registrar_imports_with_the_standard_library_alone() -> None:
    """It runs in the gateway's venv (smg, and the pdfleet wheel without its dependencies): no yaml, no ansible,
    no jinja2. `python -S` leaves every site-packages out."""
    import subprocess
    import sys

    from pdfleet.paths import REPO_ROOT

    code = ("import sys; sys.path.insert(0, sys.argv[1]); import pdfleet.fleet.members; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('yaml', 'jinja2', 'ansible')))")
    proc = subprocess.run([sys.executable, "-S", "-c", code, str(REPO_ROOT / "scripts")], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr


def test_the_fleet_package_names_what_it_exports() -> None:
    from pdfleet.fleet import _EXPORTS

    assert sorted(fleet.__all__) == sorted(_EXPORTS)
    for name in fleet.__all__:
        assert getattr(fleet, name) is not None


def test_a_fleet_submodule_is_an_attribute_before_anything_imported_it() -> None:
    """`fleet.gate.router_command` in a fresh interpreter (the suite's order had always imported it first)."""
    import subprocess
    import sys

    code = ("from pdfleet import fleet; import sys; assert 'pdfleet.fleet.gate' not in sys.modules; "
            "print(fleet.gate.router_command.__name__, fleet.steps.__name__); fleet.no_such_name")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert proc.stdout.split() == ["router_command", "pdfleet.fleet.steps"], proc.stdout + proc.stderr
    assert "AttributeError: module 'pdfleet.fleet' has no attribute 'no_such_name'" in proc.stderr


def test_members_from_the_command_line() -> None:
    pairs = members._members([["node1", "prefill", "http://a:1/", "8998"], ["node1", "decode", "http://a:2", "-"],
                              ["node2", "mono", "http://b:1", "-"]])
    assert [p.host for p in pairs] == ["node1", "node2"]
    assert pairs[0].members[0].spec() == fleet.WorkerSpec("http://a:1", "prefill", 8998)
    assert pairs[1].members[0].spec().worker_type == "regular"
    with pytest.raises(ValueError, match="the role is one of"):
        members._members([["node1", "router", "http://a:1", "-"]])


def test_detached_it_returns_at_once_and_registers_in_the_background(router: FakeRouter, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The router unit's ExecStartPost: the command exits 0 at once; its child registers the workers (reading their
    /server_info) with the key from the named environment variable."""
    import os
    import subprocess
    import sys
    import time

    from pdfleet.paths import REPO_ROOT

    from .fakes import FakeWorker

    prefill, decode = FakeWorker(version="0.5.23").start(), FakeWorker(version="0.5.23").start()
    try:
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "scripts"), "GATEWAY_KEY": "k3y"}
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "pdfleet.fleet.members", "--detach", "--gateway", router.url,
                               "--lease-dir", str(tmp_path), "--key-env", "GATEWAY_KEY", "--interval", "0.1",
                               "--member", "node1", "prefill", prefill.url, "8998",
                               "--member", "node1", "decode", decode.url, "-"],
                              env=env, capture_output=True, text=True, timeout=30, check=False)
        assert proc.returncode == 0 and time.monotonic() - t0 < 10, proc.stdout + proc.stderr
        client = fleet.RouterClient(router.url, poll_interval_s=0.05)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(client.workers()) < 2:
            time.sleep(0.1)
        assert {w.spec.url: w.spec.pairing for w in client.workers()} == {prefill.url: "sglang-0.5.23",
                                                                          decode.url: "sglang-0.5.23"}
    finally:
        prefill.stop()
        decode.stop()


def test_a_bad_member_row_is_a_usage_error(capsys) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit) as exc:
        members.main(["--gateway", "http://127.0.0.1:9", "--lease-dir", "/nonexistent",
                      "--member", "node1", "router", "http://a:1", "-"])
    assert exc.value.code == 2 and "the role is one of prefill, mono, decode" in capsys.readouterr().err
