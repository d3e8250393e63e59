"""A module's own sizes in formulas: a name stands in a formula marked exact only if the
module was rebuilt at another value of it and dry-run there. Sizes that coincide are told
apart by changing each alone; a size no rebuild can change stays a number, listed in
``Cost.fixed``. Checked here by rebuilding each model by hand at other values."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from typing import Any

import pytest
import sympy
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jaxtyping import Float, Int
from nanogpt import GPT, MLP, Block, GPTConfig
from torch import Tensor, nn

from typedflops import Cost, estimate, record, typed_flops
from typedflops.nn import TransformerConfig, TransformerLM

SLOW = settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def symbols(cost: Cost) -> set[str]:
    return {str(s) for term in cost.terms.values() for s in term.formula.free_symbols}


def assert_holds_where_rebuilt(
    cost: Cost,
    cost_at: Callable[[Mapping[str, int]], Cost],
    changes: Mapping[str, int],
    *,
    alone: bool = True,
) -> None:
    """Each term of ``cost`` is true at its own sizes and, where marked exact, gives the
    count of the model rebuilt by ``cost_at`` with ``changes`` (every symbol of it
    changed alone where ``alone``, then all at once)."""
    for name, term in cost.terms.items():
        assert term.holds_at(cost.dims), (name, term, cost.dims)
    names = symbols(cost)
    assert names <= set(changes), (names, changes)
    each = [{s: changes[s]} for s in sorted(names)] if alone else []
    for changed in [*each, {s: changes[s] for s in names}]:
        again = cost_at(changed)
        values = {**cost.dims, **changed}
        for name, term in cost.terms.items():
            if term.exact:
                assert term.at(values) == again.terms[name].count, (name, term, changed)


@dataclasses.dataclass
class Sizes:
    block_size: int = 256
    n_embd: int = 64
    vocab_size: int = 50


class KeptConfigMLP(nn.Module):
    """A nanoGPT-style MLP that keeps its config; the input's width is called ``d``."""

    def __init__(self, config: Sizes) -> None:
        super().__init__()
        self.config = config
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)

    @typed_flops
    def forward(self, x: Float[Tensor, "batch seq d"]) -> Float[Tensor, "batch seq d"]:
        out: Tensor = self.c_proj(nn.functional.gelu(self.c_fc(x)))
        return out


def test_a_hidden_width_equal_to_another_size_is_not_named_after_it() -> None:
    # At n_embd=64 the hidden width 4 * 64 is 256, block_size's value.
    cost = KeptConfigMLP.forward.estimate(KeptConfigMLP(Sizes()), batch=2, seq=8, d=64)
    batch, seq, d = sympy.symbols("batch seq d")
    assert cost.exact
    assert sympy.expand(cost.formula - (16 * batch * seq * d**2 + 4 * batch * seq * d)) == 0
    assert "block_size" not in symbols(cost)
    assert cost.fixed == {}


def _kept_config_cost(base: Mapping[str, int]) -> Callable[[Mapping[str, int]], Cost]:
    def cost_at(changes: Mapping[str, int]) -> Cost:
        sizes = {**base, **changes}
        model = KeptConfigMLP(Sizes(block_size=sizes["block_size"], n_embd=sizes["d"]))
        cost: Cost = KeptConfigMLP.forward.estimate(
            model, batch=sizes["batch"], seq=sizes["seq"], d=sizes["d"]
        )
        return cost

    return cost_at


@SLOW
@given(
    width=st.sampled_from([4, 8, 16]),
    batch=st.sampled_from([1, 2, 4, 16]),
    seq=st.sampled_from([1, 4, 16, 64]),
    block=st.sampled_from(["4*d", "d", "seq", "other"]),
)
def test_coinciding_sizes_are_told_apart(width: int, batch: int, seq: int, block: str) -> None:
    block_size = {"4*d": 4 * width, "d": width, "seq": seq, "other": 7}[block]
    base = {"batch": batch, "seq": seq, "d": width, "block_size": block_size}
    cost_at = _kept_config_cost(base)
    cost = cost_at({})
    assert cost.exact
    assert symbols(cost) <= {"batch", "seq", "d"}
    assert_holds_where_rebuilt(cost, cost_at, {"batch": 3, "seq": 5, "d": 12, "block_size": 9})


