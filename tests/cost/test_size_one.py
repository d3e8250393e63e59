"""Formulas at size 1: where the body branches on a dim being 1, or torch runs or saves
otherwise there, the formula has a part that says so, and an exact formula gives the count
of a dry run at 1 as at any other size; where torch runs a matrix product over a summed dim
of 1 as a multiply, the formula is that of the product as written."""

from __future__ import annotations

from collections.abc import Callable

import sympy
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import Float
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

import typedflops
from typedflops import Cost, TypedFunction, einsum, record, typed_flops
from typedflops.cost.types import above_one, is_one
from typedflops.testing import assert_flops

b, i, o, n, d = sympy.symbols("b i o n d")


@typed_flops
def contract(x: Float[Tensor, "b i"], w: Float[Tensor, "i o"]) -> Float[Tensor, "b o"]:
    return einsum(x, w, "b i, i o -> b o")


@typed_flops
def early(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    if x.shape[1] == 1:
        return x
    return x.softmax(-1)


@typed_flops
def both_one(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    if x.shape[0] == 1 and x.shape[1] == 1:
        return x
    return x * 2


@typed_flops
def mixed(x: Float[Tensor, "n d"], w: Float[Tensor, "d o"]) -> Float[Tensor, "n o"]:
    h = torch.relu(x @ w)  # a product over d stays a product at d = 1
    if x.shape[0] == 1:
        return h
    return torch.einsum("no,no->no", h, h) + h


def _estimate(function: TypedFunction[..., Tensor], sizes: dict[str, int]) -> Cost:
    estimate: Callable[..., Cost] = function.estimate  # (sizes are keywords, like dtype=)
    return estimate(**sizes)


def _at(cost: Cost, sizes: dict[str, int]) -> object:
    return cost.formula.xreplace({sympy.Symbol(k): v for k, v in sizes.items()})


def test_a_branch_on_a_dim_being_one_is_fitted() -> None:
    cost = early.estimate(n=4, d=8)
    assert cost.exact
    assert cost.formula == 5 * d * n - 5 * n * is_one(d)
    assert str(cost.formula) == "5*d*n - 5*n*KroneckerDelta(1, d)"
    assert above_one(cost.formula) == 5 * d * n
    assert early.estimate(n=4, d=1).flops == 0 == _at(cost, {"n": 4, "d": 1})


def test_a_branch_on_two_dims_being_one_is_fitted() -> None:
    cost = both_one.estimate(n=4, d=8)
    assert cost.exact
    assert cost.formula == d * n - is_one(n) * is_one(d)
    for sizes in ({"n": 1, "d": 1}, {"n": 1, "d": 5}, {"n": 3, "d": 1}):
        assert _at(cost, sizes) == _estimate(both_one, sizes).flops


def test_a_sum_torch_lowers_at_one_keeps_the_formula_as_written() -> None:
    cost = contract.estimate(b=4, i=8, o=3)
    assert cost.exact and cost.formula == 2 * b * i * o
    at_one = contract.estimate(b=4, i=1, o=3)  # a multiply ran: 12 FLOPs, not 24
    assert at_one.flops == 12 and at_one.exact
    assert at_one.formula == 2 * b * i * o - b * o * is_one(i)


@typed_flops
def mixing(x: Float[Tensor, "b n d"], w: Float[Tensor, "d d"]) -> Float[Tensor, "b n d"]:
    y = x @ w
    if x.shape[1] > 1:  # a second product where there is a sequence to mix
        y = y @ w
    return y


@given(st.integers(2, 4), st.integers(2, 6), st.integers(2, 9))
@settings(max_examples=4, deadline=None)
def test_a_product_left_out_at_one_is_no_product_run_as_a_multiply(
    batch: int, seq: int, width: int
) -> None:
    # At n = 1 a product is gone and none became a multiply: the formula has a part there
    # (2*b*d**2 less), where taking it for torch's own lowering kept 4*b*d**2*n, exact.
    cost = mixing.estimate(b=batch, n=seq, d=width)
    assert cost.exact
    assert cost.formula == 4 * b * d**2 * n - 2 * b * d**2 * is_one(n)
    for sizes in ({"b": batch, "n": 1, "d": width}, {"b": 1, "n": 1, "d": width}):
        assert _at(cost, sizes) == _estimate(mixing, sizes).flops == 2 * sizes["b"] * width**2


@typed_flops
def with_context(x: Float[Tensor, "b d"], ctx: Float[Tensor, "m d"]) -> Float[Tensor, "b d"]:
    y = x * 2.0
    if ctx.shape[0] == 1:  # one context row: added to every row
        y = y + ctx[0]
    return y


def test_a_branch_on_a_dim_no_formula_names_being_one_is_fitted() -> None:
    # m names no formula (b*d at m >= 2), so it was never run at 1: b*d, exact, was 32 at
    # m = 1 where the add ran too (64).
    m = sympy.Symbol("m")
    cost = with_context.estimate(b=4, m=3, d=8)
    assert cost.exact
    assert cost.formula == b * d + b * d * is_one(m)
    for sizes in ({"b": 4, "m": 1, "d": 8}, {"b": 1, "m": 1, "d": 3}, {"b": 2, "m": 5, "d": 3}):
        expected = sizes["b"] * sizes["d"] * (2 if sizes["m"] == 1 else 1)
        assert _at(cost, sizes) == _estimate(with_context, sizes).flops == expected


def test_record_rows_are_true_at_their_sizes() -> None:
    with record() as rec:
        early(torch.randn(2, 1))
        early(torch.randn(2, 5))
    assert rec.total.flops == 5 * 2 * 5
    for row in rec.calls:
        cost = row.cost()
        assert _at(cost, dict(cost.dims)) == cost.flops


def test_assert_flops_compares_a_book_formula_above_one() -> None:
    assert_flops(early, "5*d*n", n=4, d=8)
    assert_flops(early, 5 * d * n - 5 * n * is_one(d), n=4, d=8)


def test_a_formula_read_back_from_text_keeps_its_parts() -> None:
    text = early.estimate(n=4, d=8).to_dict()["formula"]
    assert sympy.sympify(text).xreplace({n: 4, d: 1}) == 0


BODIES: list[tuple[TypedFunction[..., Tensor], tuple[str, ...]]] = [
    (early, ("n", "d")),
    (both_one, ("n", "d")),
    (mixed, ("n", "d", "o")),
]


@settings(max_examples=12, deadline=None)
@given(
    body=st.sampled_from(BODIES),
    base=st.lists(st.integers(2, 9), min_size=3, max_size=3),
    other=st.lists(st.integers(1, 3), min_size=3, max_size=3),
)
def test_an_exact_formula_gives_the_count_at_other_sizes_one_included(
    body: tuple[TypedFunction[..., Tensor], tuple[str, ...]], base: list[int], other: list[int]
) -> None:
    function, names = body
    cost = _estimate(function, dict(zip(names, base, strict=False)))
    assert _at(cost, dict(cost.dims)) == cost.flops
    sizes = dict(zip(names, other, strict=False))
    if cost.exact:
        assert _at(cost, sizes) == _estimate(function, sizes).flops


class _Head(torch.nn.Module):
    """Written the usual way: torch modules, no annotations, a branch for batch 1, a tensor
    made inside forward."""

    def __init__(self, d: int, k: int) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(d, k)
        self.norm = torch.nn.LayerNorm(k)

    def forward(self, x: Tensor) -> Tensor:
        y: Tensor = self.proj(x)
        if x.shape[0] == 1:  # a single example: no norm
            return y
        mask = torch.ones(y.shape[-1])
        out: Tensor = self.norm(y) * mask
        return out


def test_a_plain_module_branching_on_batch_one() -> None:
    from typedflops import estimate

    spec = Float[Tensor, "batch ... d"]
    cost = estimate(_Head(16, 8), spec, batch=4, ellipsis=3, d=16)
    batch, ellipsis = sympy.symbols("batch ellipsis")
    assert cost.exact
    assert cost.formula == 320 * batch * ellipsis - 64 * ellipsis * is_one(batch)
    for size in (1, 2, 5):
        ran = estimate(_Head(16, 8), spec, batch=size, ellipsis=3, d=16).flops
        assert cost.formula.xreplace({batch: size, ellipsis: 3}) == ran


def _saved_bytes(module: torch.nn.Module, x: Tensor) -> int:
    """The bytes autograd saves for backward in a real run of ``module`` on ``x`` (each
    storage once, the module's weights not counted)."""
    storages: dict[int, int] = {}

    def pack(tensor: Tensor) -> Tensor:
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    weights = {p.untyped_storage().data_ptr() for p in module.parameters()}
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        module(x)
    return sum(size for pointer, size in storages.items() if pointer not in weights)


def test_torch_saving_other_storages_at_batch_one_gives_the_activations_a_part() -> None:
    """Rotary attention on torch's math kernel keeps other storages for backward at batch 1
    than the line through batch 2 and 3 gives (the same calls: 3968 bytes saved at batch 1,
    5760 and 8576 at 2 and 3): the activation formula has its part there, and every term
    gives the dry runs at batch 1, the activations the bytes a real run saves."""
    from typedflops import estimate
    from typedflops.nn.attention import Attention

    torch.manual_seed(0)
    attention = Attention(32, 4, rope=True)
    spec = Float[Tensor, "batch seq d_model"]
    batch = sympy.Symbol("batch")
    with sdpa_kernel(SDPBackend.MATH):
        cost = estimate(attention, spec, batch=2, seq=4, d_model=32)
        assert cost.exact
        assert cost.activation.formula.has(is_one(batch))
        for sizes in ({"batch": 1, "seq": 4}, {"batch": 1, "seq": 7}, {"batch": 3, "seq": 5}):
            ran = estimate(attention, spec, batch=sizes["batch"], seq=sizes["seq"], d_model=32)
            for name, term in cost.terms.items():
                assert term.at({**cost.dims, **sizes}) == ran.terms[name].count, (name, sizes)
            real = _saved_bytes(attention, torch.randn(sizes["batch"], sizes["seq"], 32))
            assert ran.activation.count == real


class SharedKeys(nn.Module):
    """Key heads from one projection; with one key head (multi-query), scaled once more."""

    def __init__(self, d: int, n_kv_heads: int) -> None:
        super().__init__()
        self.kv = nn.Linear(d, n_kv_heads * 8, bias=False)
        self.n_kv_heads = n_kv_heads

    def forward(self, x: Tensor) -> Tensor:
        keys: Tensor = self.kv(x)
        if self.n_kv_heads == 1:
            keys = keys * 0.5
        return keys


def test_a_branch_on_a_modules_own_size_at_one_gives_the_formula_a_part() -> None:
    spec = Float[Tensor, "b s d"]
    cost = typedflops.estimate(SharedKeys(16, 4), spec, b=2, s=3, d=16)
    assert cost.flops == 2 * 2 * 3 * 16 * 32
    b, s, d, heads = sympy.symbols("b s d n_kv_heads")
    # built with one key head, the body scales the keys too
    assert sympy.expand(cost.formula - 16 * b * s * d * heads - 8 * b * s * is_one(heads)) == 0
    assert cost.exact
    one = typedflops.estimate(SharedKeys(16, 1), spec, b=2, s=3, d=16)
    assert one.flops == 2 * 2 * 3 * 16 * 8 + 2 * 3 * 8
    assert cost.forward.at({**cost.dims, "n_kv_heads": 1}) == one.flops
    assert above_one(cost.formula) == 16 * b * s * d * heads
