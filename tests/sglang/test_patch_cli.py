"""`pdfleet patch check`: the command a person runs before bumping the pin."""

from __future__ import annotations

import json

import pytest
from pdfleet.cli import main
from pdfleet.patch import manifest as patches
from pdfleet.patch import runtime


def test_unsupported_version_exits_non_zero_listing_the_supported(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["patch", "check", "--sglang-version", "0.5.14"]) == 2
    err = capsys.readouterr().err
    assert "SGLang 0.5.14 has no NIXL patch" in err
    for version in patches.supported_versions():
        assert version in err


@pytest.mark.sglang
@pytest.mark.parametrize("version", patches.supported_versions())
def test_check_passes_on_every_supported_version(
    version: str, sglang_runtime: runtime.Runtime, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["patch", "check", "--sglang-version", version, "--json"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["ok"] is True and verdict["version"] == version
    variants = {(c["variant"], c["as_expected"]) for c in verdict["cases"]}
    assert variants == {("pristine", True), ("patched", True)}
    # The pristine file really wedges somewhere on this version: the check is not vacuous.
    assert any(c["variant"] == "pristine" and not c["thread_alive"] for c in verdict["cases"]), verdict
