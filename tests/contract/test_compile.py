"""Modules and methods under torch.compile: every backend, fullgraph and dynamic shapes, no
graph break from the checks, and a broken contract still reported with our message."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal

import pytest
import torch
import torch._dynamo
from jaxtyping import Float, Int
from torch import Tensor

from typedflops import ContractError, DtypeError, ShapeError, typed_flops
from typedflops.nn import Linear, TwoLayerMLP

pytestmark = pytest.mark.usefixtures("fresh_dynamo")


class Block(torch.nn.Module):
    """A user module: a decorated forward over typed submodules, and a decorated helper."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = Linear(4, 8, bias=True)
        self.mlp = TwoLayerMLP(8, 8, 3)

    @typed_flops
    def forward(self, x: Float[Tensor, "n 4"]) -> Float[Tensor, "n 3"]:
        out: Tensor = self.mlp(torch.relu(self.inner(x))) + self.score(x)
        return out

    @typed_flops
    def score(self, x: Float[Tensor, "n d"]) -> Float[Tensor, "n 1"]:
        return x.sum(-1, keepdim=True)


def _first_line(call: Callable[[], Any]) -> str:
    """The first line of the error that ``call`` raises eagerly."""
    with pytest.raises(ContractError) as caught:
        call()
    return str(caught.value).splitlines()[0]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("fullgraph", [False, True])
@pytest.mark.parametrize("dynamic", [None, True])
def test_compiled_modules_run_valid_calls_and_report_broken_ones(
    backend: str, fullgraph: bool, dynamic: bool | None
) -> None:
    model = Block()
    compiled = torch.compile(model, backend=backend, fullgraph=fullgraph, dynamic=dynamic)
    for rows in (2, 5, 7):  # new sizes: recompiles (or one dynamic graph), never an error
        x = torch.randn(rows, 4)
        torch.testing.assert_close(compiled(x), model(x))
    expected = _first_line(lambda: model(torch.randn(2, 5)))
    assert expected == (
        "Block.forward(): argument 'x' has shape (2, 5) but its annotation \"n 4\" needs "
        "size 4 at axis 1"
    )
    if fullgraph:  # dynamo lets nothing out of a full graph: its error carries our message
        with pytest.raises(torch._dynamo.exc.Unsupported, match=re.escape(expected)):
            compiled(torch.randn(2, 5))
    else:
        with pytest.raises(ShapeError, match=re.escape(expected)):
            compiled(torch.randn(2, 5))


def test_typed_linear_under_inductor() -> None:
    layer = Linear(4, 3)
    for fullgraph, dynamic in ((False, None), (True, True)):
        compiled = torch.compile(layer, backend="inductor", fullgraph=fullgraph, dynamic=dynamic)
        x = torch.randn(6, 4)
        torch.testing.assert_close(compiled(x), layer(x))
        torch.testing.assert_close(compiled(torch.randn(2, 3, 4)).shape, (2, 3, 3))
    with pytest.raises(
        torch._dynamo.exc.Unsupported, match=re.escape("argument 'x' has shape (6, 5)")
    ):
        compiled(torch.randn(6, 5))
    with pytest.raises(ShapeError, match=re.escape("needs d_in=4")):
        torch.compile(layer, backend="inductor")(torch.randn(6, 5))


@pytest.mark.parametrize(
    "model", [Linear(4, 3), TwoLayerMLP(4, 6, 3), Block()], ids=["Linear", "TwoLayerMLP", "Block"]
)
def test_no_graph_breaks_from_the_checks(model: torch.nn.Module) -> None:
    explained = torch._dynamo.explain(model)(torch.randn(2, 4))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)


