"""The SM120 hardware facts in each pin's manifest agree with the pinned wheel's own source.

The source is the runtime overlay (``$PDFLEET_RUNTIME_DIR/overlay-<version>``) when it is built, else the cached
sglang wheel; the flashinfer_python wheel each sglang wheel pins is fetched into ``.cache/wheels`` (about 14 MB,
once). Doctored copies show each check failing: a guard added or removed, a default flipped, a condition gone.
"""

from __future__ import annotations

import shutil
from functools import cache
from pathlib import Path

import pytest
from pdfleet.errors import PdfleetError
from pdfleet.patch import hwprobe, runtime
from pdfleet.patch import manifest as patches
from pdfleet.patch.errors import PatchError

VERSIONS = patches.supported_versions()
OLD, NEW = "0.5.15.post1", "0.5.23"  # the pin without and the pin with the SM120 guard


def _source(version: str) -> Path:
    overlay = runtime.Runtime(runtime.default_root()).overlay(version)
    if (overlay / runtime.STAMP).is_file() and (overlay / "sglang").is_dir():
        return overlay
    try:
        return runtime.sglang_wheel(version)
    except PdfleetError as exc:
        pytest.skip(f"neither the runtime overlay {overlay} nor the sglang=={version} wheel is available ({exc}); "
                    "build the runtime: python -m pdfleet.patch.runtime")


@cache
def _flashinfer_has_module(version: str) -> bool:
    return hwprobe.flashinfer_wheel_has_sm120_module(runtime.pure_wheel("flashinfer-python", version))


def _flashinfer(version: str) -> bool:
    try:
        return _flashinfer_has_module(version)
    except PdfleetError as exc:
        pytest.skip(f"the flashinfer_python=={version} wheel is not available ({exc})")


@pytest.fixture(scope="module")
def trees() -> dict[str, hwprobe.SourceTree]:
    return {v: hwprobe.SourceTree(_source(v)) for v in VERSIONS}


def _doctored(tree: hwprobe.SourceTree, tmp_path: Path) -> Path:
    """A directory copy of the files the probes read, for editing."""
    root = tmp_path / "src"
    rels = [hwprobe.ENVIRON, hwprobe.DSV4_BACKEND, hwprobe.DSV4_METADATA, "sglang/srt/server_args.py",
            *tree.find("*.py", "sglang/srt/arg_groups"), *tree.find("flash_mla_sm120.py")]
    for rel in rels:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(tree.read(rel) or "")
    meta = tree.metadata()
    assert meta is not None
    (root / "sglang-0.dist-info").mkdir()
    (root / "sglang-0.dist-info" / "METADATA").write_text(meta)
    return root


def _edit(root: Path, rel: str, old: str, new: str) -> None:
    path = root / rel
    text = path.read_text()
    assert old in text, f"{old!r} not in {rel}: the doctoring below needs updating"
    path.write_text(text.replace(old, new, 1))


def test_every_pin_has_an_sm120_section() -> None:
    for v in VERSIONS:
        hw = patches.load_manifest(v).hardware
        assert hw is not None and hwprobe.SM120 in hw, f"{v}: manifest.yml has no hardware.\"12.0\" section"
        assert hw[hwprobe.SM120].findings or hw[hwprobe.SM120].env, f"{v}: an empty section must say why"


@pytest.mark.parametrize("version", VERSIONS)
def test_manifest_facts_match_the_pinned_wheel(version: str, trees: dict[str, hwprobe.SourceTree]) -> None:
    assert hwprobe.check_hardware(patches.load_manifest(version), trees[version], _flashinfer) == []


def test_the_old_pin_needs_both_facts_and_the_guarded_pin_none(trees: dict[str, hwprobe.SourceTree]) -> None:
    old = patches.load_manifest(OLD).hardware[hwprobe.SM120]  # type: ignore[index]
    assert old.env_for("prefill") == {hwprobe.SPARSE_PREFILL: "0", hwprobe.DECODE_BACKEND: "triton"}
    assert old.env_for("decode") == {hwprobe.DECODE_BACKEND: "triton"}
    new = patches.load_manifest(NEW).hardware[hwprobe.SM120]  # type: ignore[index]
    assert new.env == ()
    guard = hwprobe.probe_sparse_prefill(trees[NEW], _flashinfer)
    assert not guard.needed and "not get_platform().is_sm120" in guard.evidence


def test_adding_the_guard_to_the_old_pin_fails_its_manifest(trees: dict[str, hwprobe.SourceTree],
                                                             tmp_path: Path) -> None:
    root = _doctored(trees[OLD], tmp_path)
    _edit(root, hwprobe.DSV4_BACKEND, "if forward_batch.forward_mode.is_extend_without_speculative() and (",
          "if not _is_sm120 and forward_batch.forward_mode.is_extend_without_speculative() and (")
    problems = hwprobe.check_hardware(patches.load_manifest(OLD), hwprobe.SourceTree(root), _flashinfer)
    assert len(problems) == 2 and "SGLANG_OPT_FLASHMLA_SPARSE_PREFILL=0 is no longer needed" in problems[0]
    assert "the limit --chunked-prefill-size <= 11673 is no longer needed" in problems[1]


