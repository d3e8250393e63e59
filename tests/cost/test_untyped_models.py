"""``typedflops.estimate``: models nobody annotated, costed in named dims with one call, and
``@typed_flops`` on an ``nn.Module`` subclass. The models are written as Hugging Face and
torchvision write theirs (keyword inputs, a dict-like output, ``use_cache`` flags, grouped
convolutions, batch norm), built here by hand."""

from __future__ import annotations

import functools
import math
import warnings
from collections import OrderedDict
from typing import Any

import pytest
import sympy
import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

import typedflops
import typedflops.nn as tnn
from typedflops import SpecError, estimate, record, typed_flops
from typedflops.cost.engine.recorder import torch_counts

VOCAB, D_MODEL, HEADS, LAYERS = 101, 32, 4, 2
batch, seq = sympy.symbols("batch seq")


class _Output(OrderedDict[str, Any]):
    """A dict-like model output, as transformers' ``ModelOutput``."""

    @property
    def logits(self) -> Tensor:
        return self["logits"]  # type: ignore[no-any-return]


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(D_MODEL)
        self.c_attn = nn.Linear(D_MODEL, 3 * D_MODEL)
        self.c_proj = nn.Linear(D_MODEL, D_MODEL)
        self.ln_2 = nn.LayerNorm(D_MODEL)
        self.mlp = nn.Sequential(
            nn.Linear(D_MODEL, 4 * D_MODEL), nn.GELU(), nn.Linear(4 * D_MODEL, D_MODEL)
        )

    def forward(self, hidden: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        b, s, _ = hidden.shape
        q, k, v = self.c_attn(self.ln_1(hidden)).split(D_MODEL, dim=2)
        q, k, v = (t.view(b, s, HEADS, -1).transpose(1, 2) for t in (q, k, v))
        mask = None
        if attention_mask is not None:
            mask = attention_mask[:, None, None, :].to(q.dtype)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None)
        hidden = hidden + self.c_proj(y.transpose(1, 2).reshape(b, s, D_MODEL))
        return hidden + self.mlp(self.ln_2(hidden))  # type: ignore[no-any-return]


class _CausalLM(nn.Module):
    """Hugging Face's shape: keyword inputs, flags, positions made inside, a dict out."""

    def __init__(self) -> None:
        super().__init__()
        self.wte = nn.Embedding(VOCAB, D_MODEL)
        self.wpe = nn.Embedding(64, D_MODEL)
        self.h = nn.ModuleList(_Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(D_MODEL)
        self.lm_head = nn.Linear(D_MODEL, VOCAB, bias=False)

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        use_cache: bool | None = None,
        return_dict: bool = True,
    ) -> Any:
        assert input_ids is not None and not use_cache
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        hidden = self.wte(input_ids) + self.wpe(positions)
        for block in self.h:
            hidden = block(hidden, attention_mask)
        logits = self.lm_head(self.ln_f(hidden))
        return _Output(logits=logits) if return_dict else (logits,)


