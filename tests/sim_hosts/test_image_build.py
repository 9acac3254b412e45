"""On a machine without caches, the runtime's wheels download while the golden image builds, each with its
own progress lines; with a cached image the build stays sequential (no prefetch). The runtime's build lock: a
second process waits for a build under way, and builds it itself when that build failed; `pdfleet_sim.build`'s
background builder holds the lock from before its start returns. No root needed: the builders are replaced by
stand-ins that record when they ran."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from pdfleet.paths import REPO_ROOT
from pdfleet_sim import build, image


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


# ---------------------------------------------------------------- the runtime's build lock and background build


def _runtime_stub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[Path, list[str]]:
    """A runtime path under tmp_path, and a stand-in build that records who built it and marks it built."""
    final = tmp_path / "runtime-x"
    built: list[str] = []

    def build_runtime(golden: Path, out: Path, progress: image.Progress, wheelhouse: Path | None) -> None:
        built.append(threading.current_thread().name)
        out.mkdir(exist_ok=True)
        (out.parent / f"{out.name}.json").write_text("{}")

    monkeypatch.setattr(image, "runtime_path", lambda cache_dir, golden: final)
    monkeypatch.setattr(image, "build_runtime", build_runtime)
    return final, built


def test_a_runtime_another_process_builds_is_waited_for_not_built_again(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    final, built = _runtime_stub(monkeypatch, tmp_path)
    lines: list[str] = []
    holder = os.open(image.lock_path(final), os.O_CREAT | os.O_RDWR, 0o600)  # the other builder's lock
    fcntl.flock(holder, fcntl.LOCK_EX)
    waiter = threading.Thread(target=image.ensure_runtime, args=(tmp_path / "golden-x", tmp_path, lines.append),
                              name="waiter")
    waiter.start()
    time.sleep(0.5)
    assert waiter.is_alive() and any("waiting for another process's build of runtime-x" in m for m in lines)
    final.mkdir()
    (tmp_path / "runtime-x.json").write_text("{}")  # the other builder finished
    os.close(holder)
    waiter.join(10)
    assert not waiter.is_alive() and built == []


def test_a_background_build_that_failed_is_built_by_the_waiter(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    final, built = _runtime_stub(monkeypatch, tmp_path)
    final.mkdir()  # the failed build's directory, without the mark of a finished one
    holder = os.open(image.lock_path(final), os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(holder, fcntl.LOCK_EX)
    waiter = threading.Thread(target=image.ensure_runtime, args=(tmp_path / "golden-x", tmp_path, lambda _: None),
                              name="waiter")
    waiter.start()
    time.sleep(0.3)
    os.close(holder)  # the builder died
    waiter.join(10)
    assert built == ["waiter"] and image.runtime_built(final)


def test_start_hands_its_lock_to_the_builder_process_without_a_gap(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """build.start's child holds the runtime's build lock from before start returns until it exits; a second start
    meanwhile starts nothing. The child here is a stand-in that records its arguments and sleeps."""
    final, _ = _runtime_stub(monkeypatch, tmp_path)
    monkeypatch.setattr(image, "golden_path", lambda cache_dir: cache_dir / "golden-x")
    monkeypatch.setattr(build, "prepare_nspawn_host", lambda: None)
    child = tmp_path / "child.sh"
    child.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/args\nsleep 2\n')
    child.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(child))
    lines: list[str] = []
    pid = build.start(tmp_path, lines.append)
    assert pid is not None and "build in the background" in lines[-1]
    probe = os.open(image.lock_path(final), os.O_RDWR)
    try:
        with pytest.raises(BlockingIOError):  # the child holds it (no gap between start and the child)
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert build.start(tmp_path, lines.append) is None and "under way already" in lines[-1]
        os.waitpid(pid, 0)
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free once it exited
    finally:
        os.close(probe)
    args = (tmp_path / "args").read_text().split()
    assert args[:3] == ["-m", "pdfleet_sim.build", "--cache-dir"] and "--lock-fd" in args
    (tmp_path / "runtime-x.json").write_text("{}")
    final.mkdir()
    assert build.start(tmp_path, lines.append) is None  # built: nothing to start


def test_the_builder_reports_a_failure_in_its_log_and_exits_1(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def fail(cache_dir: Path, progress: image.Progress) -> None:
        raise image.SimError("mmdebstrap failed")

    monkeypatch.setattr(build, "_build", fail)
    assert build.main(["--cache-dir", str(tmp_path), "--lock-fd", "99"]) == 1
    assert "build failed" in capsys.readouterr().out


def test_make_site_starts_the_build_with_this_machines_python_alone() -> None:
    """The Makefile's sim-images target runs pdfleet_sim.build with python3 before the venv exists: the module
    imports with the standard library only (-S: no site-packages)."""
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "site: host-packages sim-images $(STAMP)" in makefile
    assert "PYTHONPATH=scripts:scripts/sim $(PYTHON) -m pdfleet_sim.build --start" in makefile
    proc = subprocess.run([shutil.which("python3") or sys.executable, "-S", "-c", "import pdfleet_sim.build"],
                          cwd=REPO_ROOT, env={"PYTHONPATH": "scripts:scripts/sim", "PATH": os.environ["PATH"]},
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_the_prefetched_wheels_install_in_balanced_groups_at_once(tmp_path: Path) -> None:
    """From prefetched wheels the runtime installs with one pip per group at the same time (pip unpacks on one
    core); every wheel is in one group, the groups weigh about the same, and the script waits for every pip (its
    exit status fails the build) and proves the set consistent with `pip check`."""
    sizes = {"torch": 900, "cudnn": 700, "cublas": 500, "nccl": 300, "triton": 150, "numpy": 20, "six": 1}
    for name, size in sizes.items():
        (tmp_path / f"{name}-1-py3-none-any.whl").write_bytes(b"x" * size)
    (tmp_path / "not-a-wheel.txt").write_text("x")
    groups = image.wheel_groups(tmp_path, 2)
    names = sorted(Path(w).name.split("-")[0] for g in groups for w in g)
    assert names == sorted(sizes)
    weights = [sum(sizes[Path(w).name.split("-")[0]] for w in g) for g in groups]
    assert max(weights) - min(weights) <= max(sizes.values()) // 2, weights
    assert all(w.startswith(f"{image.RUNTIME_MOUNT}/.pdfleet-wheelhouse/") for g in groups for w in g)
    script = image._runtime_script(groups)
    assert script.count("--no-deps") == 2 and script.count(" & pids=") == 2
    assert "for p in $pids; do wait $p; done" in script and script.startswith("set -eu;")
    assert script.index("pip check") > script.index("wait $p") and "list --format=freeze" in script
    # from the package indexes: one pip resolves (the recipe, hence the cache key, names this form)
    assert "--no-deps" not in image._runtime_script() and "pip check" not in image._runtime_script()
