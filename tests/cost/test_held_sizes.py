"""Sizes a module holds that no rebuild changes are numbers in the formulas and are listed
in ``Cost.fixed``: a module passed to the constructor, a list of widths, a global the
constructor reads, a width set from ``**kwargs``. Each formula is checked against a real
run at its own sizes and against the module rebuilt by hand at another value of each of
its symbols; a size that a rebuild does change (``d_model // n_heads``) is not listed."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from typing import Any

import sympy
import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from typedflops import Cost, estimate, record, typed_flops
from typedflops.nn import Embedding


def _each_term_predicts(cost: Cost, sizes: Mapping[str, Any], again: Cost) -> None:
    """Each term of ``cost`` at ``sizes`` (its own dims otherwise) is ``again``'s count:
    the estimate at those sizes, its module rebuilt."""
    for name, term in cost.terms.items():
        assert term.at({**cost.dims, **sizes}) == again.terms[name].count, (name, sizes)


def _recorded_forward(module: nn.Module, x: Tensor) -> int:
    """The forward FLOPs of a real run of ``module`` on ``x``, as ``record()`` counts them."""
    with record() as rec:
        module(x)
    flops: int = rec.calls[0].cost().flops
    return flops


class Enc(nn.Module):
    """An encoder that keeps its sizes."""

    def __init__(self, d: int, d_model: int) -> None:
        super().__init__()
        self.d, self.d_model = d, d_model
        self.lin = nn.Linear(d, d_model)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.lin(x)
        return out


class Head(nn.Module):
    """A head over an encoder built beforehand and passed in."""

    def __init__(self, enc: Enc, n_out: int) -> None:
        super().__init__()
        self.enc, self.n_out = enc, n_out
        self.out = nn.Linear(enc.d_model, n_out)

    @typed_flops
    def forward(self, x: Float[Tensor, "b d"]) -> Float[Tensor, "b n"]:
        out: Tensor = self.out(self.enc(x))
        return out


def test_a_module_passed_to_the_constructor_holds_its_sizes() -> None:
    cost = Head.forward.estimate(Head(Enc(8, 32), 5), b=3)
    b, n = sympy.symbols("b n")
    # per row: 2*8*32 for the encoder, 2*32*n for the head (a linear's bias is not counted)
    assert cost.exact and sympy.expand(cost.formula - (512 * b + 64 * b * n)) == 0
    assert cost.fixed == {"d": 8, "d_model": 32}  # was {"d": 8}: d_model=32 held, unlisted
    assert cost.flops == _recorded_forward(Head(Enc(8, 32), 5), torch.randn(3, 8)) == 2496
    # n is rebuilt: the formula gives the count of Head(Enc(8, 32), 7) at b=4
    again = Head.forward.estimate(Head(Enc(8, 32), 7), b=4)
    assert cost.forward.at({**cost.dims, "b": 4, "n": 7}) == again.flops == 4 * (512 + 448)
    _each_term_predicts(cost, {"b": 4, "n": 7}, again)
    # d_model is held: at another encoder the count differs from the formula's
    other = Head.forward.estimate(Head(Enc(8, 24), 5), b=3)
    assert other.flops == 3 * (2 * 8 * 24 + 2 * 24 * 5) != cost.flops


class Widths(nn.Module):
    """Layers of the widths of a list."""

    def __init__(self, widths: list[int]) -> None:
        super().__init__()
        self.widths = widths
        pairs = itertools.pairwise(widths)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in pairs)

    @typed_flops
    def forward(self, x: Float[Tensor, "b d"]) -> Float[Tensor, "b e"]:
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


def test_a_list_of_widths_is_held_element_by_element() -> None:
    cost = Widths.forward.estimate(Widths([16, 32, 16]), b=2, d=16)
    # per row: 2*16*32 + 2*32*16 for the products, 32 + 16 for the two relus
    assert cost.exact and str(cost.formula) == "2096*b"
    # (and the count of layers, which no attribute names)
    assert cost.fixed == {
        "d": 16,
        "e": 16,
        "widths[0]": 16,
        "widths[1]": 32,
        "widths[2]": 16,
        "len(layers)": 2,
    }
    assert cost.flops == _recorded_forward(Widths([16, 32, 16]), torch.randn(2, 16)) == 4192
    assert (
        cost.forward.at({**cost.dims, "b": 5})
        == Widths.forward.estimate(Widths([16, 32, 16]), b=5, d=16).flops
    )
    assert Widths.forward.estimate(Widths([16, 24, 16]), b=2, d=16).flops == 2 * 1576  # widths[1]


HIDDEN = 48


class ReadsAGlobal(nn.Module):
    """A hidden width from a module-level constant."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.d = d
        self.fc1, self.fc2 = nn.Linear(d, HIDDEN), nn.Linear(HIDDEN, d)

    @typed_flops
    def forward(self, x: Float[Tensor, "b d"]) -> Float[Tensor, "b d"]:
        out: Tensor = self.fc2(torch.relu(self.fc1(x)))
        return out


