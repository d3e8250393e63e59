"""A dry run reaches every module and tensor the body does, wherever it comes from (an
argument, a global, a closure), and ends in a count or in one line that says why not."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import einops
import pytest
import torch
from jaxtyping import Float, Int
from torch import Tensor, nn
from torch._subclasses.fake_tensor import FakeTensor

import typedflops.nn as tnn
from typedflops import SpecError, estimate, record, typed_flops

B, D, H = 8, 16, 32
MLP_FLOPS = 2 * B * D * H + B * H + 2 * B * H * D  # two linears (bias not counted), a relu


class _Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(D, H)
        self.down = nn.Linear(H, D)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(torch.relu(self.up(x)))  # type: ignore[no-any-return]


class _TypedMlp(nn.Module):
    """Typed submodules (their own contracts check the weights' device too)."""

    def __init__(self) -> None:
        super().__init__()
        self.up = tnn.Linear(D, H)
        self.down = tnn.Linear(H, D)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(torch.relu(self.up(x)))


_GLOBAL_PLAIN = _Mlp()
_GLOBAL_TYPED = _TypedMlp()
_GLOBAL_WEIGHT = torch.randn(D, D, requires_grad=True)
_GLOBAL_SCALE = torch.tensor(0.5)


@typed_flops
def _through(model: nn.Module, x: Float[Tensor, "batch d"]) -> Float[Tensor, "batch d"]:
    return model(x)  # type: ignore[no-any-return]


@typed_flops
def _through_list(models: list[nn.Module], x: Float[Tensor, "batch d"]) -> Float[Tensor, "batch d"]:
    for model in models:
        x = model(x)
    return x


@typed_flops
def _global_plain(x: Float[Tensor, "batch d"]) -> Float[Tensor, "batch d"]:
    return _GLOBAL_PLAIN(x)


@typed_flops
def _global_typed(x: Float[Tensor, "batch d"]) -> Float[Tensor, "batch d"]:
    return _GLOBAL_TYPED(x)


@typed_flops
def _global_tensors(x: Float[Tensor, "batch d"]) -> Float[Tensor, "batch d"]:
    return (x @ _GLOBAL_WEIGHT) * _GLOBAL_SCALE


def _closure() -> Any:
    weight = torch.randn(D, D)

    @typed_flops
    def closed(x: Float[Tensor, "batch d"]) -> Float[Tensor, "batch d"]:
        return x @ weight

    return closed


@pytest.mark.parametrize(
    ("call", "flops"),
    [
        (lambda: _through.estimate(_Mlp(), batch=B, d=D), MLP_FLOPS),
        (lambda: _through.estimate(_TypedMlp(), batch=B, d=D), MLP_FLOPS),
        (lambda: _through.estimate(model=_TypedMlp(), batch=B, d=D), MLP_FLOPS),
        (lambda: _through_list.estimate([_Mlp(), _TypedMlp()], batch=B, d=D), 2 * MLP_FLOPS),
        (lambda: _global_plain.estimate(batch=B, d=D), MLP_FLOPS),
        (lambda: _global_typed.estimate(batch=B, d=D), MLP_FLOPS),
        (lambda: _global_tensors.estimate(batch=B, d=D), 2 * B * D * D + B * D),
        (lambda: _closure().estimate(batch=B, d=D), 2 * B * D * D),
    ],
    ids=["arg", "typed-arg", "keyword", "list", "global", "typed-global", "tensors", "closure"],
)
def test_every_module_and_tensor_the_body_reaches_takes_part(call: Any, flops: int) -> None:
    cost = call()
    assert cost.flops == flops
    assert cost.uncounted == ()


def test_a_modules_parameters_in_an_argument_give_its_backward() -> None:
    cost = _through.estimate(_TypedMlp(), batch=B, d=D)
    # weight gradients of both layers, the input gradient of the second, relu's
    assert cost.backward_flops == 2 * B * D * H + 2 * 2 * B * H * D + B * H
    frozen = _TypedMlp().requires_grad_(False)
    assert _through.estimate(frozen, batch=B, d=D).backward_flops == 0


def test_a_dry_run_reads_and_writes_nothing_real() -> None:
    norm = nn.BatchNorm1d(D).train()

    @typed_flops
    def normed(x: Float[Tensor, "batch d"]) -> Float[Tensor, "batch d"]:
        return norm(x)  # type: ignore[no-any-return]

    before = {name: t.clone() for name, t in norm.state_dict().items()}
    cost = normed.estimate(batch=B, d=D)
    assert cost.flops == 7 * B * D
    for name, tensor in norm.state_dict().items():
        assert torch.equal(tensor, before[name]), name
    assert norm.num_batches_tracked is not None and int(norm.num_batches_tracked) == 0


class _Caching(nn.Module):
    """Keeps what its last forward saw, as caches and hooks' users do."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(D, D)
        self.last: Tensor | None = None

    @typed_flops
    def forward(self, x: Float[Tensor, "batch d"]) -> Float[Tensor, "batch d"]:
        y: Tensor = self.inner(x)
        self.last = y
        setattr(self.inner, "seen", x.shape[0])  # noqa: B010 (an attribute nn.Linear lacks)
        self.register_buffer("cache", y.detach(), persistent=False)
        return y


@typed_flops
def _through_caching(model: _Caching, x: Float[Tensor, "batch d"]) -> Float[Tensor, "batch d"]:
    return model(x)


def test_what_a_dry_run_assigns_to_the_callers_modules_is_put_back() -> None:
    model = _Caching()
    real = model(torch.ones(2, D))
    for cost in (
        model.forward.estimate(batch=B, d=D),
        _through_caching.estimate(model, batch=B, d=D),
    ):
        assert cost.flops == 2 * B * D * D
        assert model.last is not None and model.last.device.type == "cpu"
        assert torch.equal(model.last, real) and model.inner.seen == 2
        assert model.cache.device.type == "cpu" and model.cache.shape == (2, D)
    fresh = _Caching()
    fresh.forward.estimate(batch=B, d=D)
    assert fresh.last is None and "seen" not in vars(fresh.inner) and "cache" not in fresh._buffers


class _Rotary(nn.Module):
    """A table made on first use and kept, its method's object not named ``self``."""

    def __init__(this) -> None:
        super().__init__()
        this.table: Tensor | None = None

    @typed_flops
    def forward(this, x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
        if this.table is None or this.table.shape != x.shape:
            this.table = torch.outer(torch.arange(x.shape[0]).float(), torch.ones(x.shape[1]))
        return x * this.table.cos()


def test_the_fit_of_a_records_row_leaves_the_callers_modules_as_they_were() -> None:
    # the dry runs that fit a record's rows called a model passed as an argument (or a
    # method's object not named self) as it was: what the body assigned on meta stayed on
    # it (the next real call crashed mixing meta and cpu, or kept a storage-less cache)
    model, rotary = _Caching(), _Rotary()
    x = torch.ones(2, D)
    counts = []
    for _ in range(2):
        with record() as rec:
            _through_caching(model, x)
            rotary(x)
        counts.append((rec.total.flops, rec.total.backward_flops))
        assert model.last is not None and model.last.device.type == "cpu"
        assert model.cache.device.type == "cpu" and model.inner.seen == 2
        assert rotary.table is not None and rotary.table.device.type == "cpu"
    # the table's outer product (2 x D multiplies) is made by the first call only
    assert counts[0][0] - counts[1][0] == 2 * D and counts[0][1] == counts[1][1]


_GLOBAL_CACHING = _Caching()


@typed_flops
def _through_a_global(x: Float[Tensor, "batch d"]) -> Float[Tensor, "batch d"]:
    return _GLOBAL_CACHING(x) * 2


def test_what_a_dry_run_assigns_to_a_module_it_reaches_otherwise_is_put_back() -> None:
    # a global model (or one held by another object) is no argument: its parameters are
    # read as they are, and what its forward assigns was left on it, storage-less
    model = _GLOBAL_CACHING
    real = _through_a_global(torch.ones(2, D))
    with record() as rec:
        _through_a_global(torch.ones(2, D))
    for batch, cost in ((B, _through_a_global.estimate(batch=B, d=D)), (2, rec.total)):
        assert cost.flops == batch * (2 * D * D + D)  # (addmm's 2·D·D a row, the doubling)
        assert model.last is not None and model.last.device.type == "cpu"
        assert torch.equal(model.last * 2, real) and model.inner.seen == 2
        assert model.cache.device.type == "cpu" and model.cache.shape == (2, D)
    assert torch.nn.Module.__setattr__ is _MODULE_SETATTR  # (nothing left installed)


_MODULE_SETATTR = torch.nn.Module.__setattr__


@typed_flops
def _keeping(x: Float[Tensor, "n d"], state: dict[str, Any]) -> Float[Tensor, "n d"]:
    y = x * 2
    state["last"] = y
    state.setdefault("seen", []).append(y)
    return y


def test_what_a_dry_run_puts_in_a_callers_container_stays_off_it() -> None:
    # a record's fit called the body with the caller's own dict: its list held a meta
    # tensor per dry run (12 after one call)
    state: dict[str, Any] = {}
    with record() as rec:
        _keeping(torch.ones(3, 4), state)
    assert rec.total.flops == 12 and str(rec.total.formula) == "d*n"
    assert state["last"].device.type == "cpu" and len(state["seen"]) == 1


def test_a_dry_run_with_a_dtype_casts_modules_in_arguments() -> None:
    cost = _through.estimate(_Mlp(), batch=B, d=D, dtype=torch.bfloat16)
    as_float = _through.estimate(_Mlp(), batch=B, d=D)
    assert cost.flops == as_float.flops
    assert cost.bytes_read < as_float.bytes_read


# -- bodies a dry run cannot go through ---------------------------------------------------------


@typed_flops
def _masked(x: Float[Tensor, "n d"]) -> Tensor:
    y = x * 2
    return y[y > 0]


@typed_flops
def _nonzero(x: Float[Tensor, "n d"]) -> Tensor:
    return torch.nonzero(x)


@typed_flops
def _unique(x: Float[Tensor, "n d"]) -> Tensor:
    found: Tensor = torch.unique(x)
    return found


@typed_flops
def _counts(ids: Int[Tensor, " n"]) -> Tensor:
    return torch.bincount(ids)


@typed_flops
def _sparse(x: Float[Tensor, "n d"]) -> Tensor:
    return x.to_sparse()


@typed_flops
def _item(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    return x * float(x.max().item())


@typed_flops
def _branch(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    if x.sum() > 0:
        return x
    return -x


@typed_flops
def _logged(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    print(f"mean {x.mean():.3f}", file=io.StringIO())
    return x * 2


def _line_of(function: Callable[..., Any], text: str) -> str:
    import inspect

    lines, start = inspect.getsourcelines(inspect.unwrap(function))
    found = [start + i for i, line in enumerate(lines) if text in line]
    return f"test_dry_run_reach.py:{found[0]} ({text})"


_VALUES = "its result depends on the tensors' values, not only their shapes; record a real run"


@pytest.mark.parametrize(
    ("function", "dims", "op", "line"),
    [
        (_masked, {"n": 3, "d": 4}, "nonzero (what x[mask] runs)", "return y[y > 0]"),
        (_nonzero, {"n": 3, "d": 4}, "nonzero (what x[mask] runs)", "return torch.nonzero(x)"),
        (_unique, {"n": 3, "d": 4}, "unique", "found: Tensor = torch.unique(x)"),
        (_counts, {"n": 5}, "bincount", "return torch.bincount(ids)"),
        (
            _sparse,
            {"n": 3, "d": 4},
            "to_sparse (one value per nonzero)",
            "return x.to_sparse()",
        ),
        (_item, {"n": 3, "d": 4}, "a tensor's value", "return x * float(x.max().item())"),
        (_branch, {"n": 3, "d": 4}, "a tensor's value", "if x.sum() > 0:"),
        (
            _logged,
            {"n": 3, "d": 4},
            "a tensor's value formatted",
            'print(f"mean {x.mean():.3f}", file=io.StringIO())',
        ),
    ],
)
def test_a_body_that_depends_on_values_is_one_line_naming_the_op_and_the_line(
    function: Any, dims: dict[str, int], op: str, line: str
) -> None:
    with pytest.raises(SpecError) as caught:
        function.estimate(**dims)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{function.name}(): a dry run cannot go past {op}")
    assert f" at {_line_of(function, line)}: {_VALUES}" in message
    # .formula too: no size would do, so it says so rather than "estimate first"
    with pytest.raises(SpecError, match=re.escape(_VALUES)):
        _ = function.formula
    # and record() on a real run counts it
    with record() as rec:
        function(torch.ones(dims["n"], dims["d"]) if "d" in dims else torch.ones(5).long())
    assert rec.total.uncounted == ()


class _MaskedUnlessAllKept(nn.Module):
    """Written as transformers writes its masks: a value read skipped on fake tensors
    (tracing), where the mask is applied whatever its values."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: Tensor) -> Tensor:
        keep = x[..., 0] > -1e9  # (values no shape fixes: a mask of ones is read as it runs)
        if isinstance(keep, FakeTensor) or not bool(keep.all()):
            x = x * keep.unsqueeze(-1)
        out: Tensor = self.proj(x)
        return out


def test_a_body_that_read_a_value_on_meta_and_went_on_when_fake_is_not_exact() -> None:
    """The dry run on meta stops at the value read; under FakeTensorMode the body takes
    the path it takes on fake tensors (the mask's multiply), which an eager run skips: the
    count is that path's (2 * 6 * 8 * 8, the mask's 6 compares and its multiply's 48), and
    not marked exact."""
    model = _MaskedUnlessAllKept()
    cost = estimate(model, Float[Tensor, "b s 8"], b=2, s=3)
    assert (cost.flops, cost.exact) == (2 * 6 * 8 * 8 + 6 + 2 * 3 * 8, False)
    with record() as rec:
        model(torch.ones(2, 3, 8))
    assert rec.total.flops == 2 * 6 * 8 * 8 + 6


# -- sizes --------------------------------------------------------------------------------------


@typed_flops
def _linear(x: Float[Tensor, "n d"], w: Float[Tensor, "d e"]) -> Float[Tensor, "n e"]:
    return x @ w


@pytest.mark.parametrize("zero", ["n", "d", "e"])
def test_a_zero_sized_dim_gives_its_count_and_a_formula_that_holds_elsewhere(zero: str) -> None:
    dims: dict[str, Any] = {"n": 4, "d": 5, "e": 6, zero: 0}
    cost = _linear.estimate(**dims)
    assert cost.flops == 0 and cost.exact
    assert str(cost.formula) == "2*d*e*n"
    assert cost.formula.subs({"n": 4, "d": 5, "e": 6}) == _linear.estimate(n=4, d=5, e=6).flops


def test_sizes_past_what_torch_can_address_are_a_spec_error_naming_the_tensor() -> None:
    huge = 2**40
    assert _linear.estimate(n=huge, d=2**10, e=4).flops == 2 * huge * 2**10 * 4
    with pytest.raises(SpecError) as caught:
        _linear.estimate(n=huge, d=huge, e=4)
    assert str(caught.value) == (
        f"_linear(): at n={huge}, d={huge}, e=4, a tensor of shape ({huge}, {huge}) has more "
        "bytes than torch can address (2**63), even on meta; estimate at smaller sizes and "
        "evaluate cost.formula at these"
    )


def test_plan_at_a_batch_past_what_torch_can_address_prints_one_line() -> None:
    command = [sys.executable, "-m", "typedflops", "plan", "--model", "gpt2", "--seq", "1024"]
    run = subprocess.run(
        [*command, "--batch", str(2**62)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 2
    assert "Traceback" not in run.stderr
    (line,) = run.stderr.splitlines()
    assert line.startswith("typedflops: error: TransformerLM.loss(): at vocab=50257, ")
    assert line.endswith(
        f"batch={2**62}, seq=1024, a tensor of shape ({2**62}, 1024) has more bytes than torch "
        "can address (2**63), even on meta; estimate at smaller sizes and evaluate "
        "cost.formula at these"
    )


@typed_flops
def _causal(q: Float[Tensor, "b h s d"]) -> Float[Tensor, "b h s d"]:
    return nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)


def test_a_zero_sized_dim_where_torch_runs_another_path_is_not_exact() -> None:
    # On an empty sequence torch's attention returns zeros plus its inputs' sums times 0
    # (three scalar ops): the count of what ran, which says nothing of other lengths.
    cost = _causal.estimate(b=2, h=2, s=0, d=8)
    assert cost.flops == 3 and not cost.exact
    with record() as rec:
        _causal(torch.randn(2, 2, 0, 8))
    assert rec.total.flops == 3
    elsewhere = _causal.estimate(b=2, h=2, s=4, d=8)
    # every pair, as a CPU's flash kernel computes up to 512 keys; past them it computes
    # fewer (at s = 1025: 512·512 + 512·1024 + 1025 = 787,457 of 1,025² = 1,050,625 pairs),
    # so the formula is not exact
    assert str(elsewhere.formula) == "4*b*d*h*s**2" and not elsewhere.exact


_LAYER = nn.Linear(8, 16)


@typed_flops
def _project(x: Float[Tensor, "n d"]) -> Float[Tensor, "n e"]:
    return _LAYER(x)  # type: ignore[no-any-return]


@typed_flops
def _through_numpy(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    return torch.from_numpy(x.detach().numpy() * 2)


@typed_flops
def _within_block(x: Float[Tensor, "b t"]) -> Float[Tensor, "b t"]:
    assert x.shape[1] <= 16, f"sequence of {x.shape[1]} past the block size"
    return x * 2


@typed_flops
def _by_table(x: Float[Tensor, "b t"]) -> Float[Tensor, "b t"]:
    return x * {4: 2.0}[x.shape[1]]


@typed_flops
def _split(x: Float[Tensor, "b t"]) -> Tensor:
    return einops.rearrange(x, "b (t h) -> b t h", h=3)


@typed_flops
def _refusing(x: Float[Tensor, "b t"]) -> Float[Tensor, "b t"]:
    if x.shape[1] > 16:
        raise ValueError("the sequence is too long")
    missing: Any = None
    return torch.nn.functional.linear(x, weight=missing) if x.shape[1] == 7 else x


@pytest.mark.parametrize(
    ("function", "t", "line", "reason"),
    [
        (
            _within_block,
            20,
            'assert x.shape[1] <= 16, f"sequence of {x.shape[1]} past the block size"',
            "AssertionError: sequence of 20 past the block size",
        ),
        (_by_table, 20, "return x * {4: 2.0}[x.shape[1]]", "KeyError: 20"),
        (
            _split,
            20,
            'return einops.rearrange(x, "b (t h) -> b t h", h=3)',
            'Error while processing rearrange-reduction pattern "b (t h) -> b t h".',
        ),
        (_refusing, 20, 'raise ValueError("the sequence is too long")', "the sequence is too long"),
        (
            _refusing,
            7,
            "return torch.nn.functional.linear(x, weight=missing) if x.shape[1] == 7 else x",
            "linear(): argument 'weight' must be Tensor, not NoneType",
        ),
    ],
)
def test_a_body_that_refuses_the_sizes_in_python_is_a_spec_error_at_the_users_line(
    function: Any, t: int, line: str, reason: str
) -> None:
    # an assert, a lookup, a ValueError, a TypeError, an einops pattern: one line, as for
    # torch's refusals, at the user's line (not inside einops)
    with pytest.raises(SpecError) as caught:
        function.estimate(b=2, t=t)
    assert str(caught.value) == (
        f"{function.__name__}(): at b=2, t={t} the body fails at {_line_of(function, line)}: "
        f"{reason}; give sizes the body can run at"
    )


def test_sizes_the_body_refuses_are_a_spec_error_naming_them_and_torchs_reason() -> None:
    with pytest.raises(SpecError) as caught:
        _project.estimate(n=4, d=9)
    line = _line_of(_project, "return _LAYER(x)  # type: ignore[no-any-return]")
    assert str(caught.value) == (
        f"_project(): at n=4, d=9 the body fails at {line}: a and b must have same reduction "
        "dim, but got [4, 9] X [8, 16].; give sizes the body can run at"
    )
    assert isinstance(caught.value.__cause__, RuntimeError)  # torch's own, kept
    with pytest.raises(SpecError) as caught:
        _through_numpy.estimate(n=2, d=3)
    line = _line_of(_through_numpy, "return torch.from_numpy(x.detach().numpy() * 2)")
    assert str(caught.value).startswith(
        f"_through_numpy(): a dry run cannot go past .numpy() at {line}: {_VALUES}"
    )
    assert _project.estimate(n=4, d=8).flops == 2 * 4 * 8 * 16


@typed_flops
def _stacked(*xs: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    return torch.stack(xs).sum(0)


def test_tensors_in_star_args_are_passed_or_a_spec_error_asks_for_them() -> None:
    with pytest.raises(SpecError) as caught:
        _stacked.estimate(n=4, d=8)
    assert str(caught.value) == (
        "_stacked.estimate(): cannot build *xs: its annotation gives each tensor's shape, not "
        "how many a call passes; pass them positionally, on meta: "
        "_stacked.estimate(torch.empty(..., device='meta'), ...)"
    )
    meta = torch.empty(4, 8, device="meta")
    assert _stacked.estimate(meta, meta, meta).flops == 3 * 4 * 8  # the sum of three
