"""The provisioning tests run on the default suite's one converged one-host sim: the fixture ``converged`` of
tests/conftest.py (a test that changes it is marked ``mutates`` and puts it back)."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).parent
PROVISION = HERE / "provision_only.yml"
