"""Unusual calls get the documented error or none: nested tensors, positional-only names in
``**kwargs``, deep recursion, and unions whose every option fails."""

from __future__ import annotations

import contextlib
import re
import sys
import threading
import warnings

import pytest
import torch
from jaxtyping import Float, Int
from torch import Tensor

from typedflops import ContractError, ShapeError, typed_flops

ones = torch.ones


@typed_flops
def rows(x: Float[Tensor, "b n d"]) -> Float[Tensor, "b n d"]:
    return x


def _nested(layout: torch.layout) -> Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the strided layout is a prototype
        return torch.nested.nested_tensor([ones(2, 3), ones(4, 3)], layout=layout)


def test_a_strided_nested_tensor_is_a_shape_error() -> None:
    with pytest.raises(ShapeError) as caught:
        rows(_nested(torch.strided))
    assert str(caught.value).splitlines()[0] == (
        "rows(): argument 'x' is a nested tensor of layout torch.strided, which has no shape "
        'to check against its annotation "b n d" (nested tensors of layout torch.jagged have one)'
    )
    assert caught.value.__suppress_context__  # torch's own error is not shown


def test_a_jagged_nested_tensor_binds_its_ragged_dim() -> None:
    jagged = _nested(torch.jagged)
    assert rows(jagged) is jagged


def test_a_positional_only_name_in_kwargs_belongs_to_kwargs() -> None:
    @typed_flops
    def f(
        a: Float[Tensor, " n"], x: Float[Tensor, " n"] | None = None, /, **rest: Float[Tensor, " m"]
    ) -> None:
        pass

    f(ones(3), x=ones(5))  # `x` here is a key of **rest, not the parameter x
    f(ones(3), ones(3), x=ones(5), y=ones(5))
    with pytest.raises(ShapeError, match=re.escape("argument 'y' has shape (4,)")):
        f(ones(3), x=ones(5), y=ones(4))
    with pytest.raises(ShapeError, match=re.escape("argument 'x' has shape (4,)")):
        f(ones(3), ones(4))


def _depth(fn: object) -> int:
    reached = [0]

    def probe(depth: int) -> None:
        reached[0] = depth
        fn(probe, depth + 1)  # type: ignore[operator]

    with contextlib.suppress(RecursionError):
        probe(0)
    return reached[0]


_VECTOR = ones(1)


def _plain_step(again: object, depth: int, x: Tensor = _VECTOR) -> None:
    again(depth)  # type: ignore[operator]


@typed_flops
def _checked_step(again: object, depth: int, x: Float[Tensor, " n"] = _VECTOR) -> None:
    again(depth)  # type: ignore[operator]


def _max_depth(results: dict[str, int]) -> None:
    results["plain"] = _depth(_plain_step)
    results["checked"] = _depth(_checked_step)


def test_recursion_through_checked_calls_goes_as_deep_as_plain_calls() -> None:
    limit = sys.getrecursionlimit()
    results: dict[str, int] = {}
    _max_depth(results)
    # each level is two frames here (probe and the step): a checked step adds its own
    assert results["checked"] >= 0.9 * results["plain"]
    assert sys.getrecursionlimit() == limit  # put back as it was
    # and in a thread of its own
    thread_results: dict[str, int] = {}
    thread = threading.Thread(target=_max_depth, args=(thread_results,))
    thread.start()
    thread.join()
    assert thread_results["checked"] >= 0.9 * thread_results["plain"]
    assert sys.getrecursionlimit() == limit


def test_recursion_keeps_checking_every_level() -> None:
    @typed_flops
    def countdown(x: Float[Tensor, " n"], level: int) -> Float[Tensor, " n"]:
        if level == 0:
            return ones(x.shape[0] + 1)  # breaks the contract, deep down
        return countdown(x, level - 1)

    limit = sys.getrecursionlimit()
    with pytest.raises(ShapeError, match=re.escape("countdown(): the return value has shape (3,)")):
        countdown(ones(2), 200)
    assert sys.getrecursionlimit() == limit


def test_a_union_failure_says_why_each_option_failed() -> None:
    @typed_flops
    def f(
        x: Float[Tensor, " n"] | list[Float[Tensor, " n"]] | Int[Tensor, "n m"] | None,
        y: Float[Tensor, " n"],
    ) -> None:
        pass

    with pytest.raises(ContractError) as caught:
        f([ones(2), ones(3)], ones(2))
    assert str(caught.value).splitlines() == [
        "f(): argument 'x' is a list which matches none of "
        'Float[Tensor, "n"] | list[Float[Tensor, "n"]] | Int[Tensor, "n m"] | None:',
        '  Float[Tensor, "n"]: is a list but its annotation Float[Tensor, "n"] needs a '
        "torch.Tensor",
        '  list[Float[Tensor, "n"]]: argument \'x[1]\' has shape (3,) but its annotation "n" '
        "needs n=2",
        '  Int[Tensor, "n m"]: is a list but its annotation Int[Tensor, "n m"] needs a '
        "torch.Tensor",
        "  None: is not None",
    ]
    with pytest.raises(ContractError, match=re.escape('"n m"]: has dtype float32')):
        f(ones(2, 3), ones(2))