class Unkept(nn.Module):
    """Its constructor's argument is kept nowhere and named nothing the call names."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.proj = nn.Linear(width, 2 * width)

    @typed_flops
    def forward(self, x: Float[Tensor, "*batch d"]) -> Float[Tensor, "*batch e"]:
        out: Tensor = self.proj(x)
        return out


def test_a_size_no_rebuild_can_change_stays_a_number() -> None:
    cost = Unkept.forward.estimate(Unkept(6), batch=(2, 3), d=6)
    assert cost.exact
    assert str(cost.formula) == "144*batch"  # 2 * 6 * 12 per row, in the dims that changed
    assert cost.fixed == {"d": 6, "e": 12}
    assert "held fixed (numbers in the formulas): d=6, e=12" in str(cost)
    again = Unkept.forward.estimate(Unkept(6), batch=(5, 7), d=6)
    assert cost.forward.at({"batch": 35}) == again.flops


class Kept(nn.Module):
    """Plain arguments kept as attributes, and ``...`` in the annotation."""

    def __init__(self, d_model: int, d_ff: int, layers: int) -> None:
        super().__init__()
        self.d_ff, self.layers = d_ff, layers
        self.up = nn.ModuleList(nn.Linear(d_model, d_ff) for _ in range(layers))
        self.down = nn.ModuleList(nn.Linear(d_ff, d_model) for _ in range(layers))

    @typed_flops
    def forward(self, x: Float[Tensor, "... d_model"]) -> Float[Tensor, "... d_model"]:
        for up, down in zip(self.up, self.down, strict=True):
            x = x + down(torch.relu(up(x)))
        return x


@SLOW
@given(
    d_model=st.sampled_from([4, 8]),
    d_ff=st.sampled_from([4, 8, 32]),
    layers=st.sampled_from([1, 2, 4, 8]),
    ellipsis=st.sampled_from([1, 2, 4, 8]),
)
def test_kept_arguments_and_a_loop_over_blocks(
    d_model: int, d_ff: int, layers: int, ellipsis: int
) -> None:
    base = {"d_model": d_model, "d_ff": d_ff, "layers": layers, "ellipsis": ellipsis}

    def cost_at(changes: Mapping[str, int]) -> Cost:
        sizes = {**base, **changes}
        model = Kept(sizes["d_model"], sizes["d_ff"], sizes["layers"])
        cost: Cost = Kept.forward.estimate(
            model, d_model=sizes["d_model"], ellipsis=sizes["ellipsis"], grad=("x",)
        )
        return cost

    cost = cost_at({})
    assert cost.exact
    assert_holds_where_rebuilt(cost, cost_at, {"d_model": 5, "d_ff": 6, "layers": 3, "ellipsis": 7})


class ResidualStack(nn.Module):
    """Blocks applied with the residual add in the parent: work outside the blocks that
    repeats with them (``n_layer * F`` of the blocks' own ops does not give it)."""

    def __init__(self, vocab_size: int, dim: int, n_layer: int) -> None:
        super().__init__()
        self.vocab_size, self.dim, self.n_layer = vocab_size, dim, n_layer
        self.emb = nn.Embedding(vocab_size, dim)
        self.blocks = nn.ModuleList(nn.Linear(dim, dim) for _ in range(n_layer))
        self.head = nn.Linear(dim, vocab_size, bias=False)

    @typed_flops
    def forward(self, ids: Int[Tensor, "b s"]) -> Float[Tensor, "b s vocab"]:
        x = self.emb(ids)
        for block in self.blocks:
            x = x + block(x)
        out: Tensor = self.head(x)
        return out


@pytest.mark.parametrize(("n_layer", "batch"), [(2, 2), (3, 2), (4, 4), (1, 2)])
def test_a_count_of_blocks_with_work_around_them_is_named_and_holds(
    n_layer: int, batch: int
) -> None:
    base = {"vocab_size": 16, "dim": 8, "n_layer": n_layer, "b": batch, "s": 16}

    def cost_at(changes: Mapping[str, int]) -> Cost:
        sizes = {**base, **changes}
        if "vocab" in changes:
            sizes["vocab_size"] = changes["vocab"]
        model = ResidualStack(sizes["vocab_size"], sizes["dim"], sizes["n_layer"])
        cost: Cost = ResidualStack.forward.estimate(model, b=sizes["b"], s=sizes["s"])
        return cost

    cost = cost_at({})
    assert cost.exact and "n_layer" in symbols(cost) and cost.fixed == {}
    b, s, dim, vocab, layers = sympy.symbols("b s dim vocab n_layer")
    # the head; per block a linear (its bias not counted) and the residual add
    per_token = 2 * dim * vocab + layers * (2 * dim**2 + dim)
    assert sympy.expand(cost.formula - b * s * per_token) == 0
    changes = {"b": 3, "s": 5, "dim": 12, "vocab": 30, "n_layer": n_layer + 2}
    assert_holds_where_rebuilt(cost, cost_at, changes)


# nanoGPT, annotated by hand (tests/nanogpt.py): GPT keeps its config, Block keeps none.
NANO = GPTConfig(block_size=64, vocab_size=96, n_layer=2, n_head=4, n_embd=128)


def _gpt_cost(base: GPTConfig, **dims: int) -> Callable[[Mapping[str, int]], Cost]:
    def cost_at(changes: Mapping[str, int]) -> Cost:
        wanted = ("vocab_size", "n_layer", "n_embd")
        fields: dict[str, Any] = {k: v for k, v in changes.items() if k in wanted}
        sizes = {**dims, **{k: v for k, v in changes.items() if k in dims}}
        model = GPT(dataclasses.replace(base, **fields))
        cost: Cost = GPT.forward.estimate(model, **sizes, targets=True)
        return cost

    return cost_at


def test_nanogpt_formula_is_exact_in_its_config() -> None:
    cost_at = _gpt_cost(NANO, b=2, t=16)
    cost = cost_at({})
    assert cost.exact
    b, t, n_embd, n_layer, vocab = sympy.symbols("b t n_embd n_layer vocab_size")
    # Per layer 24*n_embd**2 per token in the four projections (nanoGPT's 12 * n_embd**2
    # parameters, 2 FLOPs each), 4*t*n_embd in attention's two products; the head.
    matmuls = (
        n_layer * (24 * b * t * n_embd**2 + 4 * b * t**2 * n_embd) + 2 * b * t * n_embd * vocab
    )
    assert sympy.expand(cost.matmul_formula - matmuls) == 0
    assert {"b", "t", "n_embd", "n_layer", "vocab_size"} <= symbols(cost)
    # Rebuilt at 64 and 256 (half and twice), the formula gives the count to the FLOP.
    for width in (64, 256):
        again = cost_at({"n_embd": width})
        assert cost.forward.at({**cost.dims, "n_embd": width}) == again.flops
        assert cost.backward.at({**cost.dims, "n_embd": width}) == again.backward_flops
    changes = {"b": 3, "t": 12, "n_embd": 96, "n_layer": 3, "vocab_size": 40, "n_head": 4}
    assert_holds_where_rebuilt(cost, cost_at, changes, alone=False)


def test_a_block_that_keeps_no_config_is_rebuilt_from_its_annotation() -> None:
    cost = Block.forward.estimate(Block(NANO), b=2, t=8, n_embd=128)
    # every row exact but causal attention's: a Block bounds no length, and a CPU's flash
    # kernel computes every pair up to 512 keys, fewer past them (the whole GPT above is
    # exact: its position table bounds t at 64)
    rows = [op for op in cost.ops if op.op != "scaled_dot_product_attention"]
    assert all(op.forward.exact and op.backward.exact for op in rows)
    assert len(rows) == len(cost.ops) - 1 and not cost.exact
    assert {"b", "t", "n_embd"} <= symbols(cost) <= {"b", "t", "n_embd", "n_head"}

    def cost_at(changes: Mapping[str, int]) -> Cost:
        sizes = {"b": 2, "t": 8, "n_embd": 128, "n_head": 4, **changes}
        config = dataclasses.replace(NANO, n_embd=sizes["n_embd"], n_head=sizes["n_head"])
        dims = {name: sizes[name] for name in ("b", "t", "n_embd")}
        again: Cost = Block.forward.estimate(Block(config), **dims)
        return again

    assert_holds_where_rebuilt(cost, cost_at, {"b": 3, "t": 5, "n_embd": 64, "n_head": 8})


@pytest.mark.parametrize(
    ("style", "d_model", "n_layers", "n_heads", "batch"),
    [("gpt2", 16, 2, 2, 2), ("llama", 32, 1, 4, 1)],
)
def test_typed_transformer_lm_at_several_configs(
    style: str, d_model: int, n_layers: int, n_heads: int, batch: int
) -> None:
    base = {
        "vocab": 40,
        "context": 32,
        "d_model": d_model,
        "n_layers": n_layers,
        "n_heads": n_heads,
        "d_head": d_model // n_heads,
        "d_ff": 3 * d_model,
        "batch": batch,
        "seq": 8,
    }

    def cost_at(changes: Mapping[str, int]) -> Cost:
        sizes = {**base, **changes}
        maker: Any = TransformerConfig.gpt2 if style == "gpt2" else TransformerConfig.llama
        own = {k: v for k, v in sizes.items() if k not in ("batch", "seq")}
        with torch.device("meta"):
            model = TransformerLM(maker(**own))
        return model.estimate(batch=sizes["batch"], seq=sizes["seq"])

    cost = cost_at({})
    # FLOPs are exact in every size; at batch 1 torch saves other tensors for backward
    # than at batch 2 and up, so the saved bytes hold at batch 1 only.
    assert cost.forward.exact and cost.backward.exact and cost.matmul.exact
    assert cost.activation.exact == (batch > 1)
    assert cost.fixed == {}  # every size of the model was changed by building it again
    other = {"vocab": 24, "context": 40, "d_model": 24, "n_layers": 4, "n_heads": 3}
    other.update({"d_head": 6, "d_ff": 20, "batch": 3, "seq": 6})
    assert_holds_where_rebuilt(cost, cost_at, other, alone=False)


def test_nanogpt_mlp_at_a_width_whose_hidden_size_is_block_size() -> None:
    # n_embd=64: the hidden width 4 * 64 = 256 = block_size; the MLP keeps no config.
    config = GPTConfig(block_size=256, vocab_size=96, n_layer=1, n_head=4, n_embd=64)
    cost = MLP.forward.estimate(MLP(config), b=2, t=8, n_embd=64)
    assert cost.exact and symbols(cost) <= {"b", "t", "n_embd"}
    b, t, n_embd = sympy.symbols("b t n_embd")
    assert sympy.expand(cost.matmul_formula - 16 * b * t * n_embd**2) == 0
    wider = GPTConfig(block_size=256, vocab_size=96, n_layer=1, n_head=4, n_embd=96)
    again = MLP.forward.estimate(MLP(wider), b=3, t=5, n_embd=96)
    for name, term in cost.terms.items():
        assert term.at({"b": 3, "t": 5, "n_embd": 96}) == again.terms[name].count, name


# -- sizes equal by a product with a size of 1 ------------------------------------------------


@dataclasses.dataclass
class HeadsConfig:
    n_head: int = 4
    head_dim: int = 8

    @property
    def n_embd(self) -> int:
        return self.n_head * self.head_dim


class HeadsAttention(nn.Module):
    """The input's width is ``n_head * head_dim``; softmax and the scale act on
    ``n_head`` attention maps. At ``head_dim=1`` the width equals ``n_head``."""

    def __init__(self, config: HeadsConfig) -> None:
        super().__init__()
        self.config = config
        self.n_head = config.n_head
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd, bias=False)

    @typed_flops
    def forward(self, x: Float[Tensor, "b t d"]) -> Float[Tensor, "b t d"]:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_head, d // self.n_head).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-1, -2) / math.sqrt(d // self.n_head)).softmax(-1)
        out: Tensor = (att @ v).transpose(1, 2).reshape(b, t, d)
        return out