def test_a_global_the_constructor_reads_is_held() -> None:
    # batch 48 is HIDDEN's value: the formula names b only where b is the batch
    cost = ReadsAGlobal.forward.estimate(ReadsAGlobal(8), b=48)
    b, d = sympy.symbols("b d")
    # per row: 2*d*48 twice, 48 for the relu
    assert cost.exact and sympy.expand(cost.formula - (192 * b * d + 48 * b)) == 0
    assert cost.fixed == {"HIDDEN": 48}  # was {}
    assert cost.flops == _recorded_forward(ReadsAGlobal(8), torch.randn(48, 8)) == 76032
    again = ReadsAGlobal.forward.estimate(ReadsAGlobal(12), b=5)
    _each_term_predicts(cost, {"b": 5, "d": 12}, again)


class KeywordWidth(nn.Module):
    """A hidden width set from ``**kwargs``: the constructor's rebuild leaves it at 64."""

    def __init__(self, d: int, **kwargs: Any) -> None:
        super().__init__()
        self.d = d
        self.hidden = int(kwargs.get("hidden", 64))
        self.fc1, self.fc2 = nn.Linear(d, self.hidden), nn.Linear(self.hidden, d)

    @typed_flops
    def forward(self, x: Float[Tensor, "b d"]) -> Float[Tensor, "b d"]:
        out: Tensor = self.fc2(torch.relu(self.fc1(x)))
        return out


def test_a_width_from_keyword_arguments_is_held() -> None:
    cost = KeywordWidth.forward.estimate(KeywordWidth(8), b=2)
    b, d = sympy.symbols("b d")
    assert cost.exact and sympy.expand(cost.formula - (256 * b * d + 64 * b)) == 0
    assert cost.fixed == {"hidden": 64}  # was {}
    assert cost.flops == _recorded_forward(KeywordWidth(8), torch.randn(2, 8)) == 4224
    again = KeywordWidth.forward.estimate(KeywordWidth(12), b=3)  # d rebuilt
    _each_term_predicts(cost, {"b": 3, "d": 12}, again)
    # at another hidden width the count is not the formula's: 64 is held
    assert KeywordWidth.forward.estimate(KeywordWidth(8, hidden=20), b=2).flops == 1320


