"""Version facts the planner checks against (from NVIDIA's CUDA/driver matrix and SGLang's flags)."""

from __future__ import annotations

# CUDA toolkit -> minimum Linux driver (NVIDIA's compatibility table).
CUDA_DRIVER_FLOORS: dict[str, tuple[int, ...]] = {
    "12.8": (570, 26),
    "12.9": (575, 51, 3),
    "13.0": (580, 65, 6),
}

# UCX_TLS words that name groups or aliases rather than one transport `ucx_info -d` lists.
UCX_TLS_ALIASES = frozenset({"all", "sm", "shm", "mm", "cuda", "rocm", "ib", "rc", "ud", "dc", "rc_x", "ud_x", "dc_x",
                             "rc_v", "ud_v", "ugni"})

# SGLang's --log-level choices; "debug" shows the scheduler's abort lines, "info" the disconnects.
SUPPORTED_LOG_LEVELS = ("debug", "info", "warning", "error")


def version_tuple(text: str) -> tuple[int, ...]:
    """'580.95.05' -> (580, 95, 5); raises ValueError naming the bad version."""
    try:
        return tuple(int(part) for part in text.split("."))
    except ValueError:
        raise ValueError(f"{text!r} is not a dotted numeric version") from None