class HeadsProjection(nn.Module):
    """The return value's width ``e`` is ``n_head * head_dim``; the mean is per head."""

    def __init__(self, d: int, n_head: int, head_dim: int) -> None:
        super().__init__()
        self.n_head, self.head_dim = n_head, head_dim
        self.proj = nn.Linear(d, n_head * head_dim, bias=False)

    @typed_flops
    def forward(self, x: Float[Tensor, "b d"]) -> Float[Tensor, "b e"]:
        y = self.proj(x).view(x.shape[0], self.n_head, self.head_dim)
        out: Tensor = (y - y.mean(-1, keepdim=True)).reshape(x.shape[0], -1)
        return out


def _heads_cost(sizes: Mapping[str, int]) -> tuple[Cost, dict[str, int]]:
    """The cost of ``HeadsAttention`` or ``HeadsProjection`` (``"d"`` in ``sizes``) built
    at ``sizes``, and every size of the call and the module there."""
    heads = {"n_head": sizes["n_head"], "head_dim": sizes["head_dim"]}
    if "d" in sizes:
        projection = HeadsProjection(sizes["d"], **heads)
        cost: Cost = HeadsProjection.forward.estimate(projection, b=sizes["b"], d=sizes["d"])
        return cost, {**sizes, "e": heads["n_head"] * heads["head_dim"]}
    attention = HeadsAttention(HeadsConfig(**heads))
    width = heads["n_head"] * heads["head_dim"]
    cost = HeadsAttention.forward.estimate(attention, b=sizes["b"], t=sizes["t"], d=width)
    return cost, {**sizes, "d": width}


