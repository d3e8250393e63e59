"""Every ``torch.nn`` layer built small, and the matrix-product family of torch functions,
counted four ways on the same inputs (``layer_sweep.sweep``): on FlopCounterMode's kernels
typedflops matches FlopCounterMode forward and backward (where FlopCounterMode departs from
what runs, the hand rule of ``docs/costs.md`` instead); a record's predicted backward is what
a real backward inside ``record()`` runs; ``estimate()`` on meta gives the record's forward,
backward and matrix-product FLOPs; and an exact estimate's formula gives the record's counts
at other sizes. A core subset runs by default; the whole sweep is ``slow``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from layer_sweep import OTHER_SIZES, SIZES, Case, estimate_of, recorded_at, sweep
from torch import Tensor, nn

D = torch.float64


def _m(make: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    return lambda: make().to(D)


def _eval(make: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    return lambda: make().to(D).eval()


class _First(nn.Module):
    """A layer whose output is a tuple (a recurrent layer's), its first tensor."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.layer(x)[0]
        return out


class _Attention(nn.Module):
    def __init__(self, options: dict[str, Any], **call: Any) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(**options)
        self.call = call

    def forward(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        out: Tensor = self.attn(q, k, v, **self.call)[0]
        return out


class _Decoder(nn.Module):
    def __init__(self, **options: Any) -> None:
        super().__init__()
        self.layer = nn.TransformerDecoderLayer(8, 2, 16, 0.0, batch_first=True, **options)

    def forward(self, x: Tensor, memory: Tensor) -> Tensor:
        out: Tensor = self.layer(x, memory)
        return out


class _Unpool(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.MaxPool2d(2, return_indices=True)
        self.unpool = nn.MaxUnpool2d(2)

    def forward(self, x: Tensor) -> Tensor:
        y, where = self.pool(x)
        out: Tensor = self.unpool(y, where)
        return out


class _WeightedBag(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bag = nn.EmbeddingBag(10, 8, mode="sum")

    def forward(self, ids: Tensor, weights: Tensor) -> Tensor:
        out: Tensor = self.bag(ids, per_sample_weights=weights)
        return out


def _block_diag_sum(a: Tensor, b: Tensor) -> Tensor:
    joined: Tensor = torch.block_diag(a, b)  # type: ignore[no-untyped-call]
    return joined.sum()


def _conv_tbc(x: Tensor, w: Tensor, bias: Tensor) -> Tensor:
    return torch.conv_tbc(x, w, bias, 1)


_MASK = torch.triu(torch.ones(5, 7, dtype=torch.bool), 1).logical_not()
IMAGE, SEQUENCE = "f:b 4 h w", "f:b 4 l"

CASES = [
    Case("Linear", _m(lambda: nn.Linear(8, 6)), ("f:b s 8",)),
    Case("Bilinear", _m(lambda: nn.Bilinear(8, 5, 4)), ("f:b 8", "f:b 5")),
    Case("Conv1d", _m(lambda: nn.Conv1d(4, 6, 3, padding="same", dilation=2)), (SEQUENCE,)),
    Case("Conv2d", _m(lambda: nn.Conv2d(4, 6, 3, padding=1)), (IMAGE,)),
    Case("Conv2d-reflect", _m(lambda: nn.Conv2d(4, 6, 3, 1, 1, padding_mode="reflect")), (IMAGE,)),
    Case("Conv3d", _m(lambda: nn.Conv3d(2, 4, 2)), ("f:b 2 n h w",)),
    Case("ConvTranspose1d", _m(lambda: nn.ConvTranspose1d(4, 6, 3)), (SEQUENCE,)),
    Case("ConvTranspose2d", _m(lambda: nn.ConvTranspose2d(4, 6, 3, 2, 1, 1)), (IMAGE,)),
    Case("ConvTranspose3d", _m(lambda: nn.ConvTranspose3d(2, 4, 2, stride=2)), ("f:b 2 n h w",)),
    Case("conv_tbc", lambda: _conv_tbc, ("f:t b 4", "f:3 4 6", "f:6")),
    Case("Embedding", _m(lambda: nn.Embedding(10, 8, padding_idx=0)), ("i10:b s",)),
    Case("EmbeddingBag-mean", _m(lambda: nn.EmbeddingBag(10, 8, mode="mean")), ("i10:b s",)),
    Case("EmbeddingBag-max", _m(lambda: nn.EmbeddingBag(10, 8, mode="max")), ("i10:b s",)),
    Case("EmbeddingBag-weights", _m(_WeightedBag), ("i10:b s", "f:b s")),
    Case("RNN", _m(lambda: _First(nn.RNN(8, 6, 2, nonlinearity="relu"))), ("f:s b 8",)),
    Case(
        "LSTM-proj", _m(lambda: _First(nn.LSTM(8, 6, proj_size=3, batch_first=True))), ("f:b s 8",)
    ),
    Case("GRU-bi", _m(lambda: _First(nn.GRU(8, 6, bidirectional=True))), ("f:s b 8",)),
    Case("LSTMCell", _m(lambda: _First(nn.LSTMCell(8, 6))), ("f:b 8",)),
    Case(
        "MultiheadAttention-kv",
        _m(lambda: _Attention({"embed_dim": 8, "num_heads": 2, "kdim": 5, "vdim": 3})),
        ("f:s b 8", "f:t b 5", "f:t b 3"),
    ),
    Case(
        "MultiheadAttention-mask",
        _m(
            lambda: _Attention(
                {"embed_dim": 8, "num_heads": 2, "batch_first": True}, attn_mask=_MASK
            )
        ),
        ("f:b 5 8", "f:b 7 8", "f:b 7 8"),
    ),
    Case(
        "MultiheadAttention-fused",
        _m(lambda: _Attention({"embed_dim": 8, "num_heads": 2}, need_weights=False)),
        ("f:s b 8", "f:t b 8", "f:t b 8"),
    ),
    Case(
        "TransformerEncoderLayer-norm-first",
        _m(lambda: nn.TransformerEncoderLayer(8, 2, 16, 0.0, "gelu", norm_first=True)),
        ("f:s b 8",),
    ),
    Case("TransformerDecoderLayer", _m(_Decoder), ("f:b s 8", "f:b t 8")),
    Case("GroupNorm", _m(lambda: nn.GroupNorm(2, 4)), (IMAGE,)),
    Case("LayerNorm", _m(lambda: nn.LayerNorm([5, 8], bias=False)), ("f:b 5 8",)),
    Case("RMSNorm", _m(lambda: nn.RMSNorm(8)), ("f:b s 8",)),
    Case(
        "InstanceNorm2d", _m(lambda: nn.InstanceNorm2d(4, True, track_running_stats=True)), (IMAGE,)
    ),
    Case("LocalResponseNorm", _m(lambda: nn.LocalResponseNorm(3)), (IMAGE,)),
    Case("BatchNorm2d", _m(lambda: nn.BatchNorm2d(4)), (IMAGE,)),
    Case("BatchNorm2d-eval", _eval(lambda: nn.BatchNorm2d(4)), (IMAGE,)),
    Case("AdaptiveAvgPool2d", _m(lambda: nn.AdaptiveAvgPool2d((4, 5))), (IMAGE,)),
    Case("AdaptiveMaxPool3d", _m(lambda: nn.AdaptiveMaxPool3d(2)), ("f:b 4 n h w",)),
    Case("FractionalMaxPool2d", _m(lambda: nn.FractionalMaxPool2d(2, output_size=3)), (IMAGE,)),
    Case("LPPool2d", _m(lambda: nn.LPPool2d(3, 2)), (IMAGE,)),
    Case("MaxUnpool2d", _m(_Unpool), (IMAGE,)),
    Case("Upsample-bicubic", _m(lambda: nn.Upsample(scale_factor=2, mode="bicubic")), (IMAGE,)),
    Case(
        "Upsample-trilinear",
        _m(lambda: nn.Upsample(scale_factor=2, mode="trilinear")),
        ("f:b 4 n h w",),
    ),
    Case("PixelShuffle", _m(lambda: nn.PixelShuffle(2)), ("f:b 8 h w",)),
    Case("Fold", _m(lambda: nn.Fold((4, 5), 2)), ("f:b 16 12",)),
    Case("Unfold", _m(lambda: nn.Unfold(2, padding=1, stride=2)), (IMAGE,)),
    Case("GELU-tanh", _m(lambda: nn.GELU("tanh")), ("f:b d",)),
    Case("PReLU", _m(lambda: nn.PReLU(4)), (SEQUENCE,)),
    Case("Softmax2d", _m(nn.Softmax2d), (IMAGE,)),
    Case("GLU", _m(nn.GLU), ("f:b d",)),
    Case(
        "CrossEntropyLoss",
        _m(lambda: nn.CrossEntropyLoss(label_smoothing=0.1)),
        ("f:b 10 s", "i10:b s"),
    ),
    Case("NLLLoss-weight", _m(lambda: nn.NLLLoss(torch.rand(10))), ("f:b 10", "i10:b")),
    Case(
        "BCEWithLogitsLoss",
        _m(lambda: nn.BCEWithLogitsLoss(pos_weight=torch.rand(8))),
        ("f:b d", "p:b d"),
    ),
    Case("KLDivLoss", _m(lambda: nn.KLDivLoss("batchmean")), ("f:b d", "p:b d")),
    Case("HuberLoss", _m(lambda: nn.HuberLoss(delta=0.5)), ("f:b d", "f:b d")),
    Case("TripletMarginLoss", _m(lambda: nn.TripletMarginLoss(swap=True)), ("f:b d",) * 3),
    # (a margin every class meets, as a dry run takes them: a record counts those met)
    Case("MultiMarginLoss", _m(lambda: nn.MultiMarginLoss(p=2, margin=1e6)), ("f:b 10", "i10:b")),
    Case("CosineEmbeddingLoss", _m(nn.CosineEmbeddingLoss), ("f:b d", "f:b d", "f:b")),
    Case(
        "sdpa-mask",
        lambda: lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m),
        ("f:b 2 s d", "f:b 2 t d", "f:b 2 t d", "f:b 2 s t"),
    ),
    Case(
        "sdpa-gqa-causal",
        lambda: (
            lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        ),
        ("f:b 4 s d", "f:b 2 s d", "f:b 2 s d"),
    ),
    Case(
        "sdpa-dropout",
        lambda: lambda q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=0.1),
        ("f:b 2 s d", "f:b 2 t d", "f:b 2 t d"),
    ),
    Case("matmul-1d", lambda: lambda a, b: torch.matmul(a, b), ("f:k", "f:b k n")),
    Case("matmul-broadcast", lambda: lambda a, b: torch.matmul(a, b), ("f:b 1 n k", "f:s k n")),
    Case(
        "addmm",
        lambda: lambda c, a, b: torch.addmm(c, a, b, alpha=0.5, beta=2.0),
        ("f:n", "f:b k", "f:k n"),
    ),
    Case(
        "addbmm",
        lambda: lambda c, a, b: torch.addbmm(c, a, b, alpha=0.5),
        ("f:n s", "f:b n k", "f:b k s"),
    ),
    Case(
        "baddbmm",
        lambda: lambda c, a, b: torch.baddbmm(c, a, b, beta=0.0),
        ("f:b n s", "f:b n k", "f:b k s"),
    ),
    Case("addmv", lambda: lambda c, a, b: torch.addmv(c, a, b, alpha=2.0), ("f:n", "f:n k", "f:k")),
    Case("addr", lambda: lambda c, a, b: torch.addr(c, a, b, beta=0.5), ("f:n k", "f:n", "f:k")),
    Case(
        "multi_dot",
        lambda: lambda a, b, c: torch.linalg.multi_dot([a, b, c]),
        ("f:k", "f:k n", "f:n s"),
    ),
    Case(
        "tensordot",
        lambda: lambda a, b: torch.tensordot(a, b, ([0, 2], [2, 0])),
        ("f:n k s", "f:s b n"),
    ),
    Case("kron", lambda: lambda a, b: torch.kron(a, b), ("f:b n k", "f:s 2")),
    Case(
        "einsum-diagonal",
        lambda: lambda a, b: torch.einsum("iij,jk->ik", a, b),
        ("f:n n k", "f:k s"),
    ),
    Case("einsum-trace", lambda: lambda a, b: torch.einsum("ii,ij->j", a, b), ("f:n n", "f:n k")),
    Case("cdist-1", lambda: lambda a, b: torch.cdist(a, b, p=1), ("f:b n d", "f:b s d")),
    Case(
        "cdist-inf", lambda: lambda a, b: torch.cdist(a, b, p=float("inf")), ("f:b n d", "f:b s d")
    ),
    Case(
        "cdist-mm",
        lambda: lambda a, b: torch.cdist(a, b, compute_mode="use_mm_for_euclid_dist"),
        ("f:b n d", "f:b s d"),
    ),
    Case(
        "F.bilinear", lambda: lambda a, b, w: F.bilinear(a, b, w), ("f:b n k", "f:b n s", "f:d k s")
    ),
    Case("dist", lambda: lambda a, b: torch.dist(a, b, 3), ("f:b 1 d", "f:n d")),
    Case("polar", lambda: lambda a, b: torch.polar(a.abs(), b).real, ("f:b d", "f:b d")),
    Case("block_diag", lambda: _block_diag_sum, ("f:n k", "f:s 2")),
]

#: FlopCounterMode counts the weight's gradient of a grouped convolution as an ungrouped
#: one (``docs/costs.md``): none of the cases is grouped, so every backward is compared.
CORE = {
    "Linear",
    "Conv2d",
    "ConvTranspose2d",
    "conv_tbc",
    "EmbeddingBag-weights",
    "LSTM-proj",
    "MultiheadAttention-mask",
    "TransformerDecoderLayer",
    "RMSNorm",
    "BatchNorm2d-eval",
    "MaxUnpool2d",
    "Upsample-bicubic",
    "CrossEntropyLoss",
    "sdpa-gqa-causal",
    "matmul-broadcast",
    "addbmm",
    "addr",
    "multi_dot",
    "einsum-diagonal",
    "cdist-mm",
    "F.bilinear",
    "dist",
    "polar",
    "block_diag",
}


def _check(case: Case) -> None:
    swept = sweep(case)
    assert swept.uncounted == ()
    forward, backward, matmul = swept.recorded
    assert swept.ours_torch[0] == swept.torch_forward
    if swept.torch_backward is not None:
        assert swept.ours_torch[1] == swept.torch_backward
    assert swept.ran_backward == backward
    assert swept.estimated == (forward, backward, matmul)


def _check_other_sizes(case: Case) -> None:
    cost = estimate_of(case, case.make(), SIZES)
    if not cost.exact:
        return
    symbols = cost.formula.free_symbols | cost.backward_formula.free_symbols
    at = {s: OTHER_SIZES[s.name] for s in symbols}
    expected = recorded_at(case, OTHER_SIZES)
    assert (int(cost.formula.subs(at)), int(cost.backward_formula.subs(at))) == expected


@pytest.mark.parametrize("case", [c for c in CASES if c.name in CORE], ids=lambda c: c.name)
def test_core_layers_count_alike_four_ways(case: Case) -> None:
    _check(case)
    _check_other_sizes(case)


@pytest.mark.slow
@pytest.mark.parametrize("case", [c for c in CASES if c.name not in CORE], ids=lambda c: c.name)
def test_every_layer_counts_alike_four_ways(case: Case) -> None:
    _check(case)
    _check_other_sizes(case)