class Heads(nn.Module):
    """A width derived from two rebuilt sizes (``d_model // n_heads``), kept as an int."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.d_model, self.n_heads = d_model, n_heads
        self.d_head = d_model // n_heads
        self.qkv, self.o = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)

    @typed_flops
    def forward(self, x: Float[Tensor, "b s d_model"]) -> Float[Tensor, "b s d_model"]:
        bsz, seq, _ = x.shape
        qkv = self.qkv(x).view(bsz, seq, 3, self.n_heads, self.d_head).permute(2, 0, 3, 1, 4)
        y = nn.functional.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])
        out: Tensor = self.o(y.transpose(1, 2).reshape(bsz, seq, self.d_model))
        return out


def _heads(d_model: int, n_heads: int, b: int, s: int) -> Cost:
    cost: Cost = Heads.forward.estimate(Heads(d_model, n_heads), b=b, s=s)
    return cost


def test_a_width_derived_from_rebuilt_sizes_is_not_held() -> None:
    cost = _heads(32, 4, 2, 4)
    assert cost.exact and cost.fixed == {}  # d_head follows d_model and n_heads
    assert cost.flops == _recorded_forward(Heads(32, 4), torch.randn(2, 4, 32)) == 69632
    for changed in ({"d_model": 48}, {"n_heads": 2}, {"b": 3, "s": 6}):
        sizes = {"d_model": 32, "n_heads": 4, "b": 2, "s": 4, **changed}
        again = _heads(**sizes)
        _each_term_predicts(cost, changed, again)


class Table(nn.Module):
    """A table of ``seq`` rows worked on whole, beside an input of ``seq`` rows or fewer."""

    def __init__(self, seq: int, d: int) -> None:
        super().__init__()
        self.seq, self.d = seq, d
        self.register_buffer("freqs", torch.zeros(seq, d))
        self.proj = nn.Linear(d, d)

    @typed_flops
    def forward(self, x: Float[Tensor, "b seq d"]) -> Float[Tensor, "b seq d"]:
        table = torch.cos(self.get_buffer("freqs") * 2.0)
        out: Tensor = self.proj(x) * table[: x.shape[1]]
        return out


def test_a_size_named_as_a_dim_that_changes_alone_is_held_under_its_key() -> None:
    cost = Table.forward.estimate(Table(16, 8), b=2, seq=8)
    b, seq, d = sympy.symbols("b seq d")
    # per row 2*d*d for the product and d for the multiply; 16*d for the table's multiply
    # and 16*d for its cosine: the module's 16 rows, not the input's seq
    assert cost.exact
    assert sympy.expand(cost.formula - (2 * b * seq * d**2 + b * seq * d + 32 * d)) == 0
    assert cost.fixed == {"self.seq": 16}  # was {}
    assert cost.flops == _recorded_forward(Table(16, 8), torch.randn(2, 8, 8)) == 2432
    for module, sizes in ((Table(16, 12), {"d": 12}), (Table(16, 8), {"b": 3, "seq": 5})):
        again = Table.forward.estimate(module, **{"b": 2, "seq": 8, **sizes})
        _each_term_predicts(cost, sizes, again)
    assert Table.forward.estimate(Table(32, 8), b=2, seq=8).flops == 2432 + 16 * 8 * 2


class OverATypedTable(nn.Module):
    """A module its constructor cannot rebuild (a dict of sizes), over a typed table."""

    def __init__(self, spec: dict[str, int]) -> None:
        super().__init__()
        self.emb = Embedding(spec["vocab"], spec["d_model"])
        self.hidden = spec["hidden"]
        self.proj = nn.Linear(spec["d_model"], spec["hidden"])

    @typed_flops
    def forward(self, ids: Int[Tensor, "b s"]) -> Float[Tensor, "b s h"]:
        out: Tensor = self.proj(self.emb(ids))
        return out


def test_a_typed_submodules_size_that_no_run_changes_is_held() -> None:
    def model(d_model: int = 8, hidden: int = 24) -> OverATypedTable:
        return OverATypedTable({"vocab": 10, "d_model": d_model, "hidden": hidden})

    cost = OverATypedTable.forward.estimate(model(), b=2, s=3)
    # per token 2*8*24 (a lookup costs nothing); the table's width is fixed by the product's
    assert cost.exact and str(cost.formula) == "384*b*s"
    assert cost.fixed == {"h": 24, "d_model": 8, "hidden": 24}  # was {"h": 24}
    assert cost.flops == _recorded_forward(model(), torch.randint(0, 10, (2, 3))) == 2304
    again = OverATypedTable.forward.estimate(model(), b=3, s=5)
    _each_term_predicts(cost, {"b": 3, "s": 5}, again)
    assert OverATypedTable.forward.estimate(model(d_model=12), b=2, s=3).flops == 3456


class Stack(nn.Module):
    """Encoders built beforehand, passed in as a list, and a head of ``n_out`` outputs."""

    def __init__(self, encs: list[Enc], n_out: int) -> None:
        super().__init__()
        self.encs, self.n_out = nn.ModuleList(encs), n_out
        self.out = nn.Linear(encs[-1].d_model, n_out)

    @typed_flops
    def forward(self, x: Float[Tensor, "b d"]) -> Float[Tensor, "b n"]:
        for enc in self.encs:
            x = enc(x)
        out: Tensor = self.out(x)
        return out


def test_modules_passed_in_a_list_hold_their_sizes_under_their_paths() -> None:
    cost = Stack.forward.estimate(Stack([Enc(8, 32), Enc(32, 16)], 5), b=2)
    b, n = sympy.symbols("b n")
    # per row 2*8*32 + 2*32*16 for the encoders, 2*16*n for the head
    assert cost.exact and sympy.expand(cost.formula - (1536 * b + 32 * b * n)) == 0
    # the second encoder's d and d_model are names the call's d and the first encoder have
    assert cost.fixed == {"d": 8, "d_model": 32, "encs.1.d": 32, "encs.1.d_model": 16}
    real = _recorded_forward(Stack([Enc(8, 32), Enc(32, 16)], 5), torch.randn(2, 8))
    assert cost.flops == real == 3392
    again = Stack.forward.estimate(Stack([Enc(8, 32), Enc(32, 16)], 7), b=3)  # n rebuilt
    _each_term_predicts(cost, {"b": 3, "n": 7}, again)


def test_a_torch_layers_width_kept_nowhere_else_is_held() -> None:
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 8))
    cost = estimate(model, Float[Tensor, "b d"], b=2, d=8)
    # per row 2*8*32 twice and 32 for the relu; the hidden width is the first layer's
    assert cost.exact and str(cost.formula) == "1056*b"
    assert cost.fixed == {"d": 8, "0.out_features": 32}  # was {"d": 8}
    x = torch.randn(2, 8)
    with record() as rec:
        model(x)
    assert cost.flops == rec.total.flops == 2112
    again = estimate(model, Float[Tensor, "b d"], b=5, d=8)
    _each_term_predicts(cost, {"b": 5}, again)
    wider = nn.Sequential(nn.Linear(8, 24), nn.ReLU(), nn.Linear(24, 8))
    assert estimate(wider, Float[Tensor, "b d"], b=2, d=8).flops == 2 * (2 * 2 * 8 * 24 + 24)


class UnkeptBlocks(nn.Module):
    """Blocks counted by an attribute of another name than the constructor's argument."""

    def __init__(self, d: int, n: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(d, d) for _ in range(n))
        self.n_blocks = n

    @typed_flops
    def forward(self, x: Float[Tensor, "b d"]) -> Float[Tensor, "b d"]:
        for block in self.blocks:
            x = torch.relu(block(x))
        return x


