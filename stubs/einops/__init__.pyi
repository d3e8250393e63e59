# Tighter types for einops (https://github.com/arogozhnikov/einops), shipped by typedflops.
# einops types its tensors as an unbounded TypeVar, sizes as Any and reductions as str, so
# `rearrange("not a tensor", ...)` and `reduce(x, "a b -> a", "meen")` pass mypy --strict.
# Here tensors are torch tensors and reductions are a Literal. Enable with
# `mypy_path = "stubs"` (see typedflops' README); typedflops' mypy plugin checks patterns.
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