@pytest.mark.parametrize(
    "base",
    [
        {"b": 2, "t": 4, "n_head": 4, "head_dim": 1},
        {"b": 2, "t": 4, "n_head": 1, "head_dim": 4},
        {"b": 2, "t": 4, "n_head": 2, "head_dim": 4},
        {"b": 2, "d": 8, "n_head": 4, "head_dim": 1},
        {"b": 2, "d": 8, "n_head": 1, "head_dim": 4},
        {"b": 2, "d": 8, "n_head": 2, "head_dim": 2},
    ],
    ids=str,
)
def test_a_dim_equal_to_a_module_size_by_a_product_with_one_is_not_named_after_it(
    base: dict[str, int],
) -> None:
    # A width of n_head * head_dim equals n_head where head_dim is 1: a formula that names
    # it for n_head (the attention maps' count) is wrong once head_dim changes. Each rebuild
    # that holds the sizes the cost lists as fixed is checked.
    cost, _ = _heads_cost(base)
    for name, term in cost.terms.items():
        assert term.holds_at(cost.dims), (name, term)
    checked = 0
    changed: tuple[dict[str, int], ...] = (
        {"n_head": 3},
        {"head_dim": 3},
        {"n_head": 2, "head_dim": 5, "b": 3},
        {"b": 3},
    )
    for changes in changed:
        again, sizes = _heads_cost({**base, **changes})
        if any(sizes[name] != size for name, size in cost.fixed.items()):
            continue
        checked += 1
        for name, term in cost.terms.items():
            if term.exact:
                assert term.at(sizes) == again.terms[name].count, (name, term, changes)
    # the sizes a formula keeps as numbers are those of the width the weights fix: with the
    # config's two sizes it is made of, which no run changes alone (the maps' count is n_head)
    if "d" in base:
        assert checked == 4
    else:
        assert checked == 1
        assert cost.fixed == {
            "d": base["n_head"] * base["head_dim"],
            "n_head": base["n_head"],
            "head_dim": base["head_dim"],
        }


