"""A mypy plugin that checks jaxtyping dims and einops patterns statically.

Enable it in ``pyproject.toml``::

    [tool.mypy]
    plugins = ["typedflops.mypy_plugin"]

It reports, with its own error codes (silence one with ``disable_error_code`` or
``# type: ignore[code]``):

- ``pattern`` -- an einops pattern einops would reject, or an einsum whose pattern names more
  or fewer operands than were passed;
- ``shape`` -- ranks (or fixed sizes) that cannot match: a pattern side and its argument's
  annotation, a produced result and the function's return annotation, an argument and the
  parameter of the user's own annotated function it is passed to;
- ``dim-alias`` (a sub-code of ``shape``) -- one axis named by two different dims (a pattern
  axis bound to ``d_in`` and ``d_hidden``, a result ``batch d_in`` returned as
  ``batch d_out``): jaxtyping accepts it at runtime only when the sizes happen to agree;
- ``flops-expr`` -- a ``@typed_flops(flops=...)`` formula outside the grammar (names,
  integers, ``+ - * / // **`` and parentheses) or naming a dim no annotation defines.

Dims it cannot see are gradual: unannotated tensors, attributes, and anything reaching a
function through a call the plugin does not model are never reported. It never imports torch.
"""

from __future__ import annotations

from mypy.plugin import Plugin

from .codes import DIM_ALIAS, FLOPS_EXPR, PATTERN, SHAPE
from .plugin import TypedFlopsPlugin


def plugin(version: str) -> type[Plugin]:
    """The entry point mypy calls with its version (``plugins = ["typedflops.mypy_plugin"]``)."""
    return TypedFlopsPlugin


__all__ = ["DIM_ALIAS", "FLOPS_EXPR", "PATTERN", "SHAPE", "TypedFlopsPlugin", "plugin"]
