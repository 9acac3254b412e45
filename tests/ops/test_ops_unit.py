"""`pdfleet ops` with fake hosts (no SSH): every host reported in parallel, one line each, an unreachable host
is its own line and makes the exit code 2, a failed check 1."""

from __future__ import annotations

import json

import pytest
from pdfleet import fleet
from pdfleet.inventory_plan import plan_inventory
from pdfleet.ops import tasks
from pdfleet.paths import REPO_ROOT
from pdfleet.remote import RemoteError
from pdfleet.versions import PINS

FLEET = REPO_ROOT / "inventory" / "sim-fleet"


def fake_runner(down: set[str], inactive: set[str], wedged: bool = False,
                gateway: str = PINS["sglang_router_version"]) -> tasks.Runner:
    def run(host: str, command: str) -> tuple[int, str, str]:
        if host in down:
            raise RemoteError(f"host {host} (10.0.0.9): NoValidConnectionsError: unable to connect")
        units = command.split("systemctl is-active ", 1)[1].split(";", 1)[0].split()
        active = "\n".join("inactive" if u in inactive else "active" for u in units)
        record = json.dumps({"version": "0.5.15.post1", "patched": True})
        state = json.dumps({"pairs": {"node1": {"state": "WEDGED" if wedged else "OK"}}}) if host == "router1" else ""
        # the gateway's version is asked of the router host only, from the gateway's own venv
        version = gateway if "/opt/pdfleet/gateway/bin/python" in command else ""
        assert (host == "router1") == ("importlib.metadata" in command), (host, command)
        return 0, f"{active}\n--\n{record}\n--\n{state}\n--\n{version}\n", ""

    return run


def ready(urls: set[str]) -> dict[str, str]:
    return dict.fromkeys(urls, "ready")


def test_status_reports_every_host_and_an_unreachable_one_exits_2() -> None:
    plan = plan_inventory(FLEET)
    urls = {u for p in fleet.pairs_from_plan(plan).values() for u in p.urls}
    lines = tasks.status(plan, fake_runner({"node2"}, set()), ready(urls), "pass (verify-x.json)")
    by_host = {line.host: line for line in lines}
    assert set(by_host) == set(plan.hosts)  # the others are still reported
    assert by_host["node2"].code == tasks.UNREACHABLE and "node2" in by_host["node2"].render()
    assert all(line.code == tasks.OK for h, line in by_host.items() if h != "node2"), [x.render() for x in lines]
    assert "sglang 0.5.15.post1 patched=True" in by_host["node1"].text
    assert "watchdog: all pairs OK" in by_host["router1"].text
    assert f"gateway smg {PINS['sglang_router_version']}" in by_host["router1"].text
    assert "in router 2/2 (ready, ready)" in by_host["node1"].text
    assert tasks.exit_code(lines) == 2


def test_status_names_an_inactive_unit_a_drained_pair_and_the_watchdog_view() -> None:
    plan = plan_inventory(FLEET)
    pairs = fleet.pairs_from_plan(plan)
    unit = plan.hosts["node3"][0].name
    urls = {u for h, p in pairs.items() if h != "node1" for u in p.urls}
    lines = {x.host: x for x in tasks.status(plan, fake_runner(set(), {unit}, wedged=True), ready(urls),
                                             "none found")}
    assert lines["node3"].code == tasks.FAILED and f"{unit} inactive" in lines["node3"].text
    assert lines["node1"].code == tasks.FAILED and "drained" in lines["node1"].text
    assert lines["router1"].code == tasks.FAILED and "WEDGED" in lines["router1"].text
    assert lines["node2"].code == tasks.OK
    assert tasks.exit_code(list(lines.values())) == 1


def test_status_names_each_workers_gateway_state_and_a_gateway_off_its_pin() -> None:
    plan = plan_inventory(FLEET)
    pairs = fleet.pairs_from_plan(plan)
    states = ready({u for p in pairs.values() for u in p.urls}) | {pairs["node2"].urls[0]: "draining"}
    lines = {x.host: x for x in tasks.status(plan, fake_runner(set(), set(), gateway="1.12.0"), states, "none")}
    assert lines["node2"].code == tasks.FAILED and "(draining, ready)" in lines["node2"].text
    assert "not every worker is ready in the gateway" in lines["node2"].text
    assert lines["router1"].code == tasks.FAILED
    assert f"gateway smg 1.12.0, the plan pins {PINS['sglang_router_version']}" in lines["router1"].text
    missing = {x.host: x for x in tasks.status(plan, fake_runner(set(), set(), gateway=""), states, "none")}
    assert "gateway smg not installed" in missing["router1"].text and missing["router1"].code == tasks.FAILED
    assert lines["node1"].code == tasks.OK


def test_logs_runs_only_where_the_unit_is() -> None:
    plan = plan_inventory(FLEET)
    unit = plan.hosts["node2"][0].name
    seen: list[str] = []

    def run(host: str, command: str) -> tuple[int, str, str]:
        seen.append(host)
        assert f"journalctl -u {unit} --since '10 min ago'" in command
        return 0, "line one\nline two\n", ""

    out = tasks.logs(plan, run, unit, "10 min ago")
    assert seen == ["node2"] and out[0][0].code == tasks.OK and out[0][1].count("line") == 2


def test_canary_unreachable_pair_exits_2_failing_one_1_others_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    pairs = fleet.pairs_from_plan(plan_inventory(FLEET))
    down = set(pairs["node2"].urls)

    def fake_canary(pair: fleet.Pair, model: str, deadline_s: float = 30.0) -> fleet.CanaryResult:
        if pair.host == "node1":
            return fleet.CanaryResult(pair.host, True, 200, 0.5, completion_tokens=16)
        if pair.host == "node2":
            return fleet.CanaryResult(pair.host, False, 0, 3.0, "decode0: POST ...: [Errno 113] No route to host")
        return fleet.CanaryResult(pair.host, False, 0, 20.0, "decode2: POST ...: timed out")

    monkeypatch.setattr(fleet, "pair_canary", fake_canary)
    lines = {x.host: x for x in tasks.canary(pairs, "m", 20.0,
                                             silent=lambda url: "No route to host" if url in down else None)}
    assert set(lines) == set(pairs)
    assert lines["node1"].code == tasks.OK
    assert lines["node2"].code == tasks.UNREACHABLE and "no HTTP answer" in lines["node2"].render()
    assert lines["node3"].code == tasks.FAILED and "timed out" in lines["node3"].text  # answers, but not the canary
    assert tasks.exit_code(list(lines.values())) == 2
