"""Training-step memory against what a CPU does: the bytes autograd saves, the peak of
forward and backward and of a whole AdamW step (the profiler's allocation events), the
activation formula of a GPT layer against Korthikanti et al. 2022 term by term, and
activation checkpointing (what it keeps, what it runs again)."""

from __future__ import annotations

import dataclasses

import pytest
import sympy
import torch

from typedflops import SpecError
from typedflops.config import disabled
from typedflops.cost.engine.kernels import kernels_of
from typedflops.cost.types import above_one
from typedflops.memory import training_memory
from typedflops.nn import Block, TransformerConfig, TransformerLM
from typedflops.planning.peak import LiveBytes
from typedflops.planning.training import measure_peak, peak_at

b, s, h, a, L = sympy.symbols("batch seq d_model n_heads n_layers")
#: Korthikanti et al. 2022, eq. (1): activation bytes of one GPT layer (16-bit activations,
#: one-byte dropout masks, the attention matrix materialized).
KORTHIKANTI = s * b * h * (34 + 5 * a * s / h)
#: Our dim names of a GPT-2 layer in theirs: d_ff = 4h and d_head = h/a.
GPT_SHAPE = {sympy.Symbol("d_ff"): 4 * h, sympy.Symbol("d_head"): h / a}


def gpt2(
    d_model: int = 64, n_layers: int = 2, vocab: int = 97, **options: object
) -> TransformerConfig:
    return TransformerConfig.gpt2(
        vocab=vocab, context=128, d_model=d_model, n_layers=n_layers, n_heads=4, **options
    )


def llama(d_model: int = 64, n_layers: int = 2, vocab: int = 97) -> TransformerConfig:
    return TransformerConfig.llama(
        vocab=vocab, context=128, d_model=d_model, n_layers=n_layers, n_heads=4, d_ff=160
    )