def _matmul_formula() -> sympy.Expr:
    per_layer = 2 * batch * seq * D_MODEL * (3 * D_MODEL + D_MODEL + 8 * D_MODEL)
    attention = 4 * batch * HEADS * seq**2 * (D_MODEL // HEADS)
    return LAYERS * (per_layer + attention) + 2 * batch * seq * D_MODEL * VOCAB


def test_a_language_model_is_costed_in_batch_and_seq_from_its_inputs_annotation() -> None:
    model = _CausalLM()
    cost = estimate(model, Int[Tensor, "batch seq"], batch=2, seq=16)
    assert cost.function == "_CausalLM"
    assert cost.exact and cost.uncounted == ()
    assert {str(s) for s in cost.formula.free_symbols} == {"batch", "seq"}
    assert sympy.expand(cost.matmul_formula - _matmul_formula()) == 0
    # The formula holds at other sizes: a dry run there gives its value.
    other = estimate(model, Int[Tensor, "batch seq"], batch=3, seq=24)
    assert cost.formula.subs({batch: 3, seq: 24}) == other.flops
    assert cost.backward_formula.subs({batch: 3, seq: 24}) == other.backward_flops
    # ... and a real run counts the same, op for op.
    ids = torch.randint(0, VOCAB, (2, 16))
    with record() as rec:
        model(ids)
    assert (rec.total.flops, rec.total.backward_flops) == (cost.flops, cost.backward_flops)


def test_matmul_counts_equal_flop_counter_mode_on_a_real_run() -> None:
    model = _CausalLM()
    ids = torch.randint(0, VOCAB, (2, 16))
    with FlopCounterMode(display=False) as counter:
        logits = model(ids).logits
    with FlopCounterMode(display=False) as backward_counter:
        logits.sum().backward()
    with record() as rec:
        model(ids)
    forward, backward = torch_counts(rec.session.root)
    # FlopCounterMode counts a CPU's fused attention as 0 (see docs/costs.md): the rest agrees.
    cost = estimate(model, Int[Tensor, "batch seq"], batch=2, seq=16)
    attention = LAYERS * 4 * 2 * HEADS * 16**2 * (D_MODEL // HEADS)
    assert forward == counter.get_total_flops() == cost.matmul_flops - attention
    assert backward == backward_counter.get_total_flops()


def test_keyword_inputs_and_plain_arguments_are_passed_as_given() -> None:
    model = _CausalLM()
    masked = estimate(
        model,
        input_ids=Int[Tensor, "batch seq"],
        attention_mask=Int[Tensor, "batch seq"],
        use_cache=False,
        return_dict=False,
        batch=2,
        seq=16,
    )
    unmasked = estimate(model, Int[Tensor, "batch seq"], batch=2, seq=16)
    # The mask is built from its annotation and read by every layer's attention (a cast
    # is free; masked or causal, the fused kernel's count is the same).
    assert masked.flops == unmasked.flops
    assert masked.bytes_read > unmasked.bytes_read
    assert masked.dims == {"batch": 2, "seq": 16}


def test_grad_names_annotated_inputs() -> None:
    def mix(x: Tensor, w: Tensor) -> Tensor:
        return torch.tanh(x @ w)

    spec = Float[Tensor, "n d"], Float[Tensor, "d e"]
    plain = estimate(mix, *spec, n=4, d=5, e=6)
    both = estimate(mix, *spec, n=4, d=5, e=6, grad=("x", "w"))
    assert plain.backward_flops == 0
    assert both.backward_flops == 2 * (2 * 4 * 5 * 6) + 4 * 6  # two grad matmuls, tanh'
    assert str(plain.formula) == "e*n*(2*d + 1)"


class _Bottleneck(nn.Module):
    """torchvision's ResNeXt bottleneck: 1x1, grouped 3x3, 1x1, batch norms, a shortcut."""

    def __init__(self, channels: int, groups: int) -> None:
        super().__init__()
        width = channels // 2
        self.conv1 = nn.Conv2d(channels, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, groups=groups, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(channels)

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        return F.relu(self.bn3(self.conv3(out)) + x)


@pytest.mark.parametrize("groups", [1, 8])
def test_a_grouped_conv_net_is_costed_as_its_kernels_run(groups: int) -> None:
    model = _Bottleneck(64, groups).train()
    cost = estimate(model, Float[Tensor, "batch 64 14 14"], batch=2)
    positions = 2 * 14 * 14
    convs = positions * (64 * 32 + 32 * (32 // groups) * 9 + 32 * 64)
    assert cost.matmul_flops == 2 * convs
    assert str(cost.formula) == f"{cost.flops // 2}*batch"
    x = torch.randn(2, 64, 14, 14, requires_grad=True)
    with record() as rec:
        model(x)
    assert rec.total.flops == cost.flops
    # backward: each convolution's input and weight gradients (2 x 2 x its products) ...
    conv_backward = [e for e in rec.total.ops if e.op.startswith("conv")]
    assert sum(op.backward_flops for op in conv_backward) == 2 * 2 * convs


def test_real_tensors_alone_cost_that_call_with_a_number_for_formula() -> None:
    # as FlopCounterMode and fvcore are called: the model and an example input (its meta
    # copy runs; nothing is named, so the formula is the count)
    model = nn.Sequential(nn.Embedding(100, 16), nn.Linear(16, 100))
    ids = torch.randint(0, 100, (2, 5))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cost = estimate(model, ids)
    with record() as ran:
        model(ids).sum().backward()
    assert (cost.flops, cost.formula, cost.exact) == (32_000, 32_000, True)
    assert cost.flops + 2 * 5 * 100 == ran.total.flops  # (less the loss's sum)
    assert cost.backward_flops == ran.total.backward_flops
    literal = estimate(model, Int[Tensor, "2 5"])
    assert (cost.forward, cost.backward, cost.bytes) == (
        literal.forward,
        literal.backward,
        literal.bytes,
    )


def test_a_checked_model_needs_no_annotations() -> None:
    layer = tnn.Linear(16, 8)
    assert estimate(layer, batch=4) == layer.estimate(batch=4)

    @typed_flops
    def scale(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
        return x * 2

    assert estimate(scale, n=3, d=5) == scale.estimate(n=3, d=5)
    assert "estimate" in typedflops.__all__ and typedflops.estimate is estimate


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda m: estimate(m, batch=2),
            "estimate(_CausalLM): no input is annotated, so no tensor can be built; give each "
            "tensor input as an annotation: estimate(model, Float[Tensor, 'batch d'], batch=...)",
        ),
        (
            lambda m: estimate(m, input_ids="batch seq", batch=2, seq=3),
            "estimate(_CausalLM): input_ids='batch seq' is a string; an input is given as an "
            "annotation; write input_ids=Float[Tensor, 'batch seq'] (or Int[...] for ids)",
        ),
        (
            lambda m: estimate(m, *[Int[Tensor, "b s"]] * 5, b=2, s=3),
            "estimate(_CausalLM): 5 inputs given, but its forward takes 4 positionally "
            "(input_ids, attention_mask, use_cache, return_dict)",
        ),
        (
            lambda m: estimate(m, Int[Tensor, "batch seq"], batch=2),
            "_CausalLM.estimate(): missing size for seq; pass seq=...",
        ),
        (
            lambda m: estimate(m, Int[Tensor, "batch seq"], batch=2, seq=3, d=4),
            "_CausalLM.estimate(): unknown dim d; its dims are batch, seq",
        ),
        (
            lambda m: estimate(m, Int[Tensor, "b s"], input_ids=Int[Tensor, "b s"], b=1, s=1),
            "estimate(_CausalLM): input_ids is given twice (by position and name)",
        ),
        (  # (was an AttributeError from inside the dry run)
            lambda m: estimate(m, Int[Tensor, "b s"], b=1, s=1, dtype="bfloat16"),  # type: ignore[arg-type]
            "estimate(_CausalLM): dtype='bfloat16' is not a torch.dtype; write "
            "dtype=torch.bfloat16",
        ),
    ],
)
def test_bad_requests_are_spec_errors(call: Any, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        call(_CausalLM())
    assert str(caught.value) == message


def test_a_dim_named_like_a_parameter_is_a_dim() -> None:
    def shift(x: Tensor, n: int = 1) -> Tensor:
        return x + n

    assert estimate(shift, Float[Tensor, " n"], n=7).flops == 7
    assert estimate(shift, Float[Tensor, " m"], m=7, n=3).flops == 7  # n: an argument


# -- @typed_flops on a module class -------------------------------------------------------------


def test_typed_flops_on_a_module_class_checks_and_costs_its_forward() -> None:
    @typed_flops
    class Projection(nn.Module):
        def __init__(self, d_in: int, d_out: int) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.randn(d_in, d_out))

        def forward(self, x: Float[Tensor, "batch d_in"]) -> Float[Tensor, "batch d_out"]:
            return x @ self.weight

    layer = Projection(4, 3)
    assert layer(torch.ones(2, 4)).shape == (2, 3)
    with pytest.raises(typedflops.ShapeError, match="argument 'x' has shape"):
        layer(torch.ones(2, 5)[None])
    checked = Projection.forward
    assert isinstance(checked, typedflops.TypedFunction)
    assert checked.estimate(layer, batch=8, d_in=4).flops == 2 * 8 * 4 * 3
    assert estimate(layer, batch=8, d_in=4).flops == 2 * 8 * 4 * 3


def test_typed_flops_options_on_a_module_class_go_to_its_forward() -> None:
    @typed_flops(flops="7*batch")
    class Opaque(nn.Module):
        def forward(self, x: Float[Tensor, "batch d"]) -> Float[Tensor, "batch d"]:
            return x * 2

    assert estimate(Opaque(), batch=3, d=2).flops == 21


def test_typed_flops_on_a_module_class_without_annotations_is_a_spec_error() -> None:
    with pytest.raises(SpecError) as caught:

        @typed_flops
        class Plain(nn.Module):
            def forward(self, x: Tensor) -> Tensor:
                return x

    assert str(caught.value) == (
        "@typed_flops on class Plain: its forward has no tensor annotation, so there is "
        "nothing to check; annotate forward's arguments (x: Float[Tensor, 'batch d']), or "
        "cost the model as it is with typedflops.estimate(model, Float[Tensor, 'batch d'], ...)"
    )


def test_a_module_class_decorated_twice_keeps_one_contract() -> None:
    class Twice(nn.Module):
        @typed_flops
        def forward(self, x: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
            return x + 1

    forward = Twice.forward
    assert typed_flops(Twice) is Twice and Twice.forward is forward
    assert math.isclose(float(Twice()(torch.zeros(3)).sum()), 3.0)


def test_subclasses_of_a_decorated_module_class_check_their_own_forward() -> None:
    @typed_flops
    class Projection(nn.Module):
        def __init__(self, d: int) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.randn(d, d))

        def forward(self, x: Float[Tensor, "batch d"]) -> Float[Tensor, "batch d"]:
            return x @ self.weight

    class Cropped(Projection):  # its own annotations, and super().forward()
        def forward(self, x: Float[Tensor, "batch d"]) -> Float[Tensor, "batch 3"]:
            out: Tensor = super().forward(x)[:, :2]  # a bug the return annotation catches
            return out

    class Doubled(Projection):  # no annotation: the checked forward it calls checks
        def forward(self, x: Tensor) -> Tensor:
            out: Tensor = super().forward(x) * 2
            return out

    @typed_flops(flops="5*batch")
    class Declared(Cropped):
        def forward(self, x: Float[Tensor, "batch d"]) -> Float[Tensor, "batch d"]:
            return Projection.forward(self, x) + 1

    assert isinstance(Cropped.forward, typedflops.TypedFunction)
    with pytest.raises(typedflops.ShapeError, match=r"Cropped.forward\(\): the return value"):
        Cropped(4)(torch.ones(2, 4))
    with pytest.raises(typedflops.ShapeError, match=r"Projection.forward\(\): argument 'x'"):
        Doubled(4)(torch.ones(2, 4)[None])
    assert estimate(Doubled(4), Float[Tensor, "batch d"], batch=8, d=4).flops == 2 * 8 * 16 + 32
    assert estimate(Declared(4), batch=3, d=4).flops == 15


def test_typed_flops_on_a_class_that_is_no_module_nor_dataclass_is_a_spec_error() -> None:
    with pytest.raises(SpecError) as caught:

        @typed_flops
        class Scorer:  # its __call__ annotated, but the decorator would check nothing
            def __call__(self, x: Float[Tensor, "n d"]) -> Float[Tensor, " n"]:
                return x.sum(-1)

    assert str(caught.value) == (
        "@typed_flops on class Scorer: it is neither an nn.Module subclass nor a dataclass, "
        "and a plain class's methods are not checked through it; decorate the methods to "
        "check (@typed_flops on __init__, __call__ or forward)"
    )


class _TakesKeywords(nn.Module):
    """A forward that takes **kwargs, as Hugging Face models' do."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.head = nn.Linear(16, 50)

    def forward(self, input_ids: Tensor, **kwargs: Any) -> Tensor:
        hidden: Tensor = self.embed(input_ids)
        if kwargs.get("output_hidden_states"):
            return hidden
        out: Tensor = self.head(hidden)
        return out


def test_flags_for_a_forwards_keywords_are_passed_and_ints_stay_sizes() -> None:
    model = _TakesKeywords()
    ids = Int[Tensor, "batch seq"]
    assert estimate(model, ids, batch=2, seq=5).flops == 2 * 5 * 2 * 16 * 50
    assert estimate(model, ids, output_hidden_states=True, batch=2, seq=5).flops == 0
    with pytest.raises(SpecError, match=r"unknown dim layers; its dims are batch, seq"):
        estimate(model, ids, layers=3, batch=2, seq=5)


class _Wrapper(nn.Module):
    """A wrapper whose forward takes anything, as DDP's, PEFT's and torch.compile's do."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)


def test_forwards_taking_args_builtins_and_partials_get_their_inputs_by_position() -> None:
    mlp = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    x = Float[Tensor, "batch 8"]
    plain = estimate(mlp, x, batch=3)
    assert plain.formula == 2 * batch * (8 * 16 + 16 * 4) + 16 * batch  # and the relu
    assert estimate(_Wrapper(mlp), x, batch=3).formula == plain.formula
    m, k, n = sympy.symbols("m k n")
    a, b = Float[Tensor, "m k"], Float[Tensor, "k n"]
    assert estimate(torch.matmul, a, b, m=2, k=3, n=4).formula == 2 * m * k * n
    weight = torch.randn(5, 8)
    cost = estimate(functools.partial(F.linear, weight=weight), x, batch=3)
    assert cost.formula == 2 * 8 * 5 * batch
    with pytest.raises(SpecError) as caught:
        estimate(functools.partial(F.linear, weight=weight), x, x, x, batch=3)
    assert str(caught.value).startswith("partial(linear)(): at batch=3 the body fails")


class _TakesContainers(nn.Module):
    """A forward over a dict of tensors (a data loader's batch) and a tuple of them."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 3)

    def forward(self, features: dict[str, Tensor], pair: tuple[Tensor, list[Tensor]]) -> Tensor:
        out: Tensor = self.proj(features["x"]) + features["y"]
        return out * pair[0] + pair[1][0]


def test_inputs_in_dicts_lists_and_tuples_are_built_from_their_annotations() -> None:
    model = _TakesContainers()
    features = {"x": Float[Tensor, "batch d"], "y": Float[Tensor, "batch 3"]}
    pair = (Float[Tensor, "batch 3"], [Float[Tensor, "3"]])
    cost = estimate(model, features, pair, batch=2, d=4)
    # the product 2·batch·d·3 (its bias not counted; d is the layer's 4), the add, the
    # multiply, the add
    assert cost.formula == (2 * 4 * 3 + 3 * 3) * batch
    assert cost.flops == 2 * 2 * 4 * 3 + 3 * 2 * 3
    with record() as rec:
        model(
            {"x": torch.randn(2, 4), "y": torch.randn(2, 3)}, (torch.randn(2, 3), [torch.randn(3)])
        )
    assert rec.total.flops == cost.flops
    # grad= names a container (each tensor in it) or one tensor by its place
    plain = estimate(model, features=features, pair=pair, batch=2, d=4)
    assert plain.flops == cost.flops
    every = estimate(model, features, pair, batch=2, d=4, grad=("features",))
    x_only = estimate(model, features, pair, batch=2, d=4, grad=("features_x",))
    assert every.backward_flops - plain.backward_flops == 2 * 2 * 4 * 3  # x's product
    assert x_only.backward_flops == every.backward_flops  # y's gradient: no op (an add)
    with pytest.raises(SpecError, match="missing size for d"):
        estimate(model, features, pair, batch=2)


@pytest.mark.filterwarnings("ignore:`torch.jit.trace")
def test_a_torchscript_module_is_a_spec_error_naming_it_not_an_internal_one() -> None:
    mlp = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
    x = Float[Tensor, "batch 8"]
    traced = torch.jit.trace(mlp, torch.randn(2, 8))  # type: ignore[no-untyped-call]
    for compiled in (torch.jit.script(mlp), traced):
        with pytest.raises(SpecError, match=r"is a TorchScript module"):
            estimate(compiled, x, batch=2)
    inside = nn.Sequential(torch.jit.script(nn.Linear(8, 8)), nn.ReLU())
    with pytest.raises(SpecError, match=r"its submodule 0 is a TorchScript module"):
        estimate(inside, x, batch=2)
    with record() as rec:  # a real run is counted
        inside(torch.randn(2, 8))
    assert rec.total.flops == 2 * 2 * 8 * 8 + 2 * 8  # the product (its bias not counted), relu


def test_batch_norm_averaging_over_all_batches_is_estimated_from_its_counter() -> None:
    # momentum=None divides by float(num_batches_tracked): the dry run reads a copy of the
    # counter (it failed on a meta copy) and leaves the module's own as it was
    norm = nn.BatchNorm1d(8, momentum=None)
    cost = estimate(norm, Float[Tensor, "batch 8"], batch=4)
    assert norm.num_batches_tracked is not None and int(norm.num_batches_tracked) == 0
    with record() as rec:
        norm(torch.randn(4, 8))
    assert cost.flops == rec.total.flops == 7 * 4 * 8  # batch statistics 5, weight and bias 2
    assert cost.formula == 7 * 8 * batch and cost.exact


def test_a_body_failing_at_fixed_sizes_is_named_without_sizes_to_change() -> None:
    def project(x: Tensor) -> Tensor:
        return x @ torch.ones(3, 2)

    with pytest.raises(SpecError) as caught:
        estimate(project, Float[Tensor, "4 5"])
    line = project.__code__.co_firstlineno + 1
    assert str(caught.value) == (
        f"{project.__qualname__}(): the body fails at test_untyped_models.py:{line} "
        "(return x @ torch.ones(3, 2)): a and b must have same reduction dim, but got "
        "[4, 5] X [3, 2]."
    )


def test_operands_of_different_dtypes_fail_as_on_every_device() -> None:
    # meta's kernels of mm, addmm and convolution take operands of different dtypes, which
    # every device refuses: an estimate counted 1,088 FLOPs of a call that cannot run. A
    # model of one dtype given float32 inputs is estimated at its dtype, as a real call
    # passes them (see test_model_dtypes.py); the operands of a function, or of a model of
    # several dtypes, are refused.
    from jaxtyping import Float16

    half = nn.Linear(8, 16).half()
    assert estimate(half, Float[Tensor, "b 8"], b=4) == estimate(half, Float16[Tensor, "b 8"], b=4)
    assert estimate(half, Float16[Tensor, "b 8"], b=4).flops == 2 * 4 * 8 * 16
    conv = nn.Sequential(nn.Conv2d(3, 4, 3, bias=False).half(), nn.Conv2d(4, 4, 1))
    with pytest.raises(SpecError, match="convolution: expected its operands to have the same "
                       "dtype, but got float32 and float16"):  # fmt: skip
        estimate(conv, Float[Tensor, "b 3 8 8"], b=1)
    with pytest.raises(SpecError, match="mm: expected its operands to have the same dtype"):
        estimate(torch.mm, Float[Tensor, "n k"], Int[Tensor, "k m"], n=2, k=3, m=4)


@typed_flops
def _doubled(x: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
    return x * 2


def test_grad_given_one_name_as_a_string_is_that_name() -> None:
    # (its letters were taken as names: "grad names i, n, p, t, u")
    layer = nn.Linear(8, 16)
    cost = estimate(layer, Float[Tensor, "b 8"], b=4, grad="input")
    assert cost.backward_flops == 2 * (2 * 4 * 8 * 16) + 4 * 16
    assert _doubled.estimate(n=3, grad="x").backward_flops == 3  # type: ignore[arg-type]
    with pytest.raises(SpecError, match=r"dtype='float16' is not a torch\.dtype"):
        _doubled.estimate(n=3, dtype="float16")  # type: ignore[arg-type]


def test_backward_hooks_no_dry_run_sees_are_listed_uncounted() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
    plain = estimate(model, Float[Tensor, "b 8"], b=4)
    first, last = model[0], model[2]
    assert isinstance(first, nn.Linear) and isinstance(last, nn.Linear)

    def doubled(_: nn.Module, grads: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        return (grads[0] * 2,)

    first.register_full_backward_pre_hook(doubled)
    last.weight.register_hook(lambda grad: grad * 2)
    hooked = estimate(model, Float[Tensor, "b 8"], b=4)
    assert plain.uncounted == ()
    assert hooked.uncounted == ("backward hook of 0", "gradient hook of 2.weight")
    assert hooked.backward_flops == plain.backward_flops == 1632
    with record() as ran, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch's: the first layer's input needs no grad)
        model(torch.randn(4, 8)).sum().backward()
    # what the hooks ran: the pre-hook's 4x8 product and the weight hook's 8x8
    assert ran.total.backward_flops == 1632 + 32 + 64
