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
    from . import planning as planning
    from . import testing as testing
    from ._bench import Measurement as Measurement
    from ._bench import benchmark as benchmark
    from ._config import disabled as disabled
    from ._cost import Cost as Cost
    from ._cost import OpCost as OpCost
    from ._decorator import TypedFunction as TypedFunction
    from ._engine.report import Recorder as Recorder
    from ._engine.report import record as record
    from ._engine.rules import register_rule as register_rule
    from ._import_hook import install_import_hook as install_import_hook
    from ._memo import print_bindings as print_bindings
    from ._ops import einsum as einsum
    from ._ops import rearrange as rearrange
    from ._ops import reduce as reduce
    from ._ops import repeat as repeat
    from ._typed_flops import typed_flops as typed_flops
    from .errors import ContractError as ContractError
    from .errors import DeviceError as DeviceError
    from .errors import DtypeError as DtypeError
    from .errors import PatternError as PatternError
    from .errors import ShapeError as ShapeError
    from .errors import SpecError as SpecError

#: The public names and the module each lives in ("" for the public submodules): the one
#: table that ``__all__``, ``dir(typedflops)`` and the lazy lookup below are made from. The
#: imports above are for type checkers, which cannot read it; a test holds them equal.
_EXPORTS: dict[str, str] = {
    "ContractError": "errors",
    "Cost": "_cost",
    "DeviceError": "errors",
    "DtypeError": "errors",
    "Measurement": "_bench",
    "OpCost": "_cost",
    "PatternError": "errors",
    "Recorder": "_engine.report",
    "ShapeError": "errors",
    "SpecError": "errors",
    "TypedFunction": "_decorator",
    "benchmark": "_bench",
    "devices": "",
    "disabled": "_config",
    "einsum": "_ops",
    "install_import_hook": "_import_hook",
    "memory": "",
    "nn": "",
    "planning": "",
    "print_bindings": "_memo",
    "rearrange": "_ops",
    "record": "_engine.report",
    "reduce": "_ops",
    "register_rule": "_engine.rules",
    "repeat": "_ops",
    "testing": "",
    "typed_flops": "_typed_flops",
}

__all__ = sorted(_EXPORTS)


if not TYPE_CHECKING:  # to a type checker, the package has only the names imported above

    def __getattr__(name: str) -> Any:
        where = _EXPORTS.get(name)
        if where is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        if where:
            value = getattr(importlib.import_module(f"{__name__}.{where}"), name)
        else:
            value = importlib.import_module(f"{__name__}.{name}")
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return list(__all__)
