"""Shared fixtures: the SPEC's ``linear`` function and a clean torch.compile cache."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from jaxtyping import Float
from torch import Tensor

from typedflops import TypedFunction, typed_flops


# The first op under FakeTensorMode (dry runs) imports torch._dynamo and friends. Do it
# here, once: pytester's in-process runs drop modules imported inside them, and torch's
# operator libraries cannot be registered twice.
def pytest_configure(config: pytest.Config) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        torch.empty(2, 2) @ torch.empty(2, 2)


@typed_flops
def linear(
    x: Float[Tensor, "batch d_in"], w: Float[Tensor, "d_in d_out"]
) -> Float[Tensor, "batch d_out"]:
    return x @ w


@pytest.fixture(name="linear")
def linear_fixture() -> TypedFunction[[Tensor, Tensor], Tensor]:
    """``linear(x: "batch d_in", w: "d_in d_out") -> "batch d_out"``, the SPEC's example."""
    return linear


@pytest.fixture
def fresh_dynamo() -> Iterator[None]:
    """Reset torch.compile's caches before and after a test, so graphs never leak between tests."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
