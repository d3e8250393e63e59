# Types for einops (https://github.com/arogozhnikov/einops), shipped with typedflops as
# the stub-only package `einops-stubs` (partial: modules not stubbed here fall back to
# einops' own hints). They accept whatever einops' own hints accept (a test compares them
# signature by signature) and differ only where einops' hints fall short of what einops
# runs: an einsum of more than four tensors or of `*tensors`, `parse_shape`'s result
# (`dict[str, int]`), the layers' untyped `forward`. typedflops' mypy plugin checks the
# patterns.
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
