"""Fixtures for the SGLang patch tests: the cached wheels and the heavy CPU runtime (built once)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pdfleet.patch import manifest as patches
from pdfleet.patch import runtime


@pytest.fixture(scope="session")
def wheels() -> dict[str, Path]:
    """Every supported version's sglang wheel (downloaded into .cache/wheels when missing)."""
    return {v: runtime.sglang_wheel(v) for v in patches.supported_versions()}


@pytest.fixture(scope="session")
def sglang_runtime() -> runtime.Runtime:
    """The runtime that imports SGLang's real conn module; a cold build takes a few minutes."""
    return runtime.ensure_runtime()
