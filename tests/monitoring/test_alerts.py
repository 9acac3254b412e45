"""The alert rules, tested by Prometheus's own `promtool test rules` (Debian's `prometheus` package; make test
installs it through scripts/host-packages.sh), with a firing and a non-firing case for every alert, and proof
that the tests can fail."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from pdfleet.paths import REPO_ROOT

RULES = REPO_ROOT / "ansible/roles/pdfleet_monitoring/files/pdfleet-alerts.yml"
TESTS = Path(__file__).parent / "alerts_test.yml"


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found: install Debian's prometheus package (scripts/host-packages.sh does)")
    return path


def alerts() -> list[str]:
    doc = yaml.safe_load(RULES.read_text())
    return [r["alert"] for g in doc["groups"] for r in g["rules"] if "alert" in r]


def test_rules_are_valid() -> None:
    res = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def test_every_alert_has_a_firing_and_a_non_firing_case() -> None:
    cases: dict[str, set[bool]] = {}
    for t in yaml.safe_load(TESTS.read_text())["tests"]:
        for c in t.get("alert_rule_test", []):
            cases.setdefault(c["alertname"], set()).add(bool(c.get("exp_alerts")))
    names = alerts()
    assert len(names) >= 4, f"{RULES.name}: expected the watchdog's alert rules, found {names}"
    for name in names:
        assert cases.get(name) == {True, False}, f"{name}: needs a firing and a non-firing case in {TESTS.name}"


def test_promtool_test_rules_passes() -> None:
    res = subprocess.run([promtool(), "test", "rules", str(TESTS)], capture_output=True, text=True, timeout=120,
                         cwd=TESTS.parent)
    assert res.returncode == 0, res.stdout + res.stderr


def test_promtool_catches_a_broken_rule(tmp_path: Path) -> None:
    """The same tests against a rule that ignores the canary (fires on /health alone) must fail."""
    rules_dir = tmp_path / "ansible/roles/pdfleet_monitoring/files"
    rules_dir.mkdir(parents=True)
    text = RULES.read_text()
    assert "(pdfleet_watchdog_canary_ok == 0)" in text
    (rules_dir / RULES.name).write_text(text.replace("(pdfleet_watchdog_canary_ok == 0)",
                                                     "(pdfleet_watchdog_canary_ok >= 0)"))
    tests_dir = tmp_path / "tests/monitoring"
    tests_dir.mkdir(parents=True)
    shutil.copy(TESTS, tests_dir / TESTS.name)
    res = subprocess.run([promtool(), "test", "rules", TESTS.name], capture_output=True, text=True, timeout=120,
                         cwd=tests_dir)
    assert res.returncode != 0 and "PdfleetHealthLies" in res.stdout + res.stderr, res.stdout + res.stderr
