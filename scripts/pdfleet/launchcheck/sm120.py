"""Make a CPU-only process look like the unit's GPU host to SGLang (runs inside the SGLang runtime only).

Two narrow substitutions, installed before SGLang is imported:

* ``torch.cuda``'s device queries (``is_available``, ``device_count``, ``get_device_capability``,
  ``get_device_name``, ``get_device_properties``, ``mem_get_info``) answer with the host spec of the
  inventory (RTX PRO 6000 Blackwell: compute capability 12.0, 97,887 MiB). Every SGLang platform helper
  (``is_sm120_supported``, ``get_device``, ``get_device_memory_capacity`` …) reads these, so none of them is
  patched one by one. Anything that really touches a device (allocating, launching, ``set_device``) still
  fails, which is where resolution stops without a GPU.
* The GPU kernel packages SGLang imports at module level (``sgl_kernel``, ``flashinfer``, ``deep_gemm``,
  ``flash_mla``) are absent from the CPU runtime. They are replaced by kernel-less modules whose every
  attribute raises :class:`KernelCalled` when called, so importing SGLang's configuration code works and
  a resolution step that would run a kernel fails naming it (the check then reports that step).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Sequence
from typing import Any

KERNEL_PACKAGES = frozenset({"sgl_kernel", "flashinfer", "deep_gemm", "flash_mla"})
MIB = 1 << 20


class KernelCalled(RuntimeError):
    """SGLang called a GPU kernel: argument resolution cannot go further on a CPU."""


class _KernelLess:
    """A kernel (or a namespace of kernels) that is not there: calling it raises KernelCalled."""

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_name", name)

    def __getattr__(self, attr: str) -> _KernelLess:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _KernelLess(f"{self._name}.{attr}")

    def __getitem__(self, key: object) -> _KernelLess:
        return _KernelLess(f"{self._name}[{key!r}]")

    def __call__(self, *args: object, **kwargs: object) -> None:
        raise KernelCalled(f"{self._name} (a GPU kernel) was called")

    def __mro_entries__(self, bases: tuple[object, ...]) -> tuple[type, ...]:
        return (object,)

    def __repr__(self) -> str:
        return f"<kernel-less {self._name}>"


class _KernelLessModule(types.ModuleType):
    def __getattr__(self, attr: str) -> _KernelLess:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _KernelLess(f"{self.__name__}.{attr}")


class _KernelLessFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Sequence[str] | None, target: object = None) -> Any:
        if fullname.split(".")[0] in KERNEL_PACKAGES:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _KernelLessModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def install(gpu_model: str, compute_capability: str, memory_mib: int, count: int) -> None:
    """Report `count` GPUs `gpu_model` (capability "12.0", `memory_mib` each) to torch, and hide the kernels."""
    import torch

    major, minor = (int(x) for x in compute_capability.split("."))
    props = types.SimpleNamespace(name=gpu_model, major=major, minor=minor, total_memory=memory_mib * MIB,
                                  multi_processor_count=0, gcnArchName="")
    cuda: Any = torch.cuda
    cuda.is_available = lambda: True
    cuda.device_count = lambda: count
    cuda.get_device_capability = lambda device=None: (major, minor)
    cuda.get_device_name = lambda device=None: gpu_model
    cuda.get_device_properties = lambda device=None: props
    cuda.mem_get_info = lambda device=None: (memory_mib * MIB, memory_mib * MIB)
    if not any(isinstance(f, _KernelLessFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _KernelLessFinder())