def test_removing_the_guard_from_the_new_pin_fails_its_manifest(trees: dict[str, hwprobe.SourceTree],
                                                                 tmp_path: Path) -> None:
    root = _doctored(trees[NEW], tmp_path)
    _edit(root, hwprobe.DSV4_BACKEND, "and not get_platform().is_sm120\n", "\n")
    problems = hwprobe.check_hardware(patches.load_manifest(NEW), hwprobe.SourceTree(root), _flashinfer)
    assert len(problems) == 2 and "SGLANG_OPT_FLASHMLA_SPARSE_PREFILL=0 is needed" in problems[0]
    assert "not listed" in problems[0]
    assert "a limit --chunked-prefill-size <= 11673 is needed" in problems[1]


def test_a_changed_threshold_fails_the_old_manifest(trees: dict[str, hwprobe.SourceTree], tmp_path: Path) -> None:
    root = _doctored(trees[OLD], tmp_path)
    _edit(root, hwprobe.DSV4_METADATA, "THRESHOLD = 11673", "THRESHOLD = 4096")
    problems = hwprobe.check_hardware(patches.load_manifest(OLD), hwprobe.SourceTree(root), _flashinfer)
    assert problems == [f'SGLang {OLD} manifest.yml hardware."12.0": the limit says --chunked-prefill-size <= 11673 '
                        f"from {hwprobe.DSV4_BACKEND}, the source says <= 4096 from {hwprobe.DSV4_BACKEND}"]


def test_a_flipped_default_or_a_new_flashinfer_pin_fails_the_old_manifest(trees: dict[str, hwprobe.SourceTree],
                                                                         tmp_path: Path) -> None:
    root = _doctored(trees[OLD], tmp_path)
    _edit(root, hwprobe.ENVIRON, "SGLANG_OPT_FLASHMLA_SPARSE_PREFILL = EnvBool(True)",
          "SGLANG_OPT_FLASHMLA_SPARSE_PREFILL = EnvBool(False)")
    meta = root / "sglang-0.dist-info" / "METADATA"
    meta.write_text(meta.read_text().replace("flashinfer_python[cu13]==0.6.12", "flashinfer_python[cu13]==0.7.2"))
    problems = hwprobe.check_hardware(patches.load_manifest(OLD), hwprobe.SourceTree(root), _flashinfer)
    assert len(problems) == 2
    assert "SPARSE_PREFILL=0 is no longer needed" in problems[0] and "EnvBool(False)" in problems[0]
    assert "SGLANG_SM120_FLASHMLA_BACKEND=triton is no longer needed" in problems[1]
    assert "flashinfer_python==0.7.2" in problems[1]


def test_a_condition_that_is_gone_stops_the_check(trees: dict[str, hwprobe.SourceTree], tmp_path: Path) -> None:
    root = _doctored(trees[OLD], tmp_path)
    _edit(root, hwprobe.DSV4_BACKEND, "or envs.SGLANG_OPT_FLASHMLA_SPARSE_PREFILL.get()", "or False")
    with pytest.raises(hwprobe.ProbeError, match=r"no condition reads envs\.SGLANG_OPT_FLASHMLA_SPARSE_PREFILL"):
        hwprobe.check_hardware(patches.load_manifest(OLD), hwprobe.SourceTree(root), _flashinfer)
    shutil.rmtree(root / "sglang/srt/layers")
    with pytest.raises(hwprobe.ProbeError, match="moved or went away"):
        hwprobe.probe_sparse_prefill(hwprobe.SourceTree(root), _flashinfer)


def test_a_pin_without_a_section_or_with_an_unprobed_fact_fails(trees: dict[str, hwprobe.SourceTree],
                                                                tmp_path: Path) -> None:
    folder = tmp_path / "patches" / NEW
    shutil.copytree(patches.default_patches_dir() / NEW, folder)
    manifest = folder / patches.MANIFEST_FILE
    original = manifest.read_text()
    head = original.split("\nhardware:")[0]
    manifest.write_text(head + "\n")
    bare = patches.load_manifest(NEW, folder.parent)
    assert bare.hardware is None
    assert "is missing" in hwprobe.check_hardware(bare, trees[NEW], _flashinfer)[0]
    manifest.write_text(original.replace("    env: []", "    env:\n      - {name: SGLANG_FOO, value: '1', roles: "
                                         "[decode], file: sglang/srt/foo.py, condition: none}"))
    problems = hwprobe.check_hardware(patches.load_manifest(NEW, folder.parent), trees[NEW], _flashinfer)
    assert problems == [f'SGLang {NEW} manifest.yml hardware."12.0": SGLANG_FOO has no probe in '
                        "pdfleet.patch.hwprobe.PROBES; add one that reads its condition"]


@pytest.mark.parametrize(("bad", "message"), [
    ("    env:\n      - {name: lower, value: '1', roles: [decode], file: f, condition: c}", "needs name"),
    ("    env:\n      - {name: X_Y, value: '1', roles: [router], file: f, condition: c}", "roles must be"),
    ("    env:\n      - {name: X_Y, value: '1', roles: [decode], file: f}", "condition must be"),
    ("    env: {}", "needs lists env and flags"),
    ("    env: []\n    limits:\n      - {flag: chunked, max: 1, roles: [prefill], file: f, condition: c}\n    x: []",
     "needs flag"),
])
def test_a_malformed_section_is_refused(tmp_path: Path, bad: str, message: str) -> None:
    folder = tmp_path / "patches" / NEW
    shutil.copytree(patches.default_patches_dir() / NEW, folder)
    manifest = folder / patches.MANIFEST_FILE
    text = manifest.read_text().replace("    env: []", bad)
    manifest.write_text(text.replace("    x: []\n    flags: []\n    limits: []\n", "    flags: []\n"))
    with pytest.raises(PatchError, match=message):
        patches.load_manifest(NEW, folder.parent)
