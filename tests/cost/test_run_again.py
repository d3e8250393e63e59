"""A ``torch.utils.checkpoint`` region (non-reentrant, ``early_stop`` on by default) runs its
forward again in backward only up to the last tensor it saves: ``recompute_flops`` counts
those ops, in a record with or without the backward, inside a decorated call or not, and in
an estimate; with ``early_stop`` off, the whole region.

Hand counts: ``Linear(16, 32) -> relu -> Linear(32, 4)`` at batch 8 runs 2·8·16·32 = 8,192
FLOPs in its first product, 256 in the relu and 2·8·32·4 = 2,048 in its second (10,496).
The second product's inputs are saved before it runs, and nothing is saved after: backward
runs the first product and the relu again (8,448), not the second.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import pytest
import torch
from jaxtyping import Float
from torch import Tensor, nn
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
    set_checkpoint_early_stop,
)
from torch.utils.flop_counter import FlopCounterMode

import typedflops
from typedflops import Recorder, record, typed_flops
from typedflops.cost.engine.recorder import torch_counts
from typedflops.nn import Block as TransformerBlock
from typedflops.nn import TransformerConfig, TransformerLM
from typedflops.planning import kernels_of

UP, RELU, DOWN = 2 * 8 * 16 * 32, 8 * 32, 2 * 8 * 32 * 4
FORWARD = UP + RELU + DOWN
# the products of the input's and the weights' gradients, the relu's, the biases' sums
BACKWARD = 2 * UP + RELU + 8 * 32 + 2 * DOWN + 8 * 4


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(16, 32)
        self.down = nn.Linear(32, 4)

    def body(self, x: Tensor) -> Tensor:
        out: Tensor = self.down(torch.relu(self.up(x)))
        return out

    @typed_flops
    def forward(self, x: Float[Tensor, "n 16"]) -> Float[Tensor, "n 4"]:
        out: Tensor = checkpoint(self.body, x, use_reentrant=False)
        return out


torch.manual_seed(0)
BLOCK = Block()


def _both(run: Callable[[], object]) -> tuple[Recorder, int]:
    with FlopCounterMode(display=False) as counter:
        run()
    with record() as rec:
        run()
    return rec, int(counter.get_total_flops())


def _step(x: Tensor) -> None:
    BLOCK(x).sum().backward()


def test_a_region_runs_again_up_to_its_last_saved_tensor() -> None:
    x = torch.randn(8, 16, requires_grad=True)
    rec, counted = _both(lambda: _step(x))
    total = rec.total
    assert (total.flops - 8 * 4, total.backward_flops, total.recompute_flops) == (
        FORWARD,
        BACKWARD,
        UP + RELU,
    )
    assert total.exact and str(total.recompute_formula) == "1056*n"
    # FlopCounterMode: the products of the forward, of its first layer again, of backward
    assert counted == sum(torch_counts(rec.session.root)) == UP + DOWN + UP + 2 * UP + 2 * DOWN


def test_the_prediction_without_a_backward_and_an_estimate_agree_with_the_run() -> None:
    with record() as rec:
        BLOCK(torch.randn(8, 16, requires_grad=True))
    assert rec.total.recompute_flops == UP + RELU
    cost = typedflops.estimate(BLOCK, n=8, grad=("x",))
    assert (cost.flops, cost.backward_flops, cost.recompute_flops) == (FORWARD, BACKWARD, UP + RELU)
    assert cost.exact


def test_undecorated_code_and_several_regions_are_counted_alike() -> None:
    layers = [nn.Linear(16, 16) for _ in range(3)]

    def run() -> None:
        x = torch.randn(8, 16, requires_grad=True)
        for layer in layers:
            x = checkpoint(lambda t, layer=layer: torch.tanh(layer(t)), x, use_reentrant=False)
        x.sum().backward()

    rec, counted = _both(run)
    product, tanh = 2 * 8 * 16 * 16, 8 * 16
    # tanh saves its output after it runs: each region runs whole again
    assert rec.total.recompute_flops == 3 * (product + tanh)
    assert counted == sum(torch_counts(rec.session.root))
    with record() as forward_only:
        x = torch.randn(8, 16, requires_grad=True)
        for layer in layers:
            x = checkpoint(lambda t, layer=layer: torch.tanh(layer(t)), x, use_reentrant=False)
    assert forward_only.total.recompute_flops == 3 * (product + tanh)


def test_a_region_that_saves_nothing_after_its_product_runs_nothing_again() -> None:
    w = torch.randn(16, 16, requires_grad=True)

    def run() -> None:
        x = torch.randn(8, 16, requires_grad=True)
        checkpoint(lambda t: t @ w + t, x, use_reentrant=False).sum().backward()

    rec, counted = _both(run)
    assert rec.total.recompute_flops == 0
    assert counted == sum(torch_counts(rec.session.root)) == 3 * 2 * 8 * 16 * 16


@pytest.mark.parametrize("decorated", [True, False])
def test_without_early_stop_the_whole_region_runs_again(decorated: bool) -> None:
    x = torch.randn(8, 16, requires_grad=True)

    def run() -> None:
        with set_checkpoint_early_stop(False):
            if decorated:
                _step(x)
            else:
                checkpoint(BLOCK.body, x, use_reentrant=False).sum().backward()

    rec, counted = _both(run)
    assert rec.total.recompute_flops == FORWARD
    assert counted == sum(torch_counts(rec.session.root))
    with set_checkpoint_early_stop(False), record() as forward_only:
        BLOCK(x)
    assert forward_only.total.recompute_flops == FORWARD


def test_a_checkpointed_transformer_runs_again_what_its_estimate_says() -> None:
    config = TransformerConfig.gpt2(vocab=97, context=16, d_model=32, n_layers=2, n_heads=4)
    model = TransformerLM(dataclasses.replace(config, checkpoint=True))
    ids = torch.randint(0, 97, (2, 16))

    def run() -> None:
        model.loss(ids, ids).backward()

    rec, counted = _both(run)
    total = rec.total
    assert counted == sum(torch_counts(rec.session.root))
    # the blocks' calls run again in backward are not rows of their own
    assert [row.function for row in rec.calls] == ["TransformerLM.loss"]
    # what ran again in the backward is the prediction, which the estimate's formula gives
    assert total.recompute.exact
    with torch.device("meta"), kernels_of("cpu"):
        estimated = TransformerLM(dataclasses.replace(config, checkpoint=True)).loss_estimate(
            batch=2, seq=16
        )
        block = TransformerBlock(config).estimate(batch=2, seq=16)
    assert total.recompute_flops == estimated.recompute_flops
    tail = 2 * 2 * 16 * 32 * (128 + 1)  # the MLP's second product, the adds after it
    assert total.recompute_flops == 2 * (block.flops - tail)


def test_a_region_inside_a_region_runs_again_inside_it() -> None:
    w = torch.randn(32, 4, requires_grad=True)

    def inner(t: Tensor) -> Tensor:
        out: Tensor = checkpoint(BLOCK.up, t, use_reentrant=False)
        return torch.relu(out) @ w

    def run() -> None:
        x = torch.randn(8, 16, requires_grad=True)
        checkpoint(inner, x, use_reentrant=False).sum().backward()

    rec, counted = _both(run)
    assert counted == sum(torch_counts(rec.session.root))
    # the outer region runs the inner one and the relu again (its product's inputs are its
    # last save); the inner one's only saves are its product's inputs: nothing again
    assert rec.total.recompute_flops == UP + RELU


def test_a_block_repeated_inside_a_region_runs_again_where_its_own_ops_fall() -> None:
    # d_ff == d_model: the MLP's first product is the same call as the attention's output
    # projection (same module shape, same input), inside the same checkpointed region. A
    # copy of the first call's events would not say where its saves fall in the region.
    config = TransformerConfig.gpt2(vocab=97, context=16, d_model=32, n_layers=1, n_heads=4)
    config = dataclasses.replace(config, checkpoint=True, d_ff=32)
    model = TransformerLM(config)
    ids = torch.randint(0, 97, (2, 16))
    with record() as rec:
        model.loss(ids, ids).backward()
    with kernels_of("cpu"):
        estimated = TransformerLM(config).loss_estimate(batch=2, seq=16)
    assert rec.total.recompute_flops == estimated.recompute_flops == 414_720


def _save_products(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
    if op is torch.ops.aten.addmm.default:
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


class _Selective(nn.Module):
    """``Block``'s body checkpointed selectively: the products' outputs kept."""

    def __init__(self, early_stop: bool) -> None:
        super().__init__()
        self.block = Block()
        self.early_stop = early_stop

    def forward(self, x: Tensor) -> Tensor:
        contexts = functools.partial(create_selective_checkpoint_contexts, _save_products)
        with set_checkpoint_early_stop(self.early_stop):
            out: Tensor = checkpoint(self.block.body, x, use_reentrant=False, context_fn=contexts)
        return out


@pytest.mark.parametrize("early_stop", [True, False])
def test_selective_checkpointing_runs_again_only_what_its_policy_did_not_keep(
    early_stop: bool,
) -> None:
    # The first product's output is kept: backward takes it from the storage, and runs the
    # relu alone again (with early_stop off too: the second product is kept as well).
    model = _Selective(early_stop)
    cost = typedflops.estimate(model, Float[Tensor, "n d"], n=8, d=16, grad=("x",))
    assert (cost.flops, cost.backward_flops, cost.recompute_flops) == (FORWARD, BACKWARD, RELU)
    assert cost.exact
    x = torch.randn(8, 16, requires_grad=True)
    with record() as predicted:
        model(x)
    assert (predicted.total.recompute_flops, predicted.total.exact) == (RELU, True)
    rec, counted = _both(lambda: model(x).sum().backward())
    assert (rec.total.recompute_flops, rec.total.exact) == (RELU, True)
    # FlopCounterMode: the forward's products and backward's, none run again
    assert counted == sum(torch_counts(rec.session.root)) == UP + DOWN + 2 * UP + 2 * DOWN