class DefaultedMlp(nn.Module):
    """Widths left at None take another's value, as timm's ``Mlp`` writes it; nothing is
    kept but the layers."""

    def __init__(
        self, in_features: int, hidden_features: int | None = None, out_features: int | None = None
    ) -> None:
        super().__init__()
        out_features = out_features or in_features
        hidden_features = hidden_features or in_features
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_features, out_features)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.fc2(self.act(self.fc1(x)))
        return out


@pytest.mark.parametrize(
    ("hidden", "out"), [(8, 8), (8, 4), (8, None), (None, None), (None, 4), (32, 8)], ids=str
)
def test_a_width_given_equal_to_a_defaulted_one_is_not_changed_with_it(
    hidden: int | None, out: int | None
) -> None:
    # DefaultedMlp(8, hidden_features=8) builds what DefaultedMlp(8) builds: read as the
    # latter, the hidden width would be named after the input's and changed with it.
    def cost_at(changes: Mapping[str, int]) -> tuple[Cost, dict[str, int]]:
        given = {"hidden_features": hidden, "out_features": out}
        given.update({k: v for k, v in changes.items() if k in given})
        width = changes.get("in_features", 8)
        mlp = DefaultedMlp(width, **given)
        cost = estimate(mlp, Float[Tensor, "b n d"], b=changes.get("b", 2), n=3, d=width)
        sizes = {"b": changes.get("b", 2), "n": 3, "d": width, "in_features": width}
        sizes["hidden_features"] = given["hidden_features"] or width
        sizes["out_features"] = given["out_features"] or width
        sizes["fc1.out_features"] = sizes["hidden_features"]  # (the layer's, where held)
        return cost, sizes

    cost, _ = cost_at({})
    assert cost.exact
    if hidden == 8:
        assert "hidden_features" in symbols(cost)
    for changes in ({"in_features": 12}, {"hidden_features": 12}, {"out_features": 5, "b": 3}):
        again, sizes = cost_at(changes)
        if any(sizes[name] != size for name, size in cost.fixed.items()):
            continue
        if not {"hidden_features", "out_features"} & set(changes) <= symbols(cost):
            continue  # a size the formula holds as a number
        for name, term in cost.terms.items():
            assert term.at(sizes) == again.terms[name].count, (name, term, changes)