def test_a_count_of_blocks_no_rebuild_changes_is_held() -> None:
    cost = UnkeptBlocks.forward.estimate(UnkeptBlocks(5, 3), b=3, d=5)
    # per row, each of 3 blocks: 2*5*5 for the product and 5 for the relu
    assert cost.exact and str(cost.formula) == "165*b"
    assert cost.fixed == {"d": 5, "n_blocks": 3}  # was {"d": 5}
    assert cost.flops == _recorded_forward(UnkeptBlocks(5, 3), torch.randn(3, 5)) == 495
    again = UnkeptBlocks.forward.estimate(UnkeptBlocks(5, 3), b=4, d=5)
    _each_term_predicts(cost, {"b": 4}, again)
    assert UnkeptBlocks.forward.estimate(UnkeptBlocks(5, 2), b=3, d=5).flops == 330


class WholeTable(nn.Module):
    """A table built at a length given to the constructor and kept only as its shape,
    scaled whole on every call."""

    def __init__(self, d: int, max_seq: int = 512) -> None:
        super().__init__()
        self.d = d
        self.register_buffer("table", torch.ones(max_seq, d))
        self.proj = nn.Linear(d, d)

    def forward(self, x: Tensor) -> Tensor:
        table = self.get_buffer("table")
        out: Tensor = self.proj(x) + (table * 2.0)[: x.shape[1]]
        return out


def test_a_buffers_length_kept_nowhere_else_is_held() -> None:
    # max_seq=1024 is read back nowhere (the default builds another table): no rebuild
    model = WholeTable(8, 1024)
    cost = estimate(model, Float[Tensor, "b s d"], b=2, s=4, d=8)
    # per token 2*8*8 and 8 for the add, and 1024*8 for the table
    assert cost.exact and str(cost.formula) == "8*(17*b*s + 1024)"
    assert cost.fixed == {"d": 8, "table.shape[0]": 1024}  # was {"d": 8}
    with record() as rec:
        model(torch.randn(2, 4, 8))
    assert cost.flops == rec.total.flops == 9280
    _each_term_predicts(cost, {"b": 3}, estimate(model, Float[Tensor, "b s d"], b=3, s=4, d=8))
    # at its default the table's length is rebuilt, and named
    assert "max_seq" in str(estimate(WholeTable(8), Float[Tensor, "b s d"], b=2, s=4, d=8).formula)


