"""The runtime reads dim strings and patterns through the grammar core: hostile
annotations fail at decoration with the core's reason, and what einops accepts runs."""

from __future__ import annotations

import einops
import pytest
import torch
from jaxtyping import Float
from torch import Tensor

from typedflops import PatternError, SpecError, rearrange, typed_flops


@pytest.mark.parametrize(
    ("dims", "message"),
    [
        ("9**9**9", "annotation \"9**9**9\": symbolic axis '9**9**9': exponents are integers"),
        ("n**n**n", "annotation \"n**n**n\": symbolic axis 'n**n**n': exponents are integers"),
        ("n n/0", "annotation \"n n/0\": symbolic axis 'n/0': division by zero"),
        ("b ?t", "annotation \"b ?t\": '?t': '?' dims depend on a location in a PyTree"),
        ("n -3", "annotation \"n -3\": '-3': a size cannot be negative"),
    ],
)
def test_hostile_annotations_fail_at_decoration(dims: str, message: str) -> None:
    def f(x: Tensor) -> Tensor:
        return x

    f.__annotations__ = {"x": Float[Tensor, dims], "return": Float[Tensor, dims]}
    with pytest.raises(SpecError) as info:
        typed_flops(f)
    assert str(info.value).startswith(message)


def test_a_divisor_that_is_zero_at_these_sizes_is_a_spec_error() -> None:
    @typed_flops
    def f(x: Float[Tensor, "a b"]) -> Float[Tensor, "a*b/(b-a)"]:  # noqa: F821
        return x.flatten()

    with pytest.raises(SpecError, match=r"symbolic axis 'a\*b/\(b-a\)': division by zero"):
        f(torch.ones(2, 2))
    assert f(torch.ones(3, 4)).shape == (12,)  # 3*4/(4-3)


def test_unicode_ellipsis_reads_as_einops_reads_it() -> None:
    x = torch.arange(6.0).reshape(2, 3)
    # In rearrange, a lone "…" is one axis named "…" (einops' reading).
    assert torch.equal(
        rearrange(x, "\u2026 b -> b \u2026"), einops.rearrange(x, "\u2026 b -> b \u2026")
    )
    with pytest.raises(PatternError, match="needs 2 dimensions but has 3"):
        rearrange(torch.ones(2, 3, 4), "\u2026 b -> b \u2026")
    # In einsum, "…" is "...".
    from typedflops import einsum

    y = torch.ones(4, 2, 3)
    assert torch.equal(einsum(y, "\u2026 b -> b"), einops.einsum(y, "\u2026 b -> b"))
