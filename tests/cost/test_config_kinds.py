"""A module built from a config is rebuilt at other values of the config's ints, whatever
kind of config it is: an object, a dict of names, a named tuple (each changed in a copy)."""

from __future__ import annotations

import collections
import dataclasses
import functools
import types
from typing import Any

import pytest
import sympy
import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn

from typedflops import estimate, record
from typedflops.cost.engine.module_sizes import module_names


def _field(config: Any, name: str) -> int:
    value = config[name] if isinstance(config, dict) else getattr(config, name)
    assert type(value) is int
    return value


class ConfigMlp(nn.Module):
    def __init__(self, config: Any) -> None:
        super().__init__()
        self.config = config
        self.up = nn.Linear(_field(config, "d"), _field(config, "hidden"))
        self.down = nn.Linear(_field(config, "hidden"), _field(config, "d"))

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.down(F.gelu(self.up(x)))
        return out


Sizes = collections.namedtuple("Sizes", "d hidden")


@pytest.mark.parametrize(
    "config",
    [
        {"d": 64, "hidden": 256},
        Sizes(64, 256),
        types.SimpleNamespace(d=64, hidden=256),
    ],
    ids=["dict", "namedtuple", "namespace"],
)
def test_a_config_of_any_kind_is_rebuilt_at_other_sizes(config: Any) -> None:
    with torch.device("meta"):
        model = ConfigMlp(config)
    cost = estimate(model, Float[Tensor, "b s d"], b=2, s=8, d=64)
    b, s, d, hidden = sympy.symbols("b s d hidden")
    # up and down 2*d*hidden each per position, gelu 1 per hidden value (its rule)
    assert cost.exact and sympy.expand(cost.formula - b * s * hidden * (4 * d + 1)) == 0
    assert cost.fixed == {}
    # the config itself is not changed by the rebuilds
    assert _field(config, "d") == 64 and _field(config, "hidden") == 256


def test_an_int_of_a_dict_inside_a_dict_config_is_held() -> None:
    with torch.device("meta"):
        model = ConfigMlp({"d": 64, "hidden": 256, "mlp": {"groups": 4}})
    cost = estimate(model, Float[Tensor, "b s d"], b=2, s=8, d=64)
    assert cost.fixed == {"mlp.groups": 4}


class VocabularyLm(nn.Module):
    def __init__(self, vocab: dict[str, int], d: int) -> None:
        super().__init__()
        self.vocab, self.d = vocab, d
        self.embed = nn.Embedding(len(vocab), d)
        self.out = nn.Linear(d, len(vocab))

    def forward(self, ids: Tensor) -> Tensor:
        out: Tensor = self.out(self.embed(ids))
        return out


def test_a_table_of_ints_is_no_config() -> None:
    # A vocabulary maps names to ints too: its ids are no sizes to change (one dry run each)
    # nor sizes held; the model is rebuilt at other values of d alone.
    with torch.device("meta"):
        model = VocabularyLm({f"w{i}": i for i in range(300)}, 16)
    cost = estimate(model, Int[Tensor, "b s"], b=2, s=8)
    b, s, d = sympy.symbols("b s d")
    assert cost.exact and sympy.expand(cost.formula - 600 * b * s * d) == 0
    assert cost.fixed == {}


@dataclasses.dataclass
class HeadsFromWidth:
    d: int = 64
    n_head: int = 4
    head_dim: int = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.head_dim = self.d // self.n_head


class PerHead(nn.Module):
    def __init__(self, config: HeadsFromWidth) -> None:
        super().__init__()
        self.config = config
        self.q = nn.Linear(config.d, config.d)
        self.mix = nn.Linear(config.head_dim, config.head_dim)

    def forward(self, x: Tensor) -> Tensor:
        heads = self.q(x).view(*x.shape[:-1], self.config.n_head, self.config.head_dim)
        out: Tensor = self.mix(heads)
        return out


def test_a_field_a_config_sets_after_init_names_a_size_and_is_never_passed() -> None:
    # head_dim is set in __post_init__: a name for the (16, 16) weight's axes, and no
    # argument of the config's constructor when it is rebuilt at other d and n_head.
    with torch.device("meta"):
        model = PerHead(HeadsFromWidth())
    assert module_names(model) == {"d": 64, "head_dim": 16}
    cost = estimate(model, Float[Tensor, "b d"], b=2, d=64)
    b, d, n_head = sympy.symbols("b d n_head")
    assert cost.exact and sympy.simplify(cost.formula - 2 * b * d**2 * (n_head + 1) / n_head) == 0


class PartialActMlp(nn.Module):
    """``x: (b, s, d) -> (b, s, d)``; its activation a ``functools.partial`` made anew by
    each construction, as transformers' Gemma makes its ``act_fn``."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.config = config
        self.up = nn.Linear(config.d, config.hidden)
        self.act = functools.partial(F.gelu, approximate="tanh")
        self.down = nn.Linear(config.hidden, config.d)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.down(self.act(self.up(x)))
        return out


def test_a_module_holding_a_partial_is_rebuilt_at_other_sizes() -> None:
    with torch.device("meta"):
        model = PartialActMlp(types.SimpleNamespace(d=16, hidden=48))
    cost = estimate(model, Float[Tensor, "b s d"], b=2, s=8, d=16)
    assert cost.fixed == {}
    assert {str(s) for s in cost.formula.free_symbols} == {"b", "s", "d", "hidden"}
    assert cost.exact
    # the formula against real runs at other sizes: a width of 1, widths that coincide
    for b, s, d, hidden in [(1, 1, 1, 1), (3, 5, 8, 8), (2, 3, 4, 1), (1, 7, 24, 40)]:
        real = PartialActMlp(types.SimpleNamespace(d=d, hidden=hidden))
        with record() as rec:
            real(torch.randn(b, s, d)).sum().backward()
        sizes = {"b": b, "s": s, "d": d, "hidden": hidden}
        ran = rec.total
        # the record also holds the final sum: b*s*d adds (accumulators start at zero)
        assert cost.forward.at(sizes) == ran.flops - b * s * d
        assert cost.matmul.at(sizes) == ran.matmul_flops == 4 * b * s * d * hidden
        assert cost.backward.at(sizes) == ran.backward_flops  # the sum's backward: an expand, 0
