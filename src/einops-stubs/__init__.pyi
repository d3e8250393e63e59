# Tighter types for einops (https://github.com/arogozhnikov/einops), shipped with
# typedflops as the stub-only package `einops-stubs` (partial: modules not stubbed here
# fall back to einops' own hints). einops types its tensors as an unbounded TypeVar, so
# `rearrange("not a tensor", ...)` passes mypy --strict; here tensors are array types
# (anything with a shape: torch, numpy, ...), and einops' own rules are kept everywhere
# else (Optional tensors, str reductions, any axis lengths), so correct code gets no new
# error. typedflops' mypy plugin checks the patterns.
from .einops import (
    Reduction as Reduction,
)
from .einops import (
    asnumpy as asnumpy,
)
from .einops import (
    einsum as einsum,
)
from .einops import (
    parse_shape as parse_shape,
)
from .einops import (
    rearrange as rearrange,
)
from .einops import (
    reduce as reduce,
)
from .einops import (
    repeat as repeat,
)
from .packing import pack as pack
from .packing import unpack as unpack

__version__: str

class EinopsError(RuntimeError): ...

__all__ = [
    "EinopsError",
    "asnumpy",
    "einsum",
    "pack",
    "parse_shape",
    "rearrange",
    "reduce",
    "repeat",
    "unpack",
]
