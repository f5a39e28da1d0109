"""Names a package imports on first use: the one mechanism behind the project's deferred imports.

``hpo``, ``trial_executor`` and ``trial_executor.model`` each keep a table of the names whose
modules are slow to import (torch, transformers' modeling code) and set their module
``__getattr__`` to :func:`deferred_names` of it, so a process that never uses those names
never pays for them. Imports nothing but ``importlib``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def deferred_names(
    namespace: dict[str, Any], table: Mapping[str, tuple[str, ...]], renamed: Mapping[str, str] | None = None,
) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports each name of ``table`` (module -> names) on first use.

    ``namespace`` is the package's ``globals()``: a name, once imported, is kept there, so later
    reads never come back here. ``renamed`` maps a name to the one its module defines.
    """
    module_of = {name: module for module, names in table.items() for name in names}
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        if name not in module_of:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = namespace[name] = getattr(importlib.import_module(module_of[name]), (renamed or {}).get(name, name))
        return value

    return __getattr__
