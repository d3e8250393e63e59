"""Bodies that build tensors from data or call kernels by name, in a dry run: counted where
torch can run the op on shapes alone (meta, or fake tensors), else one line naming the op,
the user's line and the way out, ``record()`` on a real run, which counts it."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
from jaxtyping import Float
from torch import Tensor

from typedflops import estimate, record
from typedflops.errors import DryRunError


def _strided_nested(x: Tensor) -> Tensor:
    return torch.nested.nested_tensor([x[0], x[1, :2]]) * 2


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_a_strided_nested_tensor_stops_a_dry_run_in_one_line_naming_the_op() -> None:
    # torch builds a strided nested tensor on real storage only (meta refused, and no fake
    # kernel): the dry run stopped with "give sizes the body can run at", which no size helps
    with pytest.raises(DryRunError) as caught:
        estimate(_strided_nested, Float[Tensor, "n d"], n=2, d=3)
    message = str(caught.value)
    assert "\n" not in message
    assert "a dry run cannot go past _nested_tensor_from_tensor_list at " in message
    assert "test_shape_only_kernels.py" in message and "nested_tensor([x[0]" in message
    assert "record a real run instead" in message and "give sizes" not in message


def _jagged(x: Tensor) -> Tensor:
    return torch.nested.nested_tensor([x[0], x[1, :2]], layout=torch.jagged) * 2


def _as_jagged(x: Tensor) -> Tensor:
    return torch.nested.as_nested_tensor([x[0], x[1, :2]], layout=torch.jagged) * 2


def _from_list(x: Tensor) -> Tensor:
    return x * torch.tensor([1.0, 2.0, 3.0])


def _as_tensor(x: Tensor) -> Tensor:
    return x * torch.as_tensor([1.0, 2.0, 3.0])


def _from_numpy(x: Tensor) -> Tensor:
    return x * torch.from_numpy(np.ones(3, dtype=np.float32))


def _sized_list(x: Tensor) -> Tensor:
    return x * torch.tensor(x.shape[-1] * [1.0])


#: (body, FLOPs on x of 2 x 3): a multiply per value (5 in the jagged rows, else 6)
BUILT_FROM_DATA: list[tuple[str, Callable[[Tensor], Tensor], int]] = [
    ("nested_tensor-jagged", _jagged, 5),
    ("as_nested_tensor-jagged", _as_jagged, 5),
    ("tensor-of-a-list", _from_list, 6),
    ("as_tensor", _as_tensor, 6),
    ("from_numpy", _from_numpy, 6),
    ("tensor-of-a-list-sized-by-a-dim", _sized_list, 6),
]


@pytest.mark.parametrize(
    ("body", "flops"),
    [case[1:] for case in BUILT_FROM_DATA],
    ids=[case[0] for case in BUILT_FROM_DATA],
)
def test_a_tensor_built_from_data_is_estimated_as_a_real_run_counts_it(
    body: Callable[[Tensor], Tensor], flops: int
) -> None:
    cost = estimate(body, Float[Tensor, "n d"], n=2, d=3)
    with record() as rec:
        body(torch.randn(2, 3))
    assert (cost.flops, cost.uncounted) == (rec.total.flops, rec.total.uncounted) == (flops, ())


def _sparse_product(x: Tensor) -> Tensor:
    indices = torch.tensor([[0, 1], [1, 2]])
    sparse = torch.sparse_coo_tensor(indices, torch.tensor([1.0, 2.0]), (2, 3))
    return sparse @ x.T


@pytest.mark.filterwarnings("ignore:Sparse invariant checks")
def test_a_sparse_product_is_named_uncounted_in_a_dry_run_and_a_record() -> None:
    # the COO tensor is built on meta too; its product with a dense matrix has no rule
    # (its work is set by the stored values' count after coalescing): named, never 0
    cost = estimate(_sparse_product, Float[Tensor, "n d"], n=2, d=3)
    with record() as rec:
        _sparse_product(torch.randn(2, 3))
    assert cost.uncounted == rec.total.uncounted == ("mm",)


def _slow_conv3d(x: Tensor) -> Tensor:
    weight = torch.ones(4, 3, 3, 3, 3)
    out: Tensor = torch.ops.aten.slow_conv3d_forward(x, weight, [3, 3, 3], None, [1, 1, 1], [0] * 3)
    return out


def test_a_kernel_without_a_meta_kernel_is_estimated_under_fake_tensors() -> None:
    # slow_conv3d_forward has no meta kernel: the dry run goes on under FakeTensorMode and
    # counts it, 2·N with N = numel(out) x C_in x 27 = (2·4·3·3·3)·81 (was listed uncounted)
    cost = estimate(_slow_conv3d, Float[Tensor, "b c h w t"], b=2, c=3, h=5, w=5, t=5)
    with record() as rec:
        _slow_conv3d(torch.randn(2, 3, 5, 5, 5))
    assert cost.flops == rec.total.flops == 2 * (2 * 4 * 3 * 3 * 3) * 81 == 34992
    assert cost.uncounted == rec.total.uncounted == ()


def _csr_product(x: Tensor) -> Tensor:
    rows, columns = torch.tensor([0, 1, 2]), torch.tensor([0, 1])
    sparse = torch.sparse_csr_tensor(rows, columns, torch.tensor([1.0, 2.0]), (2, 3))
    return sparse @ x.T


@pytest.mark.filterwarnings("ignore:Sparse")
def test_a_sparse_csr_product_stops_a_dry_run_in_one_line_naming_the_op() -> None:
    # meta has no kernel for a CSR tensor's product (SparseCsrMeta), nor have fake tensors:
    # the dry run stopped with "give sizes the body can run at"
    with pytest.raises(DryRunError) as caught:
        estimate(_csr_product, Float[Tensor, "n d"], n=2, d=3)
    message = str(caught.value)
    assert "\n" not in message and "give sizes" not in message
    assert "a dry run cannot go past addmm at test_shape_only_kernels.py" in message
    assert "record a real run instead" in message
    # the way out: the product named uncounted, its construction free (it was uncounted)
    with record() as rec:
        _csr_product(torch.randn(2, 3))
    assert (rec.total.flops, rec.total.uncounted) == (0, ("mm",))
