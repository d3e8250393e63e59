"""The plugin's error codes, so that users can silence each one on its own.

``dim-alias`` is a sub-code of ``shape``: ``--disable-error-code dim-alias`` silences only
it, while ``# type: ignore[shape]`` covers both. ``unread-annotation`` (a note) is a sub-code
of mypy's ``valid-type``, which mypy reports on the same line.
"""

from __future__ import annotations

from typing import Final

from mypy.errorcodes import VALID_TYPE, ErrorCode

CATEGORY: Final = "typedflops"

PATTERN: Final = ErrorCode(
    "pattern", "einops pattern syntax and operand count (typedflops)", CATEGORY
)
SHAPE: Final = ErrorCode(
    "shape", "Tensor ranks or fixed sizes that cannot match (typedflops)", CATEGORY
)
DIM_ALIAS: Final = ErrorCode(
    "dim-alias",
    "One axis named by two different dims; fine at runtime only if their sizes agree (typedflops)",
    CATEGORY,
    sub_code_of=SHAPE,
)
FLOPS_EXPR: Final = ErrorCode(
    "flops-expr", "flops= formula of @typed_flops: grammar and dim names (typedflops)", CATEGORY
)
# A note (never an error) on the line where mypy reports `valid-type`, so a
# `# type: ignore[valid-type]` there covers it too.
UNREAD_ANNOTATION: Final = ErrorCode(
    "unread-annotation",
    "A note: annotations written with an object standing in for a jaxtyping dtype are not"
    " checked (typedflops)",
    CATEGORY,
    sub_code_of=VALID_TYPE,
)
