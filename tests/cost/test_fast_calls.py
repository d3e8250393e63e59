"""The Python bindings record()'s counting mode runs common ops with (see
typedflops.cost.engine.fast_calls) run exactly the op torch dispatched, with its result."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode

from typedflops.cost.engine.fast_calls import FAST_CALLS


class _Seen(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Keeps each op dispatched, with its positional arguments and keywords."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.calls: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        self.calls.append((func, args, dict(kwargs or {})))
        return func(*args, **(kwargs or {}))


def _user_code(device: str) -> None:
    """Calls written as people write them, reaching every op of FAST_CALLS."""
    x = torch.randn(4, 6, device=device, requires_grad=True)
    y = torch.randn(4, 6, device=device)
    w = torch.randn(5, 6, device=device, requires_grad=True)
    b = torch.randn(5, device=device, requires_grad=True)
    h = F.linear(x, w, b)  # addmm
    h = h @ torch.randn(5, 6, device=device)  # mm
    h = F.gelu(h) + F.silu(y) - torch.relu(y) * torch.tanh(h) / (torch.sigmoid(y) + 2)
    h = torch.where(y > 0, h, -h) + torch.exp(y) + torch.rsqrt(y.abs() + 1) + h**2 + 2 * h
    s = torch.softmax(h, dim=-1) + torch.log_softmax(h, dim=1)
    s = s.sum(1) + s.mean(1, keepdim=True).squeeze(1) + s.sum(dim=1, keepdim=True).squeeze(1)
    n = F.layer_norm(h, (6,)) + torch.cat([h, y], 1)[:, :6]
    t = n.t().transpose(0, 1).permute(1, 0).t().unsqueeze(0).squeeze(0).view(4, 6).expand(2, 4, 6)
    e = F.embedding(torch.tensor([[0, 2], [1, 3]], device=device), torch.randn(4, 6))
    c = F.conv2d(torch.randn(1, 2, 5, 5, device=device), torch.randn(3, 2, 3, 3, device=device))
    q = torch.randn(1, 2, 3, 4, device=device)
    with sdpa_kernel(SDPBackend.MATH):
        a = F.scaled_dot_product_attention(q, q, q)  # (_safe_softmax)
    a = a.sum() + torch.bmm(q[0], q[0].transpose(1, 2)).sum()
    total = t.clone()[0].sum() + s.sum() + e.sum() + c.sum() + a.sum() + n.detach().sum()
    if total.requires_grad:
        total.backward()  # (softmax's backward, among others)


def _seen(device: str) -> list[tuple[Any, tuple[Any, ...], dict[str, Any]]]:
    seen = _Seen()
    with seen:
        _user_code(device)
    return seen.calls


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_each_binding_runs_the_op_torch_dispatched(device: str) -> None:
    calls = [
        (func, args)
        for func, args, kwargs in _seen(device)
        if func in FAST_CALLS and not kwargs and len(args) == FAST_CALLS[func][1]
    ]
    reached = {func for func, _ in calls}
    if device == "cpu":
        assert reached == set(FAST_CALLS), sorted(map(str, set(FAST_CALLS) - reached))
    assert len(reached) >= 30
    for func, args in calls:
        binding: Callable[..., Any] = FAST_CALLS[func][0]
        with torch.no_grad(), _Seen() as again:
            out = binding(*args)
        assert [call[0] for call in again.calls] == [func], func
        with torch.no_grad():
            expected = func(*args)
        for got, want in zip(
            out if isinstance(out, tuple) else (out,),
            expected if isinstance(expected, tuple) else (expected,),
            strict=True,
        ):
            assert got.shape == want.shape and got.dtype == want.dtype, func
            if device == "cpu" and not (got.isnan().any() or want.isnan().any()):
                assert torch.equal(got, want), func