def test_other_methods_and_in_place_compile() -> None:
    model = Block()
    score: Callable[[Tensor], Tensor] = torch.compile(model.score, backend="eager", fullgraph=True)
    assert score(torch.ones(3, 4)).tolist() == [[4.0], [4.0], [4.0]]
    unbound: Callable[[Block, Tensor], Tensor] = torch.compile(
        Block.score, backend="eager", fullgraph=True
    )
    assert unbound(model, torch.ones(1, 2)).tolist() == [[2.0]]
    with pytest.raises(torch._dynamo.exc.Unsupported, match="needs 2 dimensions"):
        unbound(model, torch.ones(3))
    model.compile(backend="eager", fullgraph=True)
    assert model(torch.ones(2, 4)).shape == (2, 3)


@typed_flops
def mode_scale(
    x: Float[Tensor, "b d"],
    mode: Literal["double", "half"],
    k: int | None = None,
    names: tuple[str, ...] = (),
) -> Float[Tensor, "b d"]:
    return x * 2 if mode == "double" else x / 2


@typed_flops
def counts(x: Int[Tensor, " n"]) -> Int[Tensor, " n"]:
    return x + 1


def test_non_tensor_hints_compile_in_one_graph() -> None:
    def both(x: Tensor) -> Tensor:
        return mode_scale(x, "double", 3, ("a",)) + mode_scale(x, "half")

    explained = torch._dynamo.explain(both)(torch.ones(2, 3))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    compiled = torch.compile(both, backend="eager", fullgraph=True)
    assert compiled(torch.ones(2, 3)).tolist() == [[2.5] * 3] * 2
    with pytest.raises(ContractError, match=r"argument 'mode' violates its hint"):
        torch.compile(mode_scale, backend="eager")(torch.ones(2, 3), "triple")  # type: ignore[arg-type]


def test_dtype_and_return_errors_under_compile() -> None:
    with pytest.raises(DtypeError, match="argument 'x' has dtype float32"):
        torch.compile(counts, backend="aot_eager")(torch.ones(3))
    with pytest.raises(torch._dynamo.exc.Unsupported, match="argument 'x' has dtype float32"):
        torch.compile(counts, backend="eager", fullgraph=True)(torch.ones(3))

    @typed_flops
    def wrong(x: Float[Tensor, " n"]) -> Float[Tensor, " n+1"]:
        return x

    for dynamic in (None, True):
        with pytest.raises(ShapeError, match=re.escape("the return value has shape (3,)")):
            torch.compile(wrong, backend="eager", dynamic=dynamic)(torch.ones(3))


def test_record_around_a_compiled_module_counts_what_the_eager_module_does() -> None:
    """Under a dispatch mode dynamo runs the frames eagerly (as under FlopCounterMode):
    the rows and counts are the eager module's, and nothing is counted twice."""
    from typedflops import record

    model = Block()
    compiled = torch.compile(model, backend="aot_eager")
    x = torch.randn(5, 4)
    compiled(x)  # compiled outside the recording
    with record() as eager:
        model(x)
        model(x)
    with record() as under_compile:
        compiled(x)
        compiled(x)
    assert under_compile.total.flops == eager.total.flops > 0
    assert under_compile.total.formula == eager.total.formula


def test_bound_methods_estimate_and_give_a_formula_with_their_module_on_meta() -> None:
    model = Block()
    cost = model.score.estimate(n=10, d=4)
    assert (cost.flops, str(cost.formula)) == (40, "d*n")
    forward = model.forward.estimate(n=10)
    assert forward.flops == forward.formula.subs(dict(forward.dims)) > 0
    assert str(model.score.formula) == "d*n"


class Scorer(torch.nn.Module):
    """A plain module over a typed Linear, with a decorated method other than forward."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = Linear(16, 8)

    @typed_flops
    def score(self, q: Float[Tensor, "n d_in"]) -> Float[Tensor, " n"]:
        return self.proj(q).sum(-1)


def test_dims_a_typed_submodule_holds_need_not_be_given() -> None:
    scorer = Scorer()
    cost = scorer.score.estimate(n=10)
    assert cost.dims["d_in"] == 16
    assert str(cost.formula) == "d_out*n*(2*d_in + 1)"
    assert scorer.score.formula == cost.formula
    with pytest.raises(ShapeError, match="d_in"):
        scorer.score(torch.randn(3, 15))
