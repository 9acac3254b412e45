"""On a simulated host: a host whose Python cannot install the pin is refused by provision's first play, before
any host changes (no driver package, no service venv), naming host, Python, pin and the pins that would install.

The host gets a real other CPython: the 3.10 build this machine has (pyenv, compiled against the same Debian 12
glibc the sim's bookworm image has), copied into the sim host at the same path, and the role's interpreter input
(sglang_python, with nixl_python, which makes the venv) pointed at it. SGLang 0.5.23 has no cp310 wheel (Ubuntu
22.04's case); the sim's CPU runtime is a Python 3.11 one too, and the refusal names both."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from otherpython import other_python
from pdfleet.patch.manifest import load_manifest
from simcluster import scratch_cluster, skip_reason

HERE = Path(__file__).parent
PY310 = other_python("10")


@pytest.mark.long
@pytest.mark.skipif(PY310 is None, reason="no CPython 3.10 on this machine")
def test_a_sim_host_with_python_3_10_is_refused_before_anything_changes(tmp_path: Path) -> None:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    assert PY310 is not None
    prefix = Path(PY310).parent.parent  # .../3.10.13
    with scratch_cluster(tmp_path) as cluster:
        cluster.set_model("sglang", version="0.5.23", patch=load_manifest("0.5.23").patch_id)
        cluster.playbook(HERE / "sim_only.yml")
        # the interpreter, its shared library and standard library (not its tests or installed packages)
        tar = subprocess.Popen(["tar", "-C", "/", "-c", "--exclude=test", "--exclude=site-packages",
                                "--exclude=__pycache__", "--exclude=*.a", str(prefix).lstrip("/")],
                               stdout=subprocess.PIPE)
        copy = subprocess.run(["ssh", "-F", str(cluster.state_dir / "ssh_config"), "node1", "tar -C / -x"],
                              stdin=tar.stdout, capture_output=True, text=True, timeout=300, check=False)
        assert tar.wait() == 0 and copy.returncode == 0, copy.stderr
        answer = cluster.ssh(f"{PY310} -c 'import sys, ssl; print(sys.version)'")
        assert answer.returncode == 0 and answer.stdout.startswith("3.10."), answer.stderr

        proc = cluster.playbook(HERE / "provision_only.yml", "-e", f"sglang_python={PY310}",
                                "-e", f"nixl_python={PY310}", check=False)
        assert proc.returncode != 0, proc.stdout[-4000:]
        failure = next(line for line in proc.stdout.splitlines() if "cannot install SGLang" in line)
        print(f"\nthe refusal: {failure.strip()}", file=sys.stderr)
        assert f"node1: Python 3.10 (sglang_python {PY310}, glibc 2.36) cannot install SGLang 0.5.23 (sim mode)" \
            in failure
        assert "sglang==0.5.23 has wheels for Python 3.11, 3.12, 3.13 only" in failure
        assert "the prepared CPU runtime (sglang_runtime_path) is built for Python 3.11" in failure
        assert "No supported pin installs there" in failure
        # nothing changed on the host: the driver and NIXL plays never started, no venv, no driver package
        assert "PLAY [Provision | NVIDIA driver, CUDA toolkit, UCX and NIXL]" not in proc.stdout
        state = cluster.ssh("test -e /opt/pdfleet/venv && echo venv; dpkg-query -W -f '${Package}\\n' 'nvidia-*' "
                            "'cuda-*' 'libucx*' 2>/dev/null; true")
        assert state.stdout.strip() == "", state.stdout
