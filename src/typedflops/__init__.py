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
    from .config import disabled as disabled
    from .contract.memo import print_bindings as print_bindings
    from .cost.engine.report import Recorder as Recorder
    from .cost.engine.report import record as record
    from .cost.engine.rules import register_rule as register_rule
    from .cost.types import Cost as Cost
    from .cost.types import OpCost as OpCost
    from .cost.types import Term as Term
    from .cost.untyped import estimate as estimate
    from .decorator import TypedFunction as TypedFunction
    from .decorator import typed_flops as typed_flops
    from .einops.ops import einsum as einsum
    from .einops.ops import rearrange as rearrange
    from .einops.ops import reduce as reduce
    from .einops.ops import repeat as repeat
    from .errors import ContractError as ContractError
    from .errors import DeviceError as DeviceError
    from .errors import DtypeError as DtypeError
    from .errors import PatternError as PatternError
    from .errors import ShapeError as ShapeError
    from .errors import SpecError as SpecError
    from .timing.bench import Measurement as Measurement
    from .timing.bench import benchmark as benchmark
    from .tools.import_hook import install_import_hook as install_import_hook

#: The public names and the module each lives in ("" for the public submodules): the one
#: table that ``__all__``, ``dir(typedflops)`` and the lazy lookup below are made from. The
#: imports above are for type checkers, which cannot read it; a test holds them equal.
_EXPORTS: dict[str, str] = {
    "ContractError": "errors",
    "Cost": "cost.types",
    "DeviceError": "errors",
    "DtypeError": "errors",
    "Measurement": "timing.bench",
    "OpCost": "cost.types",
    "PatternError": "errors",
    "Recorder": "cost.engine.report",
    "ShapeError": "errors",
    "SpecError": "errors",
    "Term": "cost.types",
    "TypedFunction": "decorator",
    "benchmark": "timing.bench",
    "devices": "",
    "disabled": "config",
    "einsum": "einops.ops",
    "estimate": "cost.untyped",
    "install_import_hook": "tools.import_hook",
    "memory": "",
    "nn": "",
    "planning": "",
    "print_bindings": "contract.memo",
    "rearrange": "einops.ops",
    "record": "cost.engine.report",
    "reduce": "einops.ops",
    "register_rule": "cost.engine.rules",
    "repeat": "einops.ops",
    "testing": "",
    "typed_flops": "decorator",
}

__all__ = sorted(_EXPORTS)


if not TYPE_CHECKING:  # to a type checker, the package has only the names imported above

    def __getattr__(name: str) -> Any:
        where = _EXPORTS.get(name)
        if where is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        module = f"{__name__}.{where or name}"
        try:
            value = importlib.import_module(module)
            if where:
                value = getattr(value, name)
        except AttributeError as exc:
            # (an AttributeError here would read as "cannot import name": say what failed)
            raise ImportError(f"typedflops.{name}: importing {module} failed: {exc}") from exc
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return list(__all__)
