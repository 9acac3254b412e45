"""tests/conftest.py runs the tests marked ``mutates`` (they change the shared converged sim) after every other
test, each group in collection order, so a read-only test never sees a cluster a mutating test changed. Collected
for real (no sim needed): the suites that share the sim, in one pytest collection."""

from __future__ import annotations

import subprocess
import sys

from pdfleet.paths import REPO_ROOT

SHARED = ["tests/sim", "tests/provision"]


def _collected(*extra: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly", "-m", "",
                           "-p", "no:cacheprovider", *extra, *SHARED],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [line for line in proc.stdout.splitlines() if "::" in line]


def test_mutating_tests_run_after_every_other_test_in_file_order() -> None:
    order = _collected()
    mutating = _collected("-m", "mutates")
    assert mutating, "no test is marked mutates"
    assert set(mutating) <= set(order)
    # All the mutating tests at the end, in the order they are collected (file order, file by file).
    assert order[len(order) - len(mutating):] == mutating, order
    # They are not simply last in their files already: in tests/sim/test_site.py a mutating test is defined before
    # a read-only one (test_the_watchdog_runs_from_the_wheel_and_watches_the_pair), which must run before it.
    site = [t for t in order if t.startswith("tests/sim/test_site.py::")]
    assert site.index("tests/sim/test_site.py::test_the_watchdog_runs_from_the_wheel_and_watches_the_pair") \
        < site.index("tests/sim/test_site.py::test_drift_fails_and_leaves_the_file_untouched")
