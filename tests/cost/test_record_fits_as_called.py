"""A row's formula is fitted as its call ran, not as things stand when the table is read.

Each body here doubles ``x`` once, or ``n`` times when something it reads says so: at
``n = 1`` both paths run one multiplication of ``n * d`` FLOPs, so a fit made after the
switch (``d*n**2``) gives the row's own count and would be taken, though the call that ran
costs ``d*n``. What the switch is: a global, an attribute of a Python module, a config
object's field, a closure's variable, a module's train/eval mode, a parameter replaced by
one of another shape, a forward hook on a module it calls, torch's default dtype, the
attention kernels allowed, autocast.

torch's settings are put back while the fit runs: the formula is the call's and exact.
What the body reads otherwise cannot be put back: the row keeps its counts, not exact.

Oracle: the call recorded again at ``n = 3`` (with the switch as the first call had it)
runs what the formula says, wherever it is exact; the count at the row's own sizes is the
hand count ``n * d = 4`` (one ``mul`` of a 1x4 tensor).
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
import sympy
import torch
from jaxtyping import Float
from torch import Tensor, nn

from typedflops import record, typed_flops

FLAG = False
settings = types.ModuleType("settings")
settings.loop = False  # type: ignore[attr-defined]


@dataclass
class Config:
    loop: bool = False


CONFIG = Config()


def _doubled(x: Tensor, loop: bool) -> Tensor:
    if loop:
        for _ in range(x.shape[0]):
            x = x * 2
        return x
    return x * 2


@typed_flops
def by_global(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    return _doubled(x, FLAG)


@typed_flops
def by_global_in_block(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    return _doubled(x, FLAG)


@typed_flops
def by_module_attribute(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    return _doubled(x, settings.loop)


@typed_flops
def by_config(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    return _doubled(x, CONFIG.loop)


def _closure() -> tuple[Callable[[Tensor], Tensor], Callable[[bool], None]]:
    state = {"loop": False}

    @typed_flops
    def by_closure(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
        return _doubled(x, state["loop"])

    def switch(on: bool) -> None:
        state["loop"] = on

    return by_closure, switch


by_closure, _switch_closure = _closure()


@typed_flops
def by_default_dtype(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    return _doubled(x, torch.get_default_dtype() == torch.float64)


@typed_flops
def by_attention_kernels(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    return _doubled(x, not torch.backends.cuda.math_sdp_enabled())  # type: ignore[no-untyped-call]


@typed_flops
def by_autocast(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    return _doubled(x, torch.is_autocast_enabled("cpu"))


class Doubles(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))

    @typed_flops
    def forward(self, x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
        return _doubled(x, not self.training or self.scale.shape[0] > 1)


LAYER = Doubles()


@typed_flops
def by_layer(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    return LAYER(x)


HOOKED = nn.Identity()


@typed_flops
def by_hooked_layer(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    return HOOKED(x) * 2  # type: ignore[no-any-return]


def _loop_hook(module: nn.Module, inputs: tuple[Tensor, ...], output: Tensor) -> Tensor:
    for _ in range(output.shape[0] - 1):  # (none at n = 1)
        output = output * 2
    return output


_hooks: list[torch.utils.hooks.RemovableHandle] = []


def _set_hook(on: bool) -> None:
    if on:
        _hooks.append(HOOKED.register_forward_hook(_loop_hook))
    else:
        while _hooks:
            _hooks.pop().remove()


def _set_global(on: bool) -> None:
    global FLAG
    FLAG = on


def _set_module_attribute(on: bool) -> None:
    settings.loop = on  # type: ignore[attr-defined]


def _set_config(on: bool) -> None:
    CONFIG.loop = on


def _set_dtype(on: bool) -> None:
    torch.set_default_dtype(torch.float64 if on else torch.float32)


def _set_math(on: bool) -> None:
    torch.backends.cuda.enable_math_sdp(not on)


def _set_autocast(on: bool) -> None:
    torch.set_autocast_enabled("cpu", on)


def _set_mode(on: bool) -> None:
    LAYER.train(not on)


def _set_scale(on: bool) -> None:
    LAYER.scale = nn.Parameter(torch.ones(2 if on else 1))


n, d = sympy.symbols("n d")

# (function, switch, whether torch's settings hold the switch: put back, exact)
CASES: dict[str, tuple[Callable[[Tensor], Tensor], Callable[[bool], None], bool]] = {
    "global": (by_global, _set_global, False),
    "module attribute": (by_module_attribute, _set_module_attribute, False),
    "config field": (by_config, _set_config, False),
    "closure": (by_closure, _switch_closure, False),
    "train/eval mode": (by_layer, _set_mode, False),
    "parameter replaced": (by_layer, _set_scale, False),
    "forward hook": (by_hooked_layer, _set_hook, False),
    "default dtype": (by_default_dtype, _set_dtype, True),
    "attention kernels": (by_attention_kernels, _set_math, True),
    "autocast": (by_autocast, _set_autocast, True),
}


@contextmanager
def _switched(switch: Callable[[bool], None]) -> Iterator[None]:
    switch(True)
    try:
        yield
    finally:
        switch(False)


@pytest.mark.parametrize("case", CASES)
def test_a_row_read_after_a_switch_is_the_cost_of_the_call_that_ran(case: str) -> None:
    function, switch, put_back = CASES[case]
    with record() as rec:
        function(torch.randn(1, 4))
    with _switched(switch):
        cost = rec.calls[0].cost()
    with record() as again:  # (the switch as the call had it)
        function(torch.randn(3, 4))
    assert cost.flops == 1 * 4  # (one mul of a 1x4 tensor)
    assert cost.exact is put_back
    if cost.exact:
        assert cost.formula.subs({n: 3, d: 4}) == again.total.flops == 3 * 4


@pytest.mark.parametrize("case", CASES)
def test_a_row_read_with_nothing_switched_is_fitted(case: str) -> None:
    function, _, _ = CASES[case]
    with record() as rec:
        function(torch.randn(1, 4))
    cost = rec.calls[0].cost()
    assert (cost.flops, cost.exact) == (4, True)
    assert sympy.expand(cost.formula - d * n) == 0


def test_a_row_switched_inside_the_block_is_read_as_its_call_ran() -> None:
    with record() as rec:
        by_global_in_block(torch.randn(1, 4))
        _set_global(True)
    try:
        cost = rec.calls[0].cost()
    finally:
        _set_global(False)
    assert (cost.flops, cost.exact) == (4, False)


def test_a_fit_sets_torchs_settings_back_where_some_cannot_be_set() -> None:
    """``torch.backends.disable_global_flags()`` (torch's own test helpers call it) makes
    setting cuDNN's flags raise: the settings a fit put back are set back all the same."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    before = _backends()
    torch.backends.disable_global_flags()  # type: ignore[no-untyped-call]
    try:
        with record() as rec, sdpa_kernel(SDPBackend.MATH):
            by_attention_kernels(torch.randn(1, 4))
        with torch.backends.cudnn.flags(enabled=not torch.backends.cudnn.enabled):
            cost = rec.calls[0].cost()  # (cuDNN on as the call had it: refused)
            assert _backends()[:-1] == before[:-1]
    finally:
        setattr(torch.backends, "__allow_nonbracketed_mutation_flag", True)
    assert _backends() == before
    assert (cost.flops, cost.exact) == (4, True)


def _backends() -> tuple[bool, ...]:
    cuda = torch.backends.cuda
    return (
        cuda.flash_sdp_enabled(),  # type: ignore[no-untyped-call]
        cuda.mem_efficient_sdp_enabled(),  # type: ignore[no-untyped-call]
        cuda.math_sdp_enabled(),  # type: ignore[no-untyped-call]
        torch.backends.cudnn.enabled,
    )
