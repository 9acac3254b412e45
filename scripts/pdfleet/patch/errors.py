"""The patch feature's errors: a patch series that cannot be found, loaded, verified or applied (exit code 2)."""

from __future__ import annotations

from pdfleet.errors import PdfleetError


class PatchError(PdfleetError):
    """A patch could not be loaded, verified or applied; the message says what to do (exit code 2)."""


class UnsupportedVersionError(PatchError):
    """No patch series exists for the requested SGLang version."""

    def __init__(self, version: str, supported: list[str]) -> None:
        self.version = version
        self.supported = supported
        super().__init__(
            f"SGLang {version} has no NIXL patch in pdfleet; supported versions: "
            f"{', '.join(supported) or 'none'}. Pin sglang_version to one of them, or add "
            f"scripts/pdfleet/patches/{version}/ (patch + manifest)."
        )
