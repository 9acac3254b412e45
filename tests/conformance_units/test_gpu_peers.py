"""The one `nvidia-smi topo -p2p` parser and judgement (pdfleet.gpu_peers) on the driver's real layout, and the sim
hosts' stand-in nvidia-smi answering in that layout from its hardware state."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from pdfleet import gpu_peers
from pdfleet_sim import aptrepo
from standin_smi import stand_in_nvidia_smi

LEGEND = ("\nLegend:\n\n  X    = Self\n  OK   = Status Ok\n  CNS  = Chipset not supported\n  GNS  = GPU not supported\n"
          "  TNS  = Topology not supported\n  NS   = Not supported\n  DR   = Disabled by regkey\n  U    = Unknown\n")
# The driver's layout: a space before each row, a tab after every cell (a public two-GPU report, GeForce cards).
TWO_GNS = " \tGPU0\tGPU1\t\n GPU0\tX\tGNS\t\n GPU1\tGNS\tX\t\n" + LEGEND


def _matrix(n: int, status=lambda i, j: "OK") -> str:
    head = " \t" + "".join(f"GPU{j}\t" for j in range(n)) + "\n"
    rows = "".join(f" GPU{i}\t" + "".join(("X" if i == j else status(i, j)) + "\t" for j in range(n)) + "\n"
                   for i in range(n))
    return head + rows + LEGEND


EIGHT_OK = _matrix(8)
# ACS on between the two PCIe host bridges: GPUs 0-3 reach each other, 4-7 each other, not across.
EIGHT_ACROSS_NS = _matrix(8, lambda i, j: "OK" if i // 4 == j // 4 else "NS")


def _ok(text: str) -> dict[str, object]:
    return {"rc": 0, "stdout": text, "stderr": ""}


def test_parses_the_driver_layout() -> None:
    m = gpu_peers.parse_matrix(TWO_GNS)
    assert m.gpus == (0, 1)
    assert m.status[(0, 1)] == "GNS" and m.status[(1, 0)] == "GNS" and m.status[(0, 0)] == "X"
    assert m.meaning("GNS") == "GPU not supported"
    assert m.legend["DR"] == "Disabled by regkey"


def test_parses_a_copy_with_spaces_for_tabs() -> None:
    text = "        GPU0    GPU1\n GPU0   X       OK\n GPU1   OK      X\n" + LEGEND
    assert gpu_peers.parse_matrix(text).status[(1, 0)] == "OK"


@pytest.mark.parametrize("text, reason", [
    ("No devices were found\n", "no header row"),
    (" \tGPU0\tGPU1\t\n GPU0\tX\tOK\t\n" + LEGEND, "do not match the columns"),
    (" \tGPU0\tGPU1\t\n GPU0\tX\t\n GPU1\tOK\tX\t\n", "has 1 cells for 2 columns"),
    (" \tGPU0\tGPU1\t\n GPU0\tOK\tOK\t\n GPU1\tOK\tX\t\n", r"expected 'X' \(self\)"),
])
def test_refuses_what_is_not_a_matrix(text: str, reason: str) -> None:
    with pytest.raises(gpu_peers.PeerMatrixError, match=reason):
        gpu_peers.parse_matrix(text)


def test_all_pairs_ok_pass() -> None:
    answers = {"r": _ok(EIGHT_OK), "w": _ok(EIGHT_OK)}
    assert gpu_peers.peer_problems("gpu01", answers, [0, 1, 2, 3], [4, 5, 6, 7]) == []


def test_p2p_off_across_the_halves_fails_naming_the_pairs_and_the_fix() -> None:
    answers = {"r": _ok(EIGHT_ACROSS_NS), "w": _ok(EIGHT_OK)}
    problems = gpu_peers.peer_problems("gpu01", answers, [0, 1, 2, 3], [4, 5, 6, 7])
    assert len(problems) == 1  # write is OK: only read is named
    msg = problems[0]
    assert msg.startswith("gpu01: peer read (`nvidia-smi topo -p2p r`) is not OK for 32 of the 32 prefill/decode")
    assert "NS (Not supported): GPU0->GPU4, GPU0->GPU5" in msg and "GPU7->GPU3" in msg
    assert "GPU0->GPU1" not in msg  # prefill to prefill is not the KV path
    assert "ACS" in msg and "iommu=pt" in msg and "nvidia-smi topo -m" in msg


def test_the_same_matrix_passes_where_prefill_and_decode_share_a_half() -> None:
    answers = {"r": _ok(EIGHT_ACROSS_NS), "w": _ok(EIGHT_ACROSS_NS)}
    assert gpu_peers.peer_problems("gpu01", answers, [0, 1], [2, 3]) == []


def test_one_pair_off_is_named_alone_with_its_legend() -> None:
    text = _matrix(8, lambda i, j: "CNS" if {i, j} == {2, 6} else "OK")
    problems = gpu_peers.peer_problems("gpu01", {"r": _ok(text), "w": _ok(text)}, [0, 1, 2, 3], [4, 5, 6, 7])
    assert len(problems) == 2
    assert "is not OK for 2 of the 32" in problems[0]
    assert "CNS (Chipset not supported): GPU2->GPU6, GPU6->GPU2;" in problems[1]
    assert problems[1].startswith("gpu01: peer write")


def test_a_host_without_both_roles_has_nothing_to_check() -> None:
    assert gpu_peers.peer_problems("gpu01", {}, [0, 1, 2, 3], []) == []


def test_nvidia_smi_failing_or_missing_gpus_is_a_problem() -> None:
    failed = {"rc": 9, "stdout": "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
              "stderr": ""}
    problems = gpu_peers.peer_problems("gpu01", {"r": failed, "w": _ok(TWO_GNS)}, [0], [4])
    assert problems[0].startswith("gpu01: `nvidia-smi topo -p2p r` failed (rc 9): NVIDIA-SMI has failed")
    assert "missing: GPU4" in problems[1]


# ---------------------------------------------------------------- the sim hosts' stand-in nvidia-smi


def _stand_in(tmp_path: Path, hardware: dict[str, object], *args: str) -> subprocess.CompletedProcess[str]:
    """Run the stand-in nvidia-smi of the sim repository on this machine, with ``hardware``."""
    path = stand_in_nvidia_smi(tmp_path / "smi", **hardware)
    return subprocess.run([str(path), *args], capture_output=True, text=True, timeout=30, check=False)


def test_stand_in_answers_in_the_driver_layout(tmp_path: Path) -> None:
    out = _stand_in(tmp_path, dict(aptrepo.DEFAULT_HARDWARE), "topo", "-p2p", "r")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(" \tGPU0\tGPU1\t") and "\n GPU7\tOK\t" in out.stdout
    assert out.stdout.endswith(LEGEND)
    assert gpu_peers.parse_matrix(out.stdout).gpus == tuple(range(8))
    nvlink = gpu_peers.parse_matrix(_stand_in(tmp_path, dict(aptrepo.DEFAULT_HARDWARE), "topo", "-p2p", "n").stdout)
    assert nvlink.status[(0, 1)] == "NS"  # no NVLink on this GPU


def test_stand_in_with_p2p_off_fails_the_check(tmp_path: Path) -> None:
    hw = dict(aptrepo.DEFAULT_HARDWARE, p2p_pairs={"1-5": "TNS"})
    answers = {m: _stand_in(tmp_path, hw, "topo", "-p2p", m).__dict__ for m in gpu_peers.MODES}
    answers = {m: {"rc": a["returncode"], "stdout": a["stdout"], "stderr": a["stderr"]} for m, a in answers.items()}
    problems = gpu_peers.peer_problems("node1", answers, [0, 1, 2, 3], [4, 5, 6, 7])
    assert len(problems) == 2 and all("TNS (Topology not supported): GPU1->GPU5, GPU5->GPU1;" in p for p in problems)
    hw = dict(aptrepo.DEFAULT_HARDWARE, p2p="NS")
    out = _stand_in(tmp_path, hw, "topo", "-p2p", "w")
    assert "is not OK for 32 of the 32" in gpu_peers.peer_problems(
        "node1", {"r": _ok(EIGHT_OK), "w": {"rc": out.returncode, "stdout": out.stdout}}, [0, 1, 2, 3], [4, 5, 6, 7])[0]
