"""A package's names imported on first use (PEP 562), for packages whose ``__init__`` must stay light: the gateway's
registrar imports ``pdfleet.fleet`` with the standard library alone, and the simulated workers import
``pdfleet_sim`` without its host machinery.

    __getattr__ = lazy_getattr(__name__, {"Pair": "pairs", ...}, globals())

A name of the mapping is taken from its submodule and kept in the package's namespace; a submodule of the package
(``fleet.gate``) is imported when it is first named. Anything else is an AttributeError, as Python says it.
Standard library only.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(package: str, homes: Mapping[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: ``homes`` maps each exported name to the submodule defining it."""

    def getattr_(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            if name.isidentifier() and importlib.util.find_spec(f"{package}.{name}") is not None:
                return importlib.import_module(f"{package}.{name}")
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{home}"), name)
        namespace[name] = value
        return value

    return getattr_