class ScaledByTable(nn.Module):
    """A module whose ``seq`` builds no weight: ``forward`` makes a table of that length
    (``seq`` multiplies, ``seq`` adds and a divide for its mean) and scales by it."""

    def __init__(self, seq: int) -> None:
        super().__init__()
        self.seq = seq

    def forward(self, x: Tensor) -> Tensor:
        table = torch.arange(self.seq, dtype=torch.float32) * 2.0
        out: Tensor = x * table.mean()
        return out


@pytest.mark.parametrize(("table", "seq"), [(16, 16), (16, 4), (5, 5)], ids=str)
def test_a_module_size_named_as_a_dim_is_held_where_the_dim_changes_alone(
    table: int, seq: int
) -> None:
    # The input's seq and the module's seq share a name and, in two cases, a value; the
    # input's changes alone, so the module's is a number: 2*table + 1, not 2*seq + 1.
    spec = Float[Tensor, "batch seq d"]
    cost = estimate(ScaledByTable(table), spec, batch=2, seq=seq, d=3)
    b, s, d = sympy.symbols("batch seq d")
    assert cost.exact
    assert sympy.expand(cost.formula - (b * s * d + 2 * table + 1)) == 0
    for other in (1, 2, 7, table):
        again = estimate(ScaledByTable(table), spec, batch=2, seq=other, d=3)
        assert again.flops == 2 * other * 3 + 2 * table + 1
        assert cost.terms["forward"].at({"batch": 2, "seq": other, "d": 3}) == again.flops


