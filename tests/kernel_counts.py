"""Helpers of the kernel-count tests: one body counted on a real CPU run by ``record()`` and
on ``meta`` by ``estimate()``, each with every input requiring grad (one thing, one count)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.utils.flop_counter import FlopCounterMode

import typedflops
from typedflops import record


@dataclass(frozen=True)
class Counts:
    """A run's forward and backward FLOPs and the ops it left uncounted."""

    forward: int
    backward: int
    uncounted: tuple[str, ...]


def recorded(body: Callable[..., Any], *inputs: Tensor) -> Counts:
    """``record()`` of ``body(*inputs)`` (its backward predicted for inputs that require
    grad)."""
    with record() as rec:
        body(*inputs)
    total = rec.total
    return Counts(total.flops, total.backward_flops, total.uncounted)


def on_cpu(
    body: Callable[..., Any],
    annotations: Sequence[Any],
    sizes: dict[str, int],
    dtype: torch.dtype = torch.float64,
) -> Counts:
    """``record()`` of ``body`` on random CPU tensors of the annotations' shapes at ``sizes``,
    each requiring grad."""
    tensors = []
    for annotation in annotations:
        shape = [sizes[dim] for dim in annotation.dim_str.split()]
        tensors.append(torch.randn(*shape, dtype=dtype, requires_grad=True))
    return recorded(body, *tensors)


def on_meta(
    body: Callable[..., Any],
    annotations: Sequence[Any],
    sizes: dict[str, int],
    dtype: torch.dtype = torch.float64,
) -> Counts:
    """``estimate()`` of ``body`` (a dry run on meta) with each of its inputs requiring grad."""
    names = body.__code__.co_varnames[: body.__code__.co_argcount]
    dims = {dim for annotation in annotations for dim in annotation.dim_str.split()}
    used = {dim: size for dim, size in sizes.items() if dim in dims}
    cost = typedflops.estimate(body, *annotations, dtype=dtype, grad=names, **used)
    return Counts(cost.flops, cost.backward_flops, cost.uncounted)


def flop_counter_total(body: Callable[[], Tensor]) -> int:
    """FlopCounterMode's count of ``body()`` and the backward of its sum."""
    with FlopCounterMode(display=False) as counter:
        body().sum().backward()
    return int(counter.get_total_flops())


def ran_and_predicted(function: Callable[[Tensor], Tensor]) -> tuple[int, int]:
    """The backward FLOPs that ran for ``function(x)`` (x 4x4, requiring grad), and a
    record's prediction without the backward."""
    x = torch.randn(4, 4)
    with record() as ran:
        function(x.clone().requires_grad_()).backward()
    with record() as predicted:
        function(x.clone().requires_grad_())
    return ran.total.backward_flops, predicted.total.backward_flops