def model_and_batch(
    config: TransformerConfig, batch: int, seq: int, dtype: torch.dtype = torch.float32
) -> tuple[TransformerLM, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = TransformerLM(config, dtype=dtype)
    ids = torch.randint(0, config.vocab, (batch, seq))
    targets = torch.randint(0, config.vocab, (batch, seq))  # not ids: one storage less
    return model, ids, targets


def saved_bytes(model: TransformerLM, ids: torch.Tensor, targets: torch.Tensor) -> int:
    """Bytes of the storages autograd saves for backward while the loss runs, each storage
    once, the parameters left out."""
    weights = {p.untyped_storage()._cdata for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage._cdata not in weights:
            seen[storage._cdata] = storage.nbytes()
        return tensor

    with disabled(), torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model.loss(ids, targets)
    return sum(seen.values())


def measured_forward_backward(
    model: TransformerLM, ids: torch.Tensor, targets: torch.Tensor
) -> int:
    """The peak of the loss and its backward on the CPU, above what was allocated before
    (after a first run: nothing made once for good is counted)."""

    def step() -> None:
        model.loss(ids, targets).backward()

    with disabled():
        step()
        model.zero_grad(set_to_none=True)
        peak = measure_peak(step)
        model.zero_grad(set_to_none=True)
    return peak


def test_the_instruments_count_a_known_sequence_of_allocations() -> None:
    """The profiler's allocation events (measure_peak) and the count of live storages
    (LiveBytes, which runs on meta in training_memory) give the peak of 4000 + 8000 bytes,
    4000 freed, then 2000 and 12000: 22000 bytes."""

    def allocate() -> tuple[torch.Tensor, ...]:
        first, second = torch.empty(1000), torch.empty(2000)
        del first
        return second, torch.empty(500), torch.empty(3000)

    assert measure_peak(allocate) == 22000
    tracker = LiveBytes()
    with tracker:
        kept = allocate()
    assert tracker.peak == 22000
    assert tracker.live == 4 * (2000 + 500 + 3000)
    del kept
    assert tracker.live == 0


#: The CPU's generator state (``torch.get_rng_state()``) that each checkpointed block keeps
#: to replay its random ops: made outside any op, a CPU tensor whatever the device.
RNG_STATE = 5056
#: The einsum kernel's ``scores * scale``: autograd keeps the Python float as an 8-byte CPU
#: tensor, made outside any op.
SCALE = 8

#: Configs, sizes, and the bytes at the measured peak that no op made (see above).
PEAK_CASES = {
    "gpt2": (gpt2(), 4, 64, 0),
    "gpt2, einsum attention, dropout": (gpt2(kernel="einsum", dropout=0.1), 4, 64, 2 * SCALE),
    "gpt2, checkpointed blocks": (gpt2(checkpoint=True, n_layers=3), 4, 64, RNG_STATE),
    "llama": (llama(), 4, 64, 0),
    "gpt2, large vocabulary": (gpt2(d_model=128, vocab=8000), 2, 64, 0),
}


@pytest.mark.parametrize("case", list(PEAK_CASES))
def test_activation_bytes_and_peak_are_what_a_cpu_saves_and_allocates(case: str) -> None:
    """In float32 on a CPU, the dry run's activation bytes are the bytes autograd saves in
    a real run, and the peak of forward and backward found on meta is the profiler's, to
    the byte (the gradients, and the temporaries backward makes, counted as they live),
    but for the CPU tensors that no op makes: the two einsum layers' scales, kept for
    backward, and the checkpointed block's generator state."""
    config, batch, seq, made_by_no_op = PEAK_CASES[case]
    model, ids, targets = model_and_batch(config, batch, seq)
    memory = training_memory(model, None, batch=batch, seq=seq)
    measured = measured_forward_backward(model, ids, targets)
    assert measured - memory.forward_backward == made_by_no_op
    assert memory.peak == memory.bytes["parameters"] + memory.forward_backward
    if not config.checkpoint:  # checkpointed regions save through hooks of their own
        assert memory.bytes["activations"] == saved_bytes(model, ids, targets)


def test_in_bfloat16_a_cpu_keeps_the_layer_norm_statistics_in_bfloat16() -> None:
    """A CPU keeps LayerNorm's mean and rstd in the input's dtype, a GPU (and meta) in
    float32: the dry run of a CPU model keeps them as the CPU does, the same model on meta
    costed for a GPU as the GPU does: 2 statistics x 2 bytes more per token for each of the
    2 * n_layers + 1 norms, and nothing else differs."""
    config = gpt2(kernel="einsum", dropout=0.1)
    model, ids, targets = model_and_batch(config, 2, 32, torch.bfloat16)
    cost = model.loss_estimate(batch=2, seq=32)
    assert cost.activation_bytes == saved_bytes(model, ids, targets)
    on_meta = TransformerLM(config, device="meta", dtype=torch.bfloat16)
    with kernels_of("cuda"):
        gpu = on_meta.loss_estimate(batch=2, seq=32)
    assert gpu.activation_bytes - cost.activation_bytes == 2 * 2 * 2 * 32 * 5


@pytest.mark.parametrize(
    ("config", "batch", "seq", "every_term_over_measured"),
    [
        # Activations dominate: gradients made while they are freed are counted twice.
        (gpt2(d_model=128, n_layers=4), 4, 64, (1.1, 1.2)),
        # Parameters dominate: the optimizer's step is the peak, with a temporary.
        (gpt2(d_model=128, vocab=2000), 1, 8, (0.75, 0.9)),
    ],
    ids=["activations dominate", "parameters dominate"],
)
def test_the_peak_of_an_adamw_step_is_the_measured_one(
    config: TransformerConfig,
    batch: int,
    seq: int,
    every_term_over_measured: tuple[float, float],
) -> None:
    """A whole step (forward, backward, AdamW with torch's foreach implementation, gradients
    set to None) with the optimizer's state already made: the parameters and moments held
    plus the profiler's peak is training_memory's peak, but for 12 bytes (the CPU's foreach
    fallback wraps two scalars in tensors while the square roots of the moments are held).
    Every term held at once (``total``) is off by more than 10%, either way."""
    model, ids, targets = model_and_batch(config, batch, seq)
    optimizer = torch.optim.AdamW(model.parameters(), foreach=True)

    def step() -> None:
        model.loss(ids, targets).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    with disabled():
        step()
        moments = [m for state in optimizer.state.values() for m in state.values() if m.dim()]
        held = sum(p.nbytes for p in model.parameters()) + sum(m.nbytes for m in moments)
        measured = held + measure_peak(step)
    memory = training_memory(model, "adamw", batch=batch, seq=seq)
    assert held == memory.bytes["parameters"] + memory.bytes["optimizer"]
    assert 0 <= measured - memory.peak <= 12
    low, high = every_term_over_measured
    assert low < memory.total / measured < high


def test_a_gpt_layer_against_korthikanti_term_by_term() -> None:
    """One layer of a Megatron-style GPT (LayerNorm, GELU MLP of 4h, dropout, attention
    materialized, 16-bit activations): the activation formula's n_layers coefficient is
    Korthikanti's 34sbh + 5as^2b plus two terms they leave out:
    - 16sb: each LayerNorm's mean and rstd, float32 per token (2 norms x 2 x 4 bytes);
    - s^2: the causal mask (one byte per pair of positions) masked_fill keeps, made per
      layer here, where Megatron shares one across layers.
    Their other terms are ours one for one: the LayerNorms' inputs (4sbh), the QKV
    projection's input (2sbh), Q, K and V (6sbh: QK^T keeps Q and K, the product with V
    keeps V), the output projection's input (2sbh), the softmax output, its dropout mask
    and the dropout's output (5as^2b), the MLP's input, the GELU's input and output
    (2 + 8 + 8 sbh), the two dropout masks (2sbh)."""
    model = TransformerLM(gpt2(kernel="einsum", dropout=0.1), device="meta", dtype=torch.bfloat16)
    cost = model.loss_estimate(batch=2, seq=32)
    # (at seq 1 and batch 1 torch keeps other storages: the formula has its parts there)
    formula = above_one(cost.activation_formula).xreplace(GPT_SHAPE)
    per_layer = sympy.expand(sympy.diff(formula, L))
    assert sympy.expand(per_layer - KORTHIKANTI) == 16 * s * b + s**2


def test_a_gpt_layer_on_the_fused_attention_kernel_against_korthikanti() -> None:
    """The same layer at dropout 0 through F.scaled_dot_product_attention (the CPU's flash
    kernel): no dropout masks (-2sbh), no s x s matrix kept (-5as^2b) but a float32
    log-sum-exp per query and head (+4asb), and the LayerNorms' statistics, which a CPU
    keeps in bfloat16 (+8sb; a GPU's float32, 16sb)."""
    model = TransformerLM(gpt2(), dtype=torch.bfloat16)  # on a CPU: its flash kernel
    cost = model.loss_estimate(batch=2, seq=32)
    per_layer = sympy.expand(sympy.diff(cost.activation_formula.xreplace(GPT_SHAPE), L))
    difference = -2 * s * b * h - 5 * a * s**2 * b + 4 * a * s * b + 8 * s * b
    assert sympy.expand(per_layer - KORTHIKANTI - difference) == 0


def test_checkpointing_keeps_each_blocks_input_and_runs_its_forward_again() -> None:
    """With ``checkpoint=True`` each block keeps only its input (4bsh bytes in float32)
    instead of its activations, and backward runs every block's forward again up to the
    last tensor it saves: n_layers times a block's forward less that tail, exactly, and
    nothing else changes (forward, backward and matmul FLOPs are those of the plain
    model)."""
    config = gpt2(n_layers=3)
    with torch.device("meta"):
        plain = TransformerLM(config).loss_estimate(batch=2, seq=32)
        redone = TransformerLM(dataclasses.replace(config, checkpoint=True)).loss_estimate(
            batch=2, seq=32
        )
        block = Block(config).estimate(batch=2, seq=32)
    kept = block.activation_formula - 4 * b * s * h
    assert sympy.expand(plain.activation_formula - redone.activation_formula - L * kept) == 0
    assert redone.activation_bytes < plain.activation_bytes
    # backward runs each block again up to its last saved tensor: all but the MLP's
    # second product and the two adds after it (torch's early stop)
    tail = 2 * b * s * sympy.Symbol("d_ff") * h + 2 * b * s * h
    assert sympy.expand(redone.recompute_formula - L * (block.formula - tail)) == 0
    assert redone.recompute_flops == 3 * (block.flops - 2 * 2 * 32 * 64 * (256 + 1))
    assert plain.recompute_flops == 0
    assert (redone.flops, redone.backward_flops) == (plain.flops, plain.backward_flops)
    assert redone.matmul_formula == plain.matmul_formula


def test_checkpointing_lowers_the_measured_peak_as_predicted() -> None:
    """On a CPU, the checkpointed model's forward-and-backward peak is lower, and both are
    the ones found on meta (the recomputed block's activations are held while its
    backward runs, and counted), but for the generator state a checkpoint keeps."""
    peaks = {}
    for checkpoint in (False, True):
        config = gpt2(n_layers=4, checkpoint=checkpoint)
        model, ids, targets = model_and_batch(config, 4, 64)
        memory = training_memory(model, None, batch=4, seq=64)
        peaks[checkpoint] = measured_forward_backward(model, ids, targets)
        assert peaks[checkpoint] - memory.forward_backward == (RNG_STATE if checkpoint else 0)
    assert peaks[True] < 0.6 * peaks[False]


def test_training_memory_terms_per_parameter() -> None:
    """float32 AdamW: 4 bytes each for the parameter, its gradient and its two moments;
    bfloat16 (mixed precision): 2 + 2, and fp32 moments and master copy, 12: 16 in all."""
    model = TransformerLM(gpt2())
    fp32 = training_memory(model, "adamw", batch=2, seq=8)
    n = fp32.parameters.trainable
    assert n == fp32.parameters.total == sum(p.numel() for p in model.parameters())
    assert (fp32.bytes["parameters"], fp32.bytes["gradients"]) == (4 * n, 4 * n)
    assert (fp32.bytes["optimizer"], fp32.bytes["master_weights"]) == (8 * n, 0)
    mixed = training_memory(model, "adamw", torch.bfloat16, batch=2, seq=8)
    assert (mixed.bytes["parameters"], mixed.bytes["gradients"]) == (2 * n, 2 * n)
    assert (mixed.bytes["optimizer"], mixed.bytes["master_weights"]) == (8 * n, 4 * n)
    for memory in (fp32, mixed):
        terms = {k: v for k, v in memory.bytes.items() if k != "total"}
        assert memory.total == sum(terms.values())
        at_dims = {sympy.Symbol(k): v for k, v in memory.dims.items()}
        for key, formula in memory.formulas.items():
            assert sympy.sympify(formula).xreplace(at_dims) == memory.bytes[key], key
    sgd = training_memory(model, "sgd", batch=2, seq=8)
    assert sgd.bytes["optimizer"] == 0
    assert sgd.peak == sgd.bytes["parameters"] + sgd.forward_backward


def test_without_master_weights_the_optimizer_state_has_the_parameters_dtype() -> None:
    """A bfloat16 model stepped by torch's AdamW itself (no fp32 master copy): torch keeps
    the two moments in bfloat16, 4 bytes per parameter, and the plan holds exactly what
    the optimizer made; the peak adds one temporary of the moments' size to the step."""
    model, ids, targets = model_and_batch(gpt2(), 2, 8, torch.bfloat16)
    optimizer = torch.optim.AdamW(model.parameters(), foreach=True)
    with disabled():
        model.loss(ids, targets).backward()
        optimizer.step()
    moments = [m for state in optimizer.state.values() for m in state.values() if m.dim()]
    assert {m.dtype for m in moments} == {torch.bfloat16}
    memory = training_memory(model, "adamw", torch.bfloat16, master_weights=False, batch=2, seq=8)
    n = memory.parameters.trainable
    assert memory.bytes["optimizer"] == sum(m.nbytes for m in moments) == 4 * n
    assert memory.bytes["master_weights"] == 0
    at_dims = {sympy.Symbol(k): v for k, v in memory.dims.items()}
    assert memory.formulas["optimizer"].xreplace(at_dims) == 4 * n
    held = memory.bytes["parameters"] + memory.bytes["optimizer"]
    assert memory.peak == held + max(memory.forward_backward, memory.bytes["gradients"] + 2 * n)


def test_the_peak_at_another_batch_is_that_batchs_peak() -> None:
    """peak_at (the plot's peak line) reruns only forward and backward: at batch 6 it is
    training_memory's peak at batch 6, for AdamW and for SGD (no optimizer temporary)."""
    model = TransformerLM(gpt2())
    for optimizer in ("adamw", "sgd"):
        memory = training_memory(model, optimizer, batch=2, seq=16)
        other = training_memory(model, optimizer, batch=6, seq=16)
        assert peak_at(model, memory, batch=6, seq=16) == other.peak != memory.peak


def test_the_printed_memory_is_a_narrow_table_then_each_formula_whole() -> None:
    """str(memory): the figures in a table that fits 100 columns, what the peak assumes and
    the kernels costed, then one line per term, ``  name: formula``, whose formula is the
    term's, unwrapped, whatever its length."""
    model = TransformerLM(gpt2(), device="cpu")
    memory = training_memory(model, "adamw", torch.bfloat16, batch=2, seq=8)
    lines = str(memory).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("formulas, in "))
    assert all(len(line) <= 100 for line in lines[:start])
    notes = next(i for i, line in enumerate(lines) if line.startswith("peak: "))
    assert " ".join(line.strip() for line in lines[notes:start]) == " ".join(memory.notes())
    assert memory.kernels == "cpu"  # a model on the CPU: the CPU's kernels
    assert [line.split()[0] for line in lines[2:notes]] == [
        "parameters",
        "gradients",
        "optimizer",
        "master",
        "activations",
        "total",
        "peak",
    ]
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("    "))
    dims = ", ".join(f"{name}={size}" for name, size in memory.dims.items())
    assert " ".join(line.strip() for line in lines[start:end]) == f"formulas, in {dims}:"
    assert all(len(line) <= 100 for line in lines[start:end])
    shown = dict(line.strip().split(": ", 1) for line in lines[end:])
    keys = [key for key in memory.formulas if key != "total"] + ["total"]
    assert list(shown) == [key.replace("_", " ") for key in keys]
    for key in keys:
        assert sympy.expand(sympy.sympify(shown[key.replace("_", " ")]) - memory.formulas[key]) == 0


def test_training_memory_refuses_an_unknown_optimizer() -> None:
    with pytest.raises(SpecError, match=r"unknown optimizer 'lion'; known: adagrad, adam, "):
        training_memory(TransformerLM(gpt2()), "lion", batch=2, seq=8)
