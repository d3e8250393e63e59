"""The wrapped einops ops: einops' results, pattern and shape errors, recorded costs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import einops
import pytest
import sympy
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import Float
from torch import Tensor
from torch.utils.flop_counter import FlopCounterMode

from typedflops import record
from typedflops.cost.types import Cost
from typedflops.einops.ops import einsum, rearrange, reduce, repeat
from typedflops.errors import PatternError, ShapeError, SpecError

# -- einops' results, bit for bit ---------------------------------------------------------

EINSUMS = [
    ("b i, i o -> b o", [(8, 16), (16, 4)]),
    ("b h s d, b h t d -> b h s t", [(2, 3, 5, 4), (2, 3, 6, 4)]),
    ("... i, o i -> ... o", [(2, 3, 7), (5, 7)]),
    ("i i ->", [(4, 4)]),
    ("i j -> j i", [(3, 5)]),
    ("i, j -> i j", [(3,), (4,)]),
    ("a b, a b -> a b", [(3, 4), (3, 4)]),
    ("i j -> i", [(3, 5)]),
]


@pytest.mark.parametrize(("pattern", "shapes"), EINSUMS)
def test_einsum_matches_einops(pattern: str, shapes: list[tuple[int, ...]]) -> None:
    tensors = [torch.randn(*shape) for shape in shapes]
    assert torch.equal(einsum(*tensors, pattern), einops.einsum(*tensors, pattern))


TRANSFORMS: list[tuple[str, tuple[int, ...], str, dict[str, int]]] = [
    ("rearrange", (2, 3, 4), "b h w -> b w h", {}),
    ("rearrange", (2, 12, 5), "b (h d) s -> b h s d", {"h": 4}),
    ("rearrange", (2, 3, 4, 5), "b ... c -> b c ...", {}),
    ("rearrange", (2, 3, 4), "b h w -> b (h w)", {}),
    ("rearrange", (2, 3, 4), "b h w -> b 1 h w", {}),
    ("rearrange", (6, 4), "(a b) c -> b (c a)", {"a": 2}),
    ("repeat", (3, 4), "h w -> h w c", {"c": 3}),
    ("repeat", (3, 4), "h w -> (r h) w", {"r": 2}),
    ("repeat", (3, 4), "h w -> h (w w2) 2", {"w2": 2}),
    ("repeat", (2, 3), "... w -> ... 2 w", {}),
]
REDUCTIONS = ["min", "max", "sum", "mean", "prod"]


@pytest.mark.parametrize(("op", "shape", "pattern", "lengths"), TRANSFORMS)
def test_transforms_match_einops(
    op: str, shape: tuple[int, ...], pattern: str, lengths: dict[str, int]
) -> None:
    x = torch.randn(*shape)
    ours: Callable[..., Tensor] = {"rearrange": rearrange, "repeat": repeat}[op]
    theirs: Callable[..., Tensor] = getattr(einops, op)
    expected = theirs(x, pattern, **lengths)
    got = ours(x, pattern, **lengths)
    assert torch.equal(got, expected)
    assert got.stride() == expected.stride()


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize(
    ("shape", "pattern", "lengths"),
    [
        ((4, 6, 8), "b h w -> b", {}),
        ((4, 6, 8), "b (h h2) (w w2) -> b h w", {"h2": 2, "w2": 2}),
        ((4, 6, 8), "b ... -> b", {}),
        ((4, 6, 8), "b h w -> b 1 1", {}),
        ((4, 6, 8), "b h (w 2) -> w h", {}),
    ],
)
def test_reduce_matches_einops(
    reduction: Any, shape: tuple[int, ...], pattern: str, lengths: dict[str, int]
) -> None:
    x = torch.rand(*shape) + 0.5
    expected = einops.reduce(x, pattern, reduction, **lengths)
    assert torch.equal(reduce(x, pattern, reduction, **lengths), expected)


def test_reduce_any_all_callable_and_list_input() -> None:
    x = torch.rand(3, 4) > 0.5
    for reduction in ("any", "all"):
        assert torch.equal(
            reduce(x, "a b -> a", reduction), einops.reduce(x, "a b -> a", reduction)
        )

    def logsumexp(t: Tensor, axes: tuple[int, ...]) -> Tensor:
        return torch.logsumexp(t, dim=axes)

    y = torch.randn(3, 4)
    assert torch.equal(reduce(y, "a b -> a", logsumexp), einops.reduce(y, "a b -> a", logsumexp))
    items = [torch.randn(2, 3) for _ in range(4)]
    assert torch.equal(
        rearrange(items, "n a b -> a n b"), einops.rearrange(items, "n a b -> a n b")
    )


class _Logged(torch.Tensor):
    """A tensor subclass that notes every torch function called on it."""

    calls: ClassVar[list[str]] = []

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        cls.calls.append(getattr(func, "__name__", ""))
        return super().__torch_function__(func, types, args, kwargs or {})  # type: ignore[no-untyped-call]


class _LogEinsum(torch.overrides.TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.einsum:
            self.calls.append("einsum")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize(("pattern", "shapes"), [EINSUMS[0], EINSUMS[3]])
def test_torch_function_overrides_see_einsum_as_under_einops(
    pattern: str, shapes: list[tuple[int, ...]]
) -> None:
    tensors = [torch.randn(*shape) for shape in shapes]
    logged = [tensors[0].as_subclass(_Logged), *tensors[1:]]
    _Logged.calls.clear()
    ours = einsum(*logged, pattern)
    theirs = einops.einsum(*logged, pattern)
    assert type(ours) is type(theirs) is _Logged
    assert torch.equal(ours, theirs)
    assert _Logged.calls.count("einsum") == 2  # once each
    with _LogEinsum() as mode:
        einsum(*tensors, pattern)
        einops.einsum(*tensors, pattern)
    assert mode.calls == ["einsum", "einsum"]


def test_three_operand_einsum_matches_einops_numerically() -> None:
    a, b, c = torch.randn(30, 4), torch.randn(4, 30), torch.randn(30, 4)
    ours = einsum(a, b, c, "i j, j k, k l -> i l")
    torch.testing.assert_close(ours, einops.einsum(a, b, c, "i j, j k, k l -> i l"))


# -- pattern errors -----------------------------------------------------------------------

PATTERN_ERRORS: list[tuple[Callable[[], object], list[str]]] = [
    (
        lambda: einsum(torch.ones(2, 3), "i j, j k -> i k"),  # type: ignore[pattern]
        ["2 operands but 1 tensor was given", "input shapes: (2, 3)"],
    ),
    (
        lambda: einsum(torch.ones(2, 3), torch.ones(3, 4), "i j, j k -> i l"),  # type: ignore[pattern]
        ["axis 'l' is on the right but in no operand", "offending axis: l"],
    ),
    (
        lambda: einsum(torch.ones(2, 3), torch.ones(3, 4, 5), "i j, j k -> i k"),
        ["operand 2 has shape (3, 4, 5)", "need 2 dimensions", "input shapes: (2, 3), (3, 4, 5)"],
    ),
    (
        lambda: einsum(torch.ones(2, 3), torch.ones(5, 4), "i j, j k -> i k"),
        [
            "axis 'j' has size 3 in operand 1 (axis 1) but 5 in operand 2 (axis 0)",
            "offending axis: j",
        ],
    ),
    (lambda: einsum(torch.ones(2, 3), "i j"), ["needs '->'"]),  # type: ignore[pattern]
    (
        lambda: rearrange(torch.ones(2, 10), "b (h d) -> b h d", h=3),
        ["cannot be split into (h d): 10 is not divisible by 3", "offending axis: d"],
    ),
    (
        lambda: rearrange(torch.ones(2, 10), "b c -> b c d"),  # type: ignore[pattern]
        ["axis 'd' is on one side only", "input shapes: (2, 10)"],
    ),
    (lambda: rearrange(torch.ones(2, 10), "b, c -> c b"), ["not commas"]),  # type: ignore[pattern]
    (lambda: rearrange(torch.ones(2, 10, 3), "b c -> c b"), ["needs 2 dimensions but has 3"]),
    (lambda: repeat(torch.ones(2, 3), "h w -> h w c"), ["new axis 'c' needs a length"]),  # type: ignore[pattern]
    (
        lambda: reduce(torch.ones(2, 3), "a b -> a", "meen"),  # type: ignore[arg-type]
        ["unknown reduction 'meen'"],
    ),
    (lambda: reduce(torch.ones(2, 3), "a b -> a c", "sum"), ["axis 'c' is on the right"]),  # type: ignore[pattern]
]


@pytest.mark.parametrize(("call", "fragments"), PATTERN_ERRORS)
def test_pattern_errors(call: Callable[[], object], fragments: list[str]) -> None:
    with pytest.raises(PatternError) as info:
        call()
    err = info.value
    assert isinstance(err, einops.EinopsError)
    assert isinstance(err, SpecError)
    assert err.__cause__ is None and err.__suppress_context__
    for fragment in fragments:
        assert fragment in str(err)


def test_error_raised_before_any_work() -> None:
    # On meta tensors nothing could run anyway; a counter shows no torch op was dispatched.
    x, w = torch.ones(2, 3), torch.ones(5, 4)
    with FlopCounterMode(display=False) as counter, pytest.raises(PatternError):
        einsum(x, w, "i j, j k -> i k")
    assert counter.get_total_flops() == 0
    with record() as rec, pytest.raises(PatternError):
        einsum(x, w, "i j, j k -> i k")
    assert rec.total.ops == () and rec.total.uncounted == ()


# -- costs --------------------------------------------------------------------------------


def _recorded(fn: Callable[[], object]) -> Cost:
    with record() as rec:
        fn()
    return rec.total


def test_einsum_costs_by_hand() -> None:
    x, w = torch.ones(8, 16), torch.ones(16, 4)
    cost = _recorded(lambda: einsum(x, w, "b i, i o -> b o"))
    assert cost.flops == 2 * 8 * 16 * 4
    assert cost.bytes_read == (8 * 16 + 16 * 4) * 4 and cost.bytes_written == 8 * 4 * 4
    assert cost.backward_flops == 0
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    assert _recorded(lambda: einsum(xg, wg, "b i, i o -> b o")).backward_flops == 2 * 2 * 8 * 16 * 4
    assert _recorded(lambda: einsum(x, wg, "b i, i o -> b o")).backward_flops == 2 * 8 * 16 * 4
    a, b = torch.ones(3, 4), torch.ones(3, 4, requires_grad=True)
    product = _recorded(lambda: einsum(a, b, "i j, i j -> i j"))
    assert (product.flops, product.backward_flops) == (12, 12)
    assert _recorded(lambda: einsum(torch.ones(3), torch.ones(4), "i, j -> i j")).flops == 12
    assert _recorded(lambda: einsum(torch.ones(3, 5), "i j -> j i")).flops == 0
    assert _recorded(lambda: einsum(torch.ones(3, 5), "i j -> i")).flops == 15
    assert _recorded(lambda: einsum(torch.ones(4, 4), "i i ->")).flops == 4


def test_three_operand_einsum_counts_the_order_that_ran() -> None:
    a, b, c = (
        torch.ones(1000, 10, device="meta"),
        torch.ones(10, 1000, device="meta"),
        torch.ones(1000, 10, device="meta"),
    )
    cost = _recorded(lambda: einsum(a, b, c, "i j, j k, k l -> i l"))
    assert cost.flops == 400_000
    with FlopCounterMode(display=False) as counter:
        torch.einsum("ij,jk,kl->il", a, b, c)
    assert counter.get_total_flops() == 400_000
    assert len(cost.ops) == 1 and cost.ops[0].pattern == "i j, j k, k l -> i l"


def test_reduce_costs() -> None:
    x = torch.ones(4, 6, 8, requires_grad=True)
    summed = _recorded(lambda: reduce(x, "b h w -> b", "sum"))
    assert (summed.flops, summed.backward_flops) == (192, 0)
    mean = _recorded(lambda: reduce(x, "b h w -> b h", "mean"))
    assert (mean.flops, mean.backward_flops) == (192 + 24, 192)
    maximum = _recorded(lambda: reduce(x, "b h w -> b", "max"))
    # max's backward as autograd runs it: compare each element with the max (192), share
    # the gradient among ties (4 divides) and multiply it in (192)
    assert (maximum.flops, maximum.backward_flops) == (192, 192 + 4 + 192)
    assert _recorded(lambda: reduce(x, "b h w -> b w h", "sum")).flops == 0


def test_view_and_copy_bytes() -> None:
    x = torch.ones(4, 6, 8)
    view = _recorded(lambda: rearrange(x, "b h w -> b w h"))
    assert view.ops[0].view is True and view.bytes == 0 and view.flops == 0
    copy = _recorded(lambda: rearrange(x, "b h w -> b (w h)"))
    assert copy.ops[0].view is False
    assert (copy.bytes_read, copy.bytes_written) == (4 * 6 * 8 * 4,) * 2
    meta = torch.ones(4, 6, 8, device="meta")
    assert _recorded(lambda: rearrange(meta, "b h w -> b w h")).ops[0].view is True
    assert _recorded(lambda: rearrange(meta, "b h w -> b (w h)")).ops[0].view is False
    tiled = _recorded(lambda: repeat(x, "b h w -> b (r h) w", r=2))
    assert tiled.ops[0].view is False and tiled.bytes_written == 2 * 4 * 6 * 8 * 4
    assert tiled.flops == 0


def test_wrapped_ops_are_not_counted_twice() -> None:
    x, w = torch.ones(8, 16), torch.ones(16, 4)
    cost = _recorded(lambda: einsum(x, w, "b i, i o -> b o"))
    assert [op.op for op in cost.ops] == ["einsum"]
    cost = _recorded(lambda: reduce(x, "b i -> b", "mean"))
    assert [op.op for op in cost.ops] == ["reduce"]


MATMUL_LIKE = [
    ("b i, i o -> b o", "batch d_in, d_in d_out"),
    ("b h s d, b h t d -> b h s t", ""),
    ("i j, k j -> i k", ""),
]


def _flop_counter(fn: Callable[[], Tensor], backward: bool) -> int:
    with FlopCounterMode(display=False) as counter:
        out = fn()
        if backward:
            out.sum().backward()
    return int(counter.get_total_flops())


@pytest.mark.parametrize("grad", [(), (0,), (1,), (0, 1)])
def test_two_operand_einsum_agrees_with_flop_counter(grad: tuple[int, ...]) -> None:
    shapes = [(2, 3, 5, 4), (2, 3, 6, 4)]
    tensors = [torch.randn(*s, requires_grad=i in grad) for i, s in enumerate(shapes)]
    pattern = "b h s d, b h t d -> b h s t"
    cost = _recorded(lambda: einsum(*tensors, pattern))
    forward = _flop_counter(lambda: torch.einsum("abcd,abed->abce", *tensors), backward=False)
    assert cost.flops == forward == 2 * 2 * 3 * 5 * 6 * 4
    if grad:
        total = _flop_counter(lambda: torch.einsum("abcd,abed->abce", *tensors), backward=True)
        assert cost.flops + cost.backward_flops == total


@settings(max_examples=40, deadline=None)
@given(
    # j >= 2: torch lowers a contraction over a size-1 axis to a mul, which FlopCounterMode
    # counts 0; typedflops keeps the 2·N convention (accumulators start at zero).
    b=st.integers(1, 6),
    i=st.integers(1, 9),
    j=st.integers(2, 9),
    k=st.integers(1, 9),
    pattern=st.sampled_from(
        ["b i j, b j k -> b i k", "i j, b j k -> b k i", "b i j, k j -> i b k"]
    ),
    grad_first=st.booleans(),
)
def test_counted_equals_formula_equals_flop_counter(
    b: int, i: int, j: int, k: int, pattern: str, grad_first: bool
) -> None:
    sizes = {"b": b, "i": i, "j": j, "k": k}
    left, right = pattern.split("->")
    operand_axes = [part.split() for part in left.split(",")]
    tensors = [torch.randn(*(sizes[a] for a in axes), device="meta") for axes in operand_axes]
    tensors[0].requires_grad_(grad_first)
    tensors[1].requires_grad_(True)
    cost = _recorded(lambda: einsum(*tensors, pattern))
    formula = 2 * sympy.Mul(*(sympy.Symbol(a) for a in sizes if a in left))
    assert cost.flops == int(formula.subs(sizes))
    equation = ",".join("".join(axes) for axes in operand_axes) + "->" + "".join(right.split())
    forward = _flop_counter(lambda: torch.einsum(equation, *tensors), backward=False)
    total = _flop_counter(lambda: torch.einsum(equation, *tensors), backward=True)
    assert cost.flops == forward
    assert cost.flops + cost.backward_flops == total


# -- inside decorated functions ------------------------------------------------------------


def test_bound_dim_mismatch_names_both_origins() -> None:
    from typedflops import typed_flops

    @typed_flops
    def linear(x: Float[Tensor, "batch d_in"], w: Tensor) -> Tensor:
        return einsum(x, w, "batch d_in, d_in d_out -> batch d_out")

    with pytest.raises(ShapeError) as info:
        linear(torch.ones(8, 784), torch.ones(600, 10))
    lines = str(info.value).splitlines()
    assert lines[0] == (
        'linear(): einsum "batch d_in, d_in d_out -> batch d_out": operand 2 has d_in=600 '
        "(shape (600, 10), axis 0) but d_in=784 was bound by argument 'x' (shape (8, 784), axis 1)"
    )
    assert lines[1].strip() == "bound so far: batch=8, d_in=784"
    assert info.value.dim == "d_in" and info.value.expected == 784 and info.value.actual == 600


def test_bound_dim_mismatch_in_rearrange() -> None:
    from typedflops import typed_flops

    @typed_flops
    def bad(x: Float[Tensor, "batch d"], y: Tensor) -> Tensor:
        return rearrange(y, "batch d -> d batch")

    with pytest.raises(ShapeError) as info:
        bad(torch.ones(2, 4), torch.ones(3, 4))
    assert str(info.value).splitlines()[0] == (
        'bad(): rearrange "batch d -> d batch": the input has batch=3 (shape (3, 4), axis 0) '
        "but batch=2 was bound by argument 'x' (shape (2, 4), axis 0)"
    )


def test_symbolic_formulas_in_decorated_functions() -> None:
    from typedflops import typed_flops

    @typed_flops
    def linear(
        x: Float[Tensor, "batch d_in"], w: Float[Tensor, "d_in d_out"]
    ) -> Float[Tensor, "batch d_out"]:
        return einsum(x, w, "batch d_in, d_in d_out -> batch d_out")

    batch, d_in, d_out = sympy.symbols("batch d_in d_out")
    cost = linear.estimate(batch=8, d_in=784, d_out=10, grad=("w",))
    assert cost.formula == 2 * batch * d_in * d_out
    assert cost.backward_formula == 2 * batch * d_in * d_out
    assert cost.flops == 2 * 8 * 784 * 10

    @typed_flops
    def heads(
        x: Float[Tensor, "batch seq d_model"], w: Float[Tensor, "d_model d_model"]
    ) -> Float[Tensor, "batch seq d_model"]:
        q = einsum(x, w, "b s d, d e -> b s e")
        qh = rearrange(q, "b s (h k) -> b h s k", h=4)
        scores = einsum(qh, qh, "b h s k, b h t k -> b h s t")
        pooled = reduce(scores, "b h s t -> b s", "mean")
        return einsum(pooled, x, "b s, b s d -> b s d")

    seq, d_model = sympy.symbols("seq d_model")
    cost = heads.estimate(batch=2, seq=5, d_model=16)
    assert cost.flops == (
        2 * 2 * 5 * 16 * 16 + 2 * 2 * 5 * 5 * 16 + (2 * 4 * 5 * 5 + 2 * 5) + 2 * 5 * 16
    )
    expected = (
        2 * batch * seq * d_model**2
        + 2 * batch * seq**2 * d_model
        + 4 * batch * seq**2
        + batch * seq
        + batch * seq * d_model
        # heads of width 1 (d_model = 4): the scores' product sums over one value, a multiply
        - 4 * batch * seq**2 * sympy.KroneckerDelta(1, d_model / 4)
    )
    assert sympy.expand(cost.formula - expected) == 0
    x, w = torch.randn(2, 5, 4), torch.randn(4, 4)
    with record() as rec:
        heads(x, w)
    assert rec.total.flops == cost.formula.subs({batch: 2, seq: 5, d_model: 4}) == 770


def test_repeat_of_new_axes_is_a_broadcast_view() -> None:
    # einops returns an expand() view when no reshape is needed: recorded as a view.
    x = torch.ones(3, 4)
    with record() as rec:
        y = repeat(x, "h w -> h w c", c=5)
    assert y.stride() == einops.repeat(x, "h w -> h w c", c=5).stride()
    assert rec.total.ops[0].view is True and rec.total.bytes == 0


def test_compiled_fullgraph_runs_valid_calls() -> None:
    def body(x: Tensor, w: Tensor) -> Tensor:
        h = einsum(x, w, "b i, i o -> b o")
        return reduce(rearrange(h, "b (g d) -> b g d", g=2), "b g d -> b", "sum")

    x, w = torch.randn(8, 16), torch.randn(16, 4)
    compiled = torch.compile(body, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(x, w), body(x, w))
