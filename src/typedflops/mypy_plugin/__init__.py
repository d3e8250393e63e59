"""A mypy plugin that checks jaxtyping dims and einops patterns statically.

Enable it in ``pyproject.toml``::

    [tool.mypy]
    plugins = ["typedflops.mypy_plugin"]

It reports, with its own error codes (silence one with ``disable_error_code`` or
``# type: ignore[code]``):

- ``pattern`` -- an einops pattern einops would reject (``einsum``, ``rearrange``, ``reduce``,
  ``repeat``, ``pack``, ``unpack``), or an einsum whose pattern names more or fewer operands
  than were passed; the reason reads as typedflops' runtime ``PatternError`` reads;
- ``shape`` -- ranks (or fixed sizes) that cannot match: a pattern side and its argument's
  annotation, a produced result and the function's return annotation, an argument and the
  parameter of the user's own annotated function it is passed to;
- ``dim-alias`` (a sub-code of ``shape``) -- one axis named by two different dims (a pattern
  axis bound to ``d_in`` and ``d_hidden``, a result ``batch d_in`` returned as
  ``batch d_out``): jaxtyping accepts it at runtime only when the sizes happen to agree.
  Never reported for a dim no parameter binds, nor where a pattern made two dims equal
  (``(d_k2 g)`` with ``g=2`` splits ``d_k`` into ``2*d_k2``);
- ``flops-expr`` -- a ``@typed_flops(flops=...)`` formula outside the grammar (names,
  integers, ``+ - * / // **`` and parentheses) or naming a dim no annotation defines.

Dims it cannot see are gradual: unannotated tensors, attributes, and anything reaching a
function through a call the plugin does not model are never reported. Calls it does not
check keep mypy's own hooks, and the types mypy gives calls are left as they are. It parses
with typedflops' grammar core (the runtime's own parser) and never imports torch.

The checks live one per module: :mod:`.annotation_dims` (dim strings), :mod:`.einops_ops`
(patterns), :mod:`.calls` (functions, methods, modules) and :mod:`.flops` (``flops=``).
"""

from __future__ import annotations

from mypy.plugin import Plugin

from .codes import DIM_ALIAS, FLOPS_EXPR, PATTERN, SHAPE
from .plugin import TypedFlopsPlugin

#: The oldest mypy the plugin is tested with (the newest is pinned in pyproject.toml).
OLDEST_MYPY = (1, 18)


def plugin(version: str) -> type[Plugin]:
    """The entry point mypy calls with its version (``plugins = ["typedflops.mypy_plugin"]``).

    >>> plugin("2.4.1").__name__
    'TypedFlopsPlugin'
    >>> plugin("1.15.0")
    Traceback (most recent call last):
      ...
    RuntimeError: typedflops.mypy_plugin needs mypy >= 1.18 (this is mypy 1.15.0)
    """
    release = tuple(int(part) for part in version.split("+")[0].split(".")[:2] if part.isdigit())
    if release < OLDEST_MYPY:
        oldest = ".".join(map(str, OLDEST_MYPY))
        raise RuntimeError(
            f"typedflops.mypy_plugin needs mypy >= {oldest} (this is mypy {version})"
        )
    return TypedFlopsPlugin


__all__ = ["DIM_ALIAS", "FLOPS_EXPR", "PATTERN", "SHAPE", "TypedFlopsPlugin", "plugin"]