def test_a_convolutions_kernel_size_is_held() -> None:
    model = nn.Sequential(nn.Conv1d(4, 4, 3, padding=1), nn.ReLU())
    cost = estimate(model, Float[Tensor, "b c t"], b=2, c=4, t=16)
    # per output position 2*4*4*3 for the convolution and 4 for the relu: 100*b*t
    assert cost.exact and str(cost.formula) == "100*b*t"
    # was {"c": 4}: the kernel of 3 is a number in the formula, so it is listed
    assert cost.fixed == {"c": 4, "0.kernel_size[0]": 3}
    with record() as rec:
        model(torch.randn(2, 4, 16))
    assert cost.flops == rec.total.flops == 3200
    _each_term_predicts(cost, {"t": 9}, estimate(model, Float[Tensor, "b c t"], b=2, c=4, t=9))
    # the formula holds at that kernel only: at 5 (padding 2, same length) it is 2*4*4*5 + 4
    wider = nn.Sequential(nn.Conv1d(4, 4, 5, padding=2), nn.ReLU())
    assert estimate(wider, Float[Tensor, "b c t"], b=2, c=4, t=16).flops == 164 * 2 * 16
    # a strided 2-d convolution: each tuple's ints above 1 by index, each value listed once
    strided = nn.Sequential(nn.Conv2d(4, 8, (3, 5), stride=2))
    held = estimate(strided, Float[Tensor, "b c h w"], b=1, c=4, h=16, w=16).fixed
    assert held == {
        "c": 4,
        "0.out_channels": 8,
        "0.kernel_size[0]": 3,
        "0.kernel_size[1]": 5,
        "0.stride[0]": 2,
    }


class Steps(nn.Module):
    """One layer applied a number of times kept under another name than the constructor's
    argument: the module cannot be rebuilt, and the count sizes no axis. It reads two
    other ints that change no count: an index and a limit it checks."""

    def __init__(self, d_model: int, n_layers: int) -> None:
        super().__init__()
        self.lin = nn.Linear(d_model, d_model)
        self.depth = n_layers
        self.layer_idx = 5
        self.max_rows = 4096

    @typed_flops
    def forward(self, x: Float[Tensor, "b d_model"]) -> Float[Tensor, "b d_model"]:
        assert x.shape[0] <= self.max_rows and self.layer_idx >= 0
        for _ in range(self.depth):
            x = torch.tanh(self.lin(x))
        return x


def test_a_count_the_forward_reads_is_held() -> None:
    cost = Steps.forward.estimate(Steps(8, 3), b=2, d_model=8)
    # per row, each of 3 steps: 2*8*8 for the product, 8 for the bias, 8 for the tanh
    assert cost.exact and str(cost.formula) == "408*b"
    # was {"d_model": 8}: 3 unlisted (the index and the limit change no count: not listed)
    assert cost.fixed == {"d_model": 8, "depth": 3}
    assert cost.flops == _recorded_forward(Steps(8, 3), torch.randn(2, 8)) == 816
    _each_term_predicts(cost, {"b": 5}, Steps.forward.estimate(Steps(8, 3), b=5, d_model=8))
    # the formula holds at 3 steps only
    assert Steps.forward.estimate(Steps(8, 5), b=2, d_model=8).flops == 5 * 2 * 136


class KeywordSteps(nn.Module):
    """A count of steps set from ``**kwargs``: the module is rebuilt at other widths, and the
    count passes through unchanged."""

    def __init__(self, d: int, **options: int) -> None:
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.depth = options.get("depth", 3)

    @typed_flops
    def forward(self, x: Float[Tensor, "b d"]) -> Float[Tensor, "b d"]:
        for _ in range(self.depth):
            x = torch.tanh(self.lin(x))
        return x


def test_a_count_from_keyword_arguments_is_held() -> None:
    cost = KeywordSteps.forward.estimate(KeywordSteps(8, depth=3), b=2, d=8)
    # per row, each of 3 steps: 2*d*d for the product, d for the bias, d for the tanh
    assert cost.exact and str(cost.formula) == "3*b*d*(2*d + 1)"
    assert cost.fixed == {"depth": 3}  # was {}: the 3 was unlisted
    assert cost.flops == _recorded_forward(KeywordSteps(8, depth=3), torch.randn(2, 8)) == 816
    again = KeywordSteps.forward.estimate(KeywordSteps(5, depth=3), b=4, d=5)
    _each_term_predicts(cost, {"b": 4, "d": 5}, again)
    assert KeywordSteps.forward.estimate(KeywordSteps(8, depth=2), b=2, d=8).flops == 544


