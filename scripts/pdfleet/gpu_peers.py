"""GPU peer-to-peer between a host's prefill and decode GPUs, read from `nvidia-smi topo -p2p r` and `... w`.

A prefill and a decode on one host move the KV cache GPU to GPU over CUDA IPC (UCX's cuda_ipc), which needs
PCIe peer-to-peer between the two GPU sets: the RTX PRO 6000 has no NVLink, and ACS on the PCIe switches and
root ports or an IOMMU in translated mode turn P2P off. This is the one parser and the one judgement: the
conformance suite (pdfleet.conformance_suite) and the nixl role (its filter plugin pdfleet_gpu_peer_problems) both call
:func:`peer_problems`. Standard library only (the Ansible filter imports it).

The driver prints a matrix with a legend (tabs between the cells; the same layout for every capability)::

     \tGPU0\tGPU1\t
     GPU0\tX\tOK\t
     GPU1\tOK\tX\t

    Legend:

      X    = Self
      OK   = Status Ok
      CNS  = Chipset not supported
      GNS  = GPU not supported
      TNS  = Topology not supported
      NS   = Not supported
      DR   = Disabled by regkey
      U    = Unknown

Row GPUi, column GPUj is the status of access from GPU i to GPU j. Only ``OK`` allows peer access.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

# The capabilities the KV path needs: `nvidia-smi topo -p2p <mode>`, by what the mode letter means.
MODES = {"r": "read", "w": "write"}
COMMAND = "nvidia-smi topo -p2p {mode}"
STATUS_OK = "OK"
SELF = "X"
# What the driver's legend says when a matrix arrives without one (the legend printed with the matrix wins).
LEGEND = {"X": "Self", "OK": "Status Ok", "CNS": "Chipset not supported", "GNS": "GPU not supported",
          "TNS": "Topology not supported", "NS": "Not supported", "DR": "Disabled by regkey", "U": "Unknown"}
FIX = ("the KV cache moves GPU to GPU over CUDA IPC, which needs PCIe peer-to-peer between these GPUs (no "
       "NVLink on this GPU). Fix: look at `nvidia-smi topo -m` (GPUs behind one PCIe switch or host bridge); turn "
       "off PCIe ACS on the switches and root ports (BIOS setting, often 'ACS Enable' / 'PCIe ACS Control'), and "
       "put the IOMMU in passthrough (kernel command line `iommu=pt`, with `intel_iommu=on` or `amd_iommu=on`) or "
       "off in the BIOS; reboot and check `nvidia-smi topo -p2p r` and `w` again. Or place prefill and decode on "
       "GPUs that do reach each other (pdfleet_cluster.instances[].gpus)")

_GPU = re.compile(r"GPU(\d+)$")
_LEGEND_LINE = re.compile(r"^\s*(\S+)\s+=\s+(.+?)\s*$")


class PeerMatrixError(ValueError):
    """The text is not a `nvidia-smi topo -p2p` matrix."""


@dataclass(frozen=True)
class PeerMatrix:
    """One `nvidia-smi topo -p2p <mode>` answer: the GPU indices, each (from, to) status, and the legend."""

    gpus: tuple[int, ...]
    status: Mapping[tuple[int, int], str]
    legend: Mapping[str, str]

    def meaning(self, code: str) -> str:
        return self.legend.get(code) or LEGEND.get(code) or "not in the legend"


def parse_matrix(text: str) -> PeerMatrix:
    """Parse the matrix and its legend; raise PeerMatrixError naming what is wrong with the text."""
    lines = text.splitlines()
    header_at = next((i for i, line in enumerate(lines)
                      if line.split() and all(_GPU.match(w) for w in line.split())), None)
    if header_at is None:
        raise PeerMatrixError("no header row of GPU columns (GPU0 GPU1 ...)")
    columns = [int(_GPU.match(w).group(1)) for w in lines[header_at].split()]  # type: ignore[union-attr]
    status: dict[tuple[int, int], str] = {}
    rows: list[int] = []
    legend: dict[str, str] = {}
    in_legend = False
    for line in lines[header_at + 1:]:
        words = line.split()
        if not words:
            continue
        if words[0] == "Legend:":
            in_legend = True
            continue
        if in_legend:
            m = _LEGEND_LINE.match(line)
            if m:
                legend[m.group(1)] = m.group(2)
            continue
        first = _GPU.match(words[0])
        if first is None:
            raise PeerMatrixError(f"unexpected line {line.strip()!r} in the matrix")
        if len(words) != len(columns) + 1:
            raise PeerMatrixError(f"row {words[0]} has {len(words) - 1} cells for {len(columns)} columns")
        row = int(first.group(1))
        rows.append(row)
        for col, cell in zip(columns, words[1:], strict=True):
            status[(row, col)] = cell
    if sorted(rows) != sorted(columns):
        raise PeerMatrixError(f"rows {rows} do not match the columns {columns}")
    for g in columns:
        if status[(g, g)] != SELF:
            raise PeerMatrixError(f"GPU{g} -> GPU{g} is {status[(g, g)]!r}, expected {SELF!r} (self)")
    return PeerMatrix(tuple(columns), status, legend)


def peer_problems(host: str, answers: Mapping[str, Mapping[str, object]], prefill_gpus: Iterable[int],
                  decode_gpus: Iterable[int]) -> list[str]:
    """What stops peer read or write between a prefill GPU and a decode GPU of `host`, in both directions.

    `answers` maps each mode of MODES to the command's {rc, stdout, stderr}. A host without both roles has
    nothing to check. Each problem starts with the host's name; the pairs come with their status and the fix."""
    prefill, decode = sorted(set(prefill_gpus)), sorted(set(decode_gpus))
    if not prefill or not decode:
        return []
    pairs = [(p, d) for p in prefill for d in decode] + [(d, p) for p in prefill for d in decode]
    out: list[str] = []
    for mode, word in MODES.items():
        cmd = COMMAND.format(mode=mode)
        answer = answers.get(mode) or {}
        rc, stdout = answer.get("rc"), str(answer.get("stdout") or "")
        if rc != 0:
            said = (stdout + " " + str(answer.get("stderr") or "")).strip()[-300:]
            out.append(f"{host}: `{cmd}` failed (rc {rc}): {said or '(no output)'}; peer {word} between the prefill "
                       f"GPUs {_gpus(prefill)} and the decode GPUs {_gpus(decode)} cannot be checked")
            continue
        try:
            matrix = parse_matrix(stdout)
        except PeerMatrixError as exc:
            out.append(f"{host}: `{cmd}` printed no peer matrix ({exc}): {stdout.strip()[:300]!r}")
            continue
        absent = [g for g in prefill + decode if g not in matrix.gpus]
        if absent:
            out.append(f"{host}: `{cmd}` lists {_gpus(matrix.gpus)}, but the plan puts prefill on {_gpus(prefill)} "
                       f"and decode on {_gpus(decode)} (missing: {_gpus(absent)})")
            continue
        by_status: dict[str, list[str]] = {}
        for src, dst in pairs:
            code = matrix.status[(src, dst)]
            if code != STATUS_OK:
                by_status.setdefault(code, []).append(f"GPU{src}->GPU{dst}")
        if by_status:
            found = "; ".join(f"{code} ({matrix.meaning(code)}): {', '.join(where)}"
                              for code, where in sorted(by_status.items()))
            count = sum(len(v) for v in by_status.values())
            out.append(f"{host}: peer {word} (`{cmd}`) is not OK for {count} of the {len(pairs)} prefill/decode GPU "
                       f"pairs (prefill {_gpus(prefill)}, decode {_gpus(decode)}): {found}; {FIX}")
    return out


def _gpus(indices: Sequence[int] | Iterable[int]) -> str:
    return ",".join(f"GPU{g}" for g in indices) or "none"
