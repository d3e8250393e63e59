"""Kernels torch tags as seeded (random numbers inside) that compute more than random
values: counted as what they compute, or listed uncounted, never 0; and an op's in-place
form counts as its out-of-place one whatever its tags."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from typedflops import record
from typedflops.cost.engine.rules import FREE, find_rule

aten = torch.ops.aten


def _forward(run: Callable[[], object]) -> tuple[int, tuple[str, ...]]:
    with record() as rec:
        run()
    return rec.total.flops, rec.total.uncounted


@pytest.mark.parametrize("training", [True, False])
def test_rrelu_in_place_counts_as_rrelu(training: bool) -> None:
    """``nn.RReLU(inplace=True)`` runs ``rrelu_with_noise_``, tagged seeded: it counted 0
    where ``rrelu_with_noise`` counts a compare a value."""
    x = torch.randn(4, 8)
    out_of_place = _forward(lambda: F.rrelu(x, training=training))
    in_place = _forward(lambda: nn.RReLU(inplace=True).train(training)(x.clone()))
    assert out_of_place == in_place == (32, ())


def test_the_older_fused_dropout_counts_as_native_dropout() -> None:
    """``_fused_dropout``: the mask's multiply and the scale's, 2 a value, as
    ``native_dropout`` (it counted 0)."""
    x = torch.empty(4, 8, device="meta")
    assert _forward(lambda: aten._fused_dropout(x, 0.5)) == (64, ())
    assert _forward(lambda: aten.native_dropout(x, 0.5, True)) == (64, ())


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode])
def test_dropout_not_training_hands_back_its_input_and_moves_no_bytes(
    mode: Callable[[], Any],
) -> None:
    """Under ``inference_mode`` torch runs ``aten.dropout`` itself, which, not training,
    hands back its input: no bytes (it counted 256 read and written); an op that hands back
    what it wrote (``zero_``) writes its bytes."""
    x = torch.randn(4, 16)
    with mode(), record() as rec:
        out = nn.Dropout(0.1).eval()(x)
    assert out is x
    assert (rec.total.flops, rec.total.bytes_read, rec.total.bytes_written) == (0, 0, 0)
    with record() as rec:
        x.zero_()
    assert rec.total.bytes_written == 4 * 16 * 4


def test_flash_attention_into_an_output_counts_as_flash_attention() -> None:
    """``varlen_attn_out``'s kernel writes the flash forward into a given tensor: counted as
    the flash forward, 4·s²·d a head a sequence (two sequences of 16, 4 heads, d 8)."""
    heads, seq, d = 4, 16, 8
    q, k, v = (torch.empty(2 * seq, heads, d, device="meta") for _ in range(3))
    starts = torch.tensor([0, seq, 2 * seq], dtype=torch.int32, device="meta")
    into = _forward(
        lambda: aten._flash_attention_forward_no_dropout_inplace(
            torch.empty_like(q), q, k, v, starts, starts, seq, seq, 0.0, False, False
        )
    )
    flash = _forward(
        lambda: aten._flash_attention_forward(q, k, v, starts, starts, seq, seq, 0.0, False, False)
    )
    assert into == flash == (2 * heads * 4 * seq * seq * d, ())


def test_an_amd_gpus_recurrent_kernel_is_named_not_zero() -> None:
    assert find_rule(aten.miopen_rnn.default) is None
    assert find_rule(aten.bernoulli.default) is FREE  # (random values alone: 0)


def test_every_seeded_op_of_torch_is_counted_named_or_random_values_alone() -> None:
    """Each ``aten`` op tagged seeded that a dispatch mode can see (not a composite torch
    splits before any mode sees it) has a rule, is listed uncounted, or makes random values
    alone: a new seeded kernel in torch shows up here."""
    making = {"bernoulli", "cauchy", "exponential", "geometric", "log_normal", "normal"}
    making |= {"poisson", "rand", "randint", "randn", "randperm", "uniform", "multinomial"}
    making |= {"_standard_gamma", "normal_functional", "rand_like", "randint_like"}
    making |= {"randn_like", "bernoulli_", "cauchy_", "exponential_", "geometric_"}
    making |= {"log_normal_", "normal_", "uniform_", "random", "random_", "binomial"}
    making |= {"_sample_dirichlet", "_fill_mem_eff_dropout_mask_", "_cudnn_init_dropout_state"}
    making |= {"_fused_sdp_choice"}  # (which kernel to run: a number)
    free: list[str] = []
    for full in torch._C._dispatch_get_all_op_names():
        namespace, _, rest = full.partition("::")
        name, _, overload = rest.partition(".")
        if namespace != "aten" or name in making:
            continue
        op = getattr(getattr(aten, name), overload or "default")
        if torch.Tag.nondeterministic_seeded not in op.tags:
            continue
        if torch._C._dispatch_has_kernel_for_dispatch_key(full, "CompositeImplicitAutograd"):
            continue
        if find_rule(op) is FREE:
            free.append(full)
    assert free == []
    assert find_rule(aten._lstm_mps.default) is None
