"""typedflops: one jaxtyping annotation, three uses — static shape checks (a mypy plugin),
runtime shape enforcement, and a cost model (FLOPs, bytes, time, FLOP/s, MFU).

Names are imported on first use, so that ``import typedflops.mypy_plugin`` never imports torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import devices as devices
    from . import memory as memory
    from . import nn as nn
    from . import testing as testing
    from ._engine.report import Recorder as Recorder
    from ._engine.report import record as record
    from ._engine.rules import register_rule as register_rule
    from .bench import Measurement as Measurement
    from .bench import benchmark as benchmark
    from .config import disabled as disabled
    from .cost import Cost as Cost
    from .cost import OpCost as OpCost
    from .decorator import TypedFunction as TypedFunction
    from .decorator import typed_flops as typed_flops
    from .errors import ContractError as ContractError
    from .errors import DeviceError as DeviceError
    from .errors import DtypeError as DtypeError
    from .errors import PatternError as PatternError
    from .errors import ShapeError as ShapeError
    from .errors import SpecError as SpecError
    from .import_hook import install_import_hook as install_import_hook
    from .memo import print_bindings as print_bindings
    from .ops import einsum as einsum
    from .ops import rearrange as rearrange
    from .ops import reduce as reduce
    from .ops import repeat as repeat

__all__ = [
    "ContractError",
    "Cost",
    "DeviceError",
    "DtypeError",
    "Measurement",
    "OpCost",
    "PatternError",
    "Recorder",
    "ShapeError",
    "SpecError",
    "TypedFunction",
    "benchmark",
    "devices",
    "disabled",
    "einsum",
    "install_import_hook",
    "memory",
    "nn",
    "print_bindings",
    "rearrange",
    "record",
    "reduce",
    "register_rule",
    "repeat",
    "testing",
    "typed_flops",
]

_WHERE = {
    "ContractError": "errors",
    "Cost": "cost",
    "DeviceError": "errors",
    "DtypeError": "errors",
    "Measurement": "bench",
    "OpCost": "cost",
    "PatternError": "errors",
    "Recorder": "_engine.report",
    "ShapeError": "errors",
    "SpecError": "errors",
    "TypedFunction": "decorator",
    "benchmark": "bench",
    "disabled": "config",
    "einsum": "ops",
    "install_import_hook": "import_hook",
    "print_bindings": "memo",
    "rearrange": "ops",
    "record": "_engine.report",
    "register_rule": "_engine.rules",
    "reduce": "ops",
    "repeat": "ops",
    "typed_flops": "decorator",
}
_SUBMODULES = {"devices", "memory", "nn", "testing"}


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _WHERE:
        value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
