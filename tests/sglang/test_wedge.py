"""The wedge on SGLang's real code: each pristine case fails the same assertion its patched case passes.

Runs ``pdfleet.patch.wedge`` in the heavy runtime (one subprocess per version and conn.py variant).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from pdfleet.patch import runtime, wedge

pytestmark = pytest.mark.sglang

# The case that wedges each version's pristine code, as in production.
WEDGE_CASE = {"0.5.15.post1": "abort-cascade", "0.5.23": "foreign-frame"}
VERSIONS = sorted(WEDGE_CASE)


@pytest.fixture(scope="module")
def results(sglang_runtime: runtime.Runtime) -> dict[tuple[str, str, str], wedge.CaseResult]:
    runs = [(version, patched) for version in VERSIONS for patched in (False, True)]
    with ThreadPoolExecutor(max_workers=2) as pool:  # one runtime subprocess per core
        batches = pool.map(lambda run: wedge.run_cases(*run, runtime_root=sglang_runtime.root), runs)
        return {(r.version, r.variant, r.case): r for batch in batches for r in batch}


def assert_keeps_serving(r: wedge.CaseResult) -> None:
    """The thread is alive, and a transfer info sent afterwards is processed and completed."""
    assert r.thread_alive, f"bootstrap thread died: {r.thread_deaths or r.errors}"
    assert r.probe_state == "WaitingForInput" and r.probe_final == "Success", (r.probe_state, r.probe_final)


@pytest.mark.parametrize("version", VERSIONS)
def test_pristine_wedges(version: str, results: dict) -> None:
    r = results[(version, "pristine", WEDGE_CASE[version])]
    with pytest.raises(AssertionError, match="bootstrap thread died"):
        assert_keeps_serving(r)
    assert r.probe_state == "Bootstrapping", "the later transfer info must never be processed"
    assert any("First message should be" in d for d in r.thread_deaths)


@pytest.mark.parametrize("version", VERSIONS)
def test_patched_keeps_serving(version: str, results: dict) -> None:
    assert_keeps_serving(results[(version, "patched", WEDGE_CASE[version])])


def test_pristine_0_5_15_dies_of_the_first_abort(results: dict) -> None:
    r = results[("0.5.15.post1", "pristine", "abort-cascade")]
    assert r.rooms["live"].get("Failed", 0) == 0, "no ABORT was handled before the thread died"
    assert len(r.thread_deaths) == 1


def test_patched_0_5_15_abort_burst(results: dict) -> None:
    r = results[("0.5.15.post1", "patched", "abort-cascade")]
    assert r.rooms["live"] == {"Failed": len(wedge.LIVE_ROOMS)}
    assert r.rooms["unknown"] == {"unknown": len(wedge.UNKNOWN_ROOMS)}
    assert r.rooms["chunked"] == {"Failed": 25}, "aborted rooms stay Failed: their chunks are skipped"
    assert r.workers_alive and not r.errors, r.errors


def test_pristine_0_5_23_handles_abort_upstream(results: dict) -> None:
    r = results[("0.5.23", "pristine", "abort-cascade")]
    assert_keeps_serving(r)
    assert r.rooms["live"] == {"Failed": len(wedge.LIVE_ROOMS)}


def test_patched_0_5_23_warns_and_keeps_serving(results: dict) -> None:
    r = results[("0.5.23", "patched", "foreign-frame")]
    assert any("unexpected leading frame" in w for w in r.warnings), r.warnings


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("variant", ["pristine", "patched"])
@pytest.mark.parametrize("case", wedge.CASES)
def test_every_case_is_as_expected(version: str, variant: str, case: str, results: dict) -> None:
    assert wedge.evaluate(results[(version, variant, case)]) == []