class PositionTable(nn.Module):
    """A fixed-length encoder: a learned position table added whole, so that the input's
    ``seq`` is the table's ``seq_len`` and its ``d`` the ``d_model``."""

    def __init__(self, seq_len: int, d_model: int) -> None:
        super().__init__()
        self.seq_len, self.d_model = seq_len, d_model
        self.pos = nn.Parameter(torch.zeros(1, seq_len, d_model))
        self.fc = nn.Linear(d_model, d_model)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.fc(x + self.pos).softmax(-1)
        return out


@given(st.sampled_from([(8, 8), (4, 8), (8, 4), (6, 6)]), st.integers(2, 3))
@SLOW
def test_two_pairs_of_stuck_sizes_at_one_value_are_two_ties(
    base: tuple[int, int], batch: int
) -> None:
    # seq = seq_len and d = d_model are fixed by the table and the weights; where all four
    # are equal, tying all of them makes one symbol of seq and d (2*b*seq**2*(seq + 3)).
    seq_len, d_model = base
    spec = Float[Tensor, "batch seq d"]

    def cost_at(seq: int, d: int) -> Cost:
        return estimate(PositionTable(seq, d), spec, batch=batch, seq=seq, d=d)

    cost = cost_at(seq_len, d_model)
    b, s, d = sympy.symbols("batch seq d")
    # the add, the product (2*d a value; addmm's bias not counted) and the softmax (5)
    assert cost.exact
    assert sympy.expand(cost.formula - 2 * b * s * d * (d + 3)) == 0
    for seq, width in ((3, d_model), (seq_len, 5), (7, 2)):
        again = cost_at(seq, width)
        assert again.flops == 2 * batch * seq * width * (width + 3)
        for name, term in cost.terms.items():
            values = {"batch": batch, "seq": seq, "d": width}
            assert term.at(values) == again.terms[name].count, (name, term, seq, width)


_NORM = functools.partial(nn.LayerNorm, eps=1e-6)


class _Factories(nn.Module):
    """Layer factories as torchvision and timm take them, kept by nothing but the layers."""

    def __init__(
        self,
        dim: int,
        norm_layer: Callable[..., nn.Module] = _NORM,
        act: Callable[..., nn.Module] = nn.GELU,
    ) -> None:
        super().__init__()
        self.norm = norm_layer(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.act = act()

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.act(self.fc(self.norm(x)))
        return out


@pytest.mark.parametrize(
    "given",
    [
        {},
        {"norm_layer": functools.partial(nn.LayerNorm, eps=1e-3)},
        {"norm_layer": functools.partial(nn.LayerNorm, elementwise_affine=False)},
        # (kept only as whether the layer has a bias)
        {"norm_layer": functools.partial(nn.LayerNorm, bias=False)},
        {"act": functools.partial(nn.GELU, approximate="tanh")},
        {"act": nn.ReLU},
    ],
    ids=["defaults", "eps", "no-affine", "no-bias", "tanh", "relu"],
)
def test_a_module_built_with_layer_factories_is_rebuilt_at_other_widths(
    given: dict[str, Any],
) -> None:
    # a factory given (a partial, another class) is kept by nothing but the layer it built:
    # it was taken at its default, the twin differed, and the width stayed a number; the
    # layers tell what built them, and the formula names the width, exact where it holds
    cost = estimate(_Factories(16, **given), Float[Tensor, "n dim"], n=4, dim=16)
    assert {str(s) for s in cost.formula.free_symbols} == {"dim", "n"}
    assert cost.exact and "dim" not in cost.fixed
    symbols = {str(s): s for s in cost.formula.free_symbols}
    with record() as ran:
        _Factories(32, **given)(torch.randn(3, 32))
    assert cost.formula.subs({symbols["n"]: 3, symbols["dim"]: 32}) == ran.total.flops
