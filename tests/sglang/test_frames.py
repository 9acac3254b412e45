"""The decode-side frame builders (light: no SGLang import; the wedge tests parse them for real)."""

from __future__ import annotations

import struct
import subprocess
import sys

import pytest
from pdfleet.patch import nixlcpu as nc


def test_importing_nixlcpu_stays_light() -> None:
    # In a fresh interpreter: other tests of the same session import zmq themselves.
    code = ("import sys, pdfleet.patch.nixlcpu; "
            "print(','.join(m for m in ('torch', 'sglang', 'zmq') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert proc.stdout.strip() == "", proc.stdout


@pytest.mark.parametrize(("version", "register", "info"), [("0.5.15.post1", 20, 10), ("0.5.23", 25, 11)])
def test_frame_counts_per_version(version: str, register: int, info: int) -> None:
    reg = nc.register_kv_args_frames(version)
    assert len(reg) == register and reg[:2] == [nc.GUARD, b"None"]
    frames = nc.transfer_info_frames(version, 42, kv_indices=[3, 4])
    assert len(frames) == info
    assert frames[:2] == [nc.GUARD, b"42"]
    assert struct.unpack("2i", frames[5]) == (3, 4)
    assert nc.abort_frames(version, 42) == [b"ABORT", b"42", b"127.0.0.1", b"1"]


def test_dummy_flag_only_in_0_5_23() -> None:
    assert nc.transfer_info_frames("0.5.23", 1)[-1] == b"1"
    assert nc.transfer_info_frames("0.5.23", 1, kv_indices=[0])[-1] == b"0"
    assert nc.transfer_info_frames("0.5.15.post1", 1)[-1] == b"0"  # decode_prefix_len


def test_unknown_version_names_the_known_layouts() -> None:
    with pytest.raises(nc.NixlCpuError, match=r"known: 0\.5\.15\.post1, 0\.5\.23"):
        nc.abort_frames("0.4.0", 1)


def test_status_names_match_kvpoll() -> None:
    assert nc.KVPOLL_NAMES == {0: "Failed", 1: "Bootstrapping", 2: "WaitingForInput", 3: "Transferring",
                               4: "Success"}
