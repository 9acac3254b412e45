"""On a machine without caches, the runtime's wheels download while the golden image builds, each with its
own progress lines; with a cached image the build stays sequential (no prefetch). No root needed: the two
builders are replaced by stand-ins that record when they ran."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from pdfleet_sim import image


@pytest.fixture
def builders(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, list]:
    calls: dict[str, list] = {"golden": [], "wheels": [], "runtime": []}
    both_running = threading.Barrier(2, timeout=10)

    def golden(cache_dir: Path, progress: image.Progress) -> Path:
        out = cache_dir / "golden-x"
        if out.is_dir():  # cached: nothing to build
            return out
        progress("mmdebstrap")
        calls["golden"].append(time.monotonic())
        both_running.wait()  # fails (BrokenBarrierError) unless the prefetch runs at the same time
        out.mkdir()
        return out

    def wheels(cache_dir: Path, progress: image.Progress) -> Path:
        progress("pip download")
        calls["wheels"].append(time.monotonic())
        both_running.wait()
        out = cache_dir / ".tmp-wheels-1"
        out.mkdir()
        return out

    def runtime(golden: Path, cache_dir: Path, progress: image.Progress, wheelhouse: Path | None = None) -> Path:
        progress("pip install")
        calls["runtime"].append(wheelhouse)
        return cache_dir / "runtime-x"

    monkeypatch.setattr(image, "golden_path", lambda cache_dir: cache_dir / "golden-x")
    monkeypatch.setattr(image, "ensure_golden", golden)
    monkeypatch.setattr(image, "prefetch_runtime_wheels", wheels)
    monkeypatch.setattr(image, "ensure_runtime", runtime)
    return calls


def test_golden_and_runtime_wheels_build_concurrently(builders: dict[str, list], tmp_path: Path) -> None:
    lines: list[str] = []
    golden, runtime = image.ensure_images(tmp_path, lines.append, with_runtime=True)
    assert golden == tmp_path / "golden-x" and runtime == tmp_path / "runtime-x"
    assert builders["runtime"] == [tmp_path / ".tmp-wheels-1"]  # the install used the prefetched wheels
    assert "golden image: mmdebstrap" in lines and "runtime wheels: pip download" in lines
    assert "runtime: pip install" in lines


def test_cached_golden_image_means_no_prefetch(builders: dict[str, list], tmp_path: Path) -> None:
    (tmp_path / "golden-x").mkdir()
    image.ensure_images(tmp_path, lambda _: None, with_runtime=True)
    assert builders["wheels"] == [] and builders["runtime"] == [None]
