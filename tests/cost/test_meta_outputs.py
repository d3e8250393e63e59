"""A dry run runs each of torch's meta kernels once per distinct call: what an op gave on
``meta`` is rebuilt for the next call given the same shapes, strides, dtypes and values,
exactly as the kernel would give it, and never for an op that writes or returns a view."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import Float
from torch import Tensor, nn

from typedflops import estimate
from typedflops.cost.engine import meta_outputs
from typedflops.cost.engine.meta_outputs import cached_outputs, keep_outputs, meta_key

aten = torch.ops.aten


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    meta_outputs._KEPT.clear()
    yield
    meta_outputs._KEPT.clear()


def _layout(t: Tensor) -> tuple[tuple[int, ...], tuple[int, ...], torch.dtype, int]:
    return (tuple(t.shape), t.stride(), t.dtype, int(t.storage_offset()))


def _meta(shape: tuple[int, int], transposed: bool, dtype: torch.dtype) -> Tensor:
    if transposed:  # the same shape, its strides swapped
        return torch.empty(shape[::-1], dtype=dtype, device="meta").transpose(0, 1)
    return torch.empty(shape, dtype=dtype, device="meta")


OPS = [
    (aten.add.Tensor, 2),
    (aten.mul.Tensor, 2),
    (aten.relu.default, 1),
    (aten.gelu.default, 1),
    (aten.sum.dim_IntList, 1),
    (aten.mm.default, 2),
    (aten._softmax.default, 1),
    (aten.native_layer_norm.default, 1),
]


def _call(
    op: object, count: int, x: Tensor, y: Tensor
) -> tuple[tuple[object, ...], dict[str, object]]:
    if op is aten.sum.dim_IntList:
        return (x, [-1], True), {}
    if op is aten._softmax.default:
        return (x, -1, False), {}
    if op is aten.native_layer_norm.default:
        return (x, [x.shape[-1]], None, None, 1e-5), {}
    if op is aten.mm.default:
        return (x, y.transpose(-1, -2)), {}
    return ((x, y) if count == 2 else (x,)), {}


@settings(max_examples=60, deadline=None)
@given(
    index=st.integers(0, len(OPS) - 1),
    rows=st.integers(1, 5),
    cols=st.integers(1, 5),
    transposed=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float64]),
)
def test_a_kept_call_gives_what_the_kernel_gives(
    index: int, rows: int, cols: int, transposed: bool, dtype: torch.dtype
) -> None:
    """For ops of every kind (elementwise on transposed inputs, reductions, products, ops
    of several outputs): the outputs rebuilt for a known call have the shapes, strides,
    dtypes and offsets the meta kernel gives, in new storages."""
    op, count = OPS[index]
    x = _meta((rows, cols), transposed, dtype)
    y = _meta((rows, cols), False, dtype)
    args, kwargs = _call(op, count, x, y)
    key = meta_key(op, args, kwargs)
    assert key is not None
    first = op(*args, **kwargs)
    keep_outputs(key, first)
    again = cached_outputs(key)
    firsts = first if isinstance(first, tuple) else (first,)
    agains = again if isinstance(again, tuple) else (again,)
    assert [_layout(t) for t in agains] == [_layout(t) for t in firsts]
    assert type(again) is type(first)
    assert all(
        a.untyped_storage()._cdata != f.untyped_storage()._cdata
        for a, f in zip(agains, firsts, strict=True)
    )


def test_what_writes_views_or_reads_more_than_its_arguments_is_never_kept() -> None:
    """In-place ops, views, aliases and ``out=`` variants, calls on real or subclass
    tensors, calls with a generator or a symbolic size, and factories (which read global
    state) are run every time."""
    x = torch.empty(4, 4, device="meta")
    assert meta_key(aten.add_.Tensor, (x, x), {}) is None
    assert meta_key(aten.view.default, (x, [16]), {}) is None
    assert meta_key(aten.t.default, (x,), {}) is None
    assert meta_key(aten.detach.default, (x,), {}) is None
    assert meta_key(aten.add.out, (x, x), {"out": x}) is None
    assert meta_key(aten.relu.default, (torch.empty(4, 4),), {}) is None
    assert meta_key(aten.zeros.default, ([4, 4],), {"device": "meta"}) is None
    generator = torch.Generator()
    assert meta_key(aten.normal.Tensor_float, (x,), {"generator": generator}) is None
    assert meta_key(aten.relu.default, (x,), {}) is not None


def test_the_default_dtype_is_part_of_a_call() -> None:
    """An integer tensor times a Python float is of the default dtype: a call made under
    another default is another call."""
    ints = torch.empty(3, dtype=torch.int64, device="meta")
    key32 = meta_key(aten.mul.Scalar, (ints, 0.5), {})
    assert key32 is not None
    keep_outputs(key32, aten.mul.Scalar(ints, 0.5))
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        key64 = meta_key(aten.mul.Scalar, (ints, 0.5), {})
        assert key64 != key32
        assert cached_outputs(key64) is None  # type: ignore[arg-type]
        assert aten.mul.Scalar(ints, 0.5).dtype == torch.float64
    finally:
        torch.set_default_dtype(previous)


def _blocks(count: int) -> nn.Module:
    return nn.Sequential(*[nn.Sequential(nn.Linear(16, 16), nn.GELU()) for _ in range(count)])


def test_repeated_blocks_run_each_kernel_once_and_count_alike(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In a dry run of 40 equal blocks, each block's ops are the calls of the first: torch's
    kernels run for the first block only (fewer kernel runs than blocks, at every size the
    dry runs take). Its forward costs 4 times a model of 10's; every figure is the one a
    dry run that keeps nothing gives."""
    from typedflops.cost.engine import counter

    ran: list[object] = []

    def kept(key: meta_outputs.Key, out: object) -> None:
        ran.append(key[0])
        keep_outputs(key, out)

    spec = Float[Tensor, "batch 16"]
    ten = estimate(_blocks(10), spec, batch=8)
    meta_outputs._KEPT.clear()
    monkeypatch.setattr(counter, "keep_outputs", kept)
    forty = estimate(_blocks(40), spec, batch=8)
    assert 0 < ran.count(aten.addmm.default) < 40
    assert forty.flops == 4 * ten.flops
    limit = meta_outputs._LIMIT
    meta_outputs._LIMIT = 0  # every call runs its kernel
    try:
        fresh = estimate(_blocks(40), spec, batch=8)
    finally:
        meta_outputs._LIMIT = limit
    assert (fresh.flops, fresh.backward_flops, fresh.activation_bytes) == (
        forty.flops,
        forty.backward_flops,
        forty.activation_bytes,
    )
    assert fresh.formula == forty.formula