def test_an_axis_index_or_a_count_of_tensors_of_a_torch_layer_is_no_size() -> None:
    # was {"0.in_features": 8, "1.dim": 2}: Softmax's dim is the axis it normalizes over
    soft = nn.Sequential(nn.Linear(8, 8), nn.Softmax(dim=2))
    cost = estimate(soft, Float[Tensor, "b s 8"], b=2, s=4)
    assert cost.fixed == {"0.in_features": 8}
    # per row: the product 2*8*8 = 128 (addmm, as FlopCounterMode counts it), the softmax
    # 5*8 = 40: 168
    assert cost.exact and str(cost.formula) == "168*b*s"
    # was {"0.in_features": 8, "0.parametrizations.weight.ntensors": 2}: weight_norm's g and v
    normed = nn.Sequential(nn.utils.parametrizations.weight_norm(nn.Linear(8, 8)), nn.Flatten(1))
    assert estimate(normed, Float[Tensor, "b 8"], b=2).fixed == {"0.in_features": 8}


class Windows(nn.Module):
    """Windows of ``size`` along the last axis, each squared; no weights, and a constructor
    argument kept under another name (no rebuild reads it back); an axis kept too."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.k = size
        self.axis = 2

    @typed_flops
    def forward(self, x: Float[Tensor, "b n"]) -> Tensor:
        y = x.unfold(-1, self.k, 1)
        return (y * y).softmax(dim=self.axis)


def test_a_size_the_body_passes_to_an_op_is_held() -> None:
    cost = Windows.forward.estimate(Windows(3), b=2, n=10)
    # n - k + 1 windows of k: a multiply and the softmax's 5 per value, at k = 3
    assert (
        cost.exact
        and sympy.expand(cost.formula - 18 * sympy.Symbol("b") * (sympy.Symbol("n") - 2)) == 0
    )
    assert cost.fixed == {"k": 3}  # was {}: the 3 was unlisted; the axis is no size
    for b, n in [(1, 4), (3, 17)]:
        assert cost.forward.at({"b": b, "n": n}) == _recorded_forward(Windows(3), torch.randn(b, n))
    # at another window the count is another: the formula holds at k = 3 only
    assert _recorded_forward(Windows(4), torch.randn(2, 10)) != cost.flops


@dataclasses.dataclass
class StackConfig:
    d: int
    hidden: int
    n_layers: int


class Residual(nn.Module):
    def __init__(self, config: StackConfig) -> None:
        super().__init__()
        self.up = nn.Linear(config.d, config.hidden)
        self.down = nn.Linear(config.hidden, config.d)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = x + self.down(torch.relu(self.up(x)))
        return out


class UnkeptStack(nn.Module):
    """Blocks counted by a config the module does not keep: it cannot be rebuilt."""

    def __init__(self, config: StackConfig) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Residual(config) for _ in range(config.n_layers))

    def forward(self, x: Tensor) -> Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def test_a_count_of_blocks_no_attribute_names_is_listed_as_held() -> None:
    cost = estimate(UnkeptStack(StackConfig(8, 32, 2)), Float[Tensor, "b s 8"], b=4, s=3)
    # per position and block: 2*8*32 for each of the two products (a linear's bias is not
    # counted), 32 relus, 8 adds; two blocks
    b, s = sympy.symbols("b s")
    assert cost.formula == 2 * (2 * (2 * 8 * 32) + 32 + 8) * b * s
    assert cost.exact
    # the module keeps neither the config nor its fields: its widths and its count of
    # blocks are numbers of the formula, listed where they are held
    assert cost.fixed == {
        "blocks.0.up.in_features": 8,
        "blocks.0.up.out_features": 32,
        "len(blocks)": 2,
    }
    three = estimate(UnkeptStack(StackConfig(8, 32, 3)), Float[Tensor, "b s 8"], b=4, s=3)
    assert three.fixed["len(blocks)"] == 3 and three.flops == 3 * cost.flops // 2
