"""Helpers of the layer sweep: one layer or op, built small, counted four ways on the same
inputs — FlopCounterMode, ``record()`` of its forward (backward predicted), ``record()``
of its forward and a real backward, and ``estimate()`` on meta — with each input given as
a spec string, ``"f:b 4 h w"`` (kind, then dims: a number is a size, a name is looked up).

Kinds: ``f`` float64 (requires grad), ``p`` float64 in (0.05, 0.95) (no grad: targets,
probabilities), ``b`` bool, ``i<N>`` int64 below N (indices, class labels).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

import typedflops
from typedflops import record
from typedflops.cost.engine.recorder import torch_counts
from typedflops.cost.engine.rules import FLOP_COUNTER_CORRECTIONS

#: The sizes every spec's named dims take.
SIZES: dict[str, int] = {"b": 2, "s": 5, "t": 7, "h": 6, "w": 6, "l": 8, "d": 8, "n": 4, "k": 5}
#: The sizes a second estimate is checked at (the formula, not the first size's count).
OTHER_SIZES: dict[str, int] = {"b": 3, "s": 4, "t": 6, "h": 8, "w": 7, "l": 9, "d": 8, "n": 5}
OTHER_SIZES["k"] = 3


@dataclass(frozen=True)
class Case:
    """A layer or op to sweep: ``make()`` builds it (a module or a function of its inputs)."""

    name: str
    make: Callable[[], Callable[..., Any]]
    specs: tuple[str, ...]


@dataclass(frozen=True)
class Swept:
    """What the four counters gave for one case."""

    recorded: tuple[int, int, int]  # forward, predicted backward, matmul (record)
    ran_backward: int  # record() with backward run inside it
    uncounted: tuple[str, ...]
    torch_forward: int  # FlopCounterMode, forward
    torch_backward: int | None  # FlopCounterMode, the gradient of the output's sum
    ours_torch: tuple[int, int]  # typedflops on FlopCounterMode's kernels (backward as run)
    estimated: tuple[int, int, int]  # forward, backward, matmul (estimate)


def _kind(spec: str) -> tuple[str, list[str]]:
    kind, dims = spec.split(":")
    return kind, dims.split()


def _shape(dims: Sequence[str], sizes: Mapping[str, int]) -> list[int]:
    return [int(d) if d.isdigit() else sizes[d] for d in dims]


def tensor(spec: str, sizes: Mapping[str, int] = SIZES) -> Tensor:
    """A random CPU tensor of the spec (a float one requiring grad)."""
    kind, dims = _kind(spec)
    shape = _shape(dims, sizes)
    if kind == "f":
        return torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    if kind == "p":
        return torch.rand(*shape, dtype=torch.float64).clamp(0.05, 0.95)
    if kind == "b":
        return torch.rand(*shape) > 0.5
    return torch.randint(0, int(kind[1:]), shape)


def annotation(spec: str) -> Any:
    """The jaxtyping annotation ``estimate()`` builds the spec's tensor from."""
    kind, dims = _kind(spec)
    text = " ".join(dims)
    if kind in ("f", "p"):
        return Float[Tensor, text]
    if kind == "b":
        return Bool[Tensor, text]
    return Int[Tensor, text]


def _names(body: Callable[..., Any], count: int) -> list[str]:
    target = body.forward if isinstance(body, nn.Module) else body
    return list(inspect.signature(target).parameters)[:count]


def _first(out: Any) -> Tensor:
    while isinstance(out, tuple | list):
        out = out[0]
    assert isinstance(out, Tensor)
    return out


def _leaves(body: Callable[..., Any], inputs: Sequence[Tensor]) -> list[Tensor]:
    leaves = [t for t in inputs if t.requires_grad]
    if isinstance(body, nn.Module):
        leaves += [p for p in body.parameters() if p.requires_grad]
    return leaves


def estimate_of(case: Case, body: Callable[..., Any], sizes: Mapping[str, int]) -> Any:
    """``estimate()`` of the case at ``sizes`` (its float inputs requiring grad)."""
    names = _names(body, len(case.specs))
    grad = [n for n, s in zip(names, case.specs, strict=True) if _kind(s)[0] == "f"]
    used = {d: sizes[d] for s in case.specs for d in _kind(s)[1] if not d.isdigit()}
    annotations = [annotation(s) for s in case.specs]
    return typedflops.estimate(body, *annotations, dtype=torch.float64, grad=grad, **used)


def sweep(case: Case) -> Swept:
    """Count one case four ways on the same seeded inputs."""
    torch.manual_seed(0)
    body = case.make()
    inputs = [tensor(s) for s in case.specs]
    corrected = FLOP_COUNTER_CORRECTIONS  # (where FlopCounterMode departs from what runs)
    with (
        FlopCounterMode(display=False, custom_mapping=corrected) as forward_counter,
        record() as rec,
    ):
        out = _first(body(*inputs))
    total = rec.total
    torch_backward = None
    if out.requires_grad:
        with FlopCounterMode(display=False, custom_mapping=corrected) as backward_counter:
            torch.autograd.grad(out.sum(), _leaves(body, inputs), allow_unused=True)
        torch_backward = int(backward_counter.get_total_flops())
    with record() as ran:
        again = _first(body(*inputs))
        if again.requires_grad:
            again.sum().backward()
    cost = estimate_of(case, body, SIZES)
    return Swept(
        recorded=(total.flops, total.backward_flops, total.matmul_flops),
        ran_backward=ran.total.backward_flops,
        uncounted=total.uncounted + ran.total.uncounted,
        torch_forward=int(forward_counter.get_total_flops()),
        torch_backward=torch_backward,
        ours_torch=torch_counts(ran.session.root),
        estimated=(cost.flops, cost.backward_flops, cost.matmul_flops),
    )


def recorded_at(case: Case, sizes: Mapping[str, int]) -> tuple[int, int]:
    """``record()``'s forward and predicted backward FLOPs of the case at ``sizes``."""
    torch.manual_seed(0)
    body = case.make()
    inputs = [tensor(s, sizes) for s in case.specs]
    with record() as rec:
        body(*inputs)
    return rec.total.flops, rec.total.backward_flops
