"""A training step of a ``typedflops.nn.TransformerLM`` measured beside the planner's figures.

For a named config (or a small one) on a device, prints side by side:

- activation bytes: what autograd saves in a real forward (``saved_tensors_hooks``, each
  storage once, parameters left out) against ``Cost.activation_bytes`` of the dry run;
- peak memory of forward and backward above the parameters (CUDA:
  ``torch.cuda.max_memory_allocated``; CPU: the profiler's allocation events) against the
  peak found on ``meta`` (``TrainingMemory.forward_backward``) and against activations +
  gradients; in float32, the peak of a whole AdamW step (``foreach``; parameters and
  optimizer state held) against ``TrainingMemory.peak`` and ``.total`` (every term at once);
- the time of forward and backward (eager with the checks off, and ``torch.compile``d)
  against the compute bound (step FLOPs at the promised peak), the bandwidth bound of the
  least traffic (weights read twice, gradients written, saved activations written and read)
  and of every op's traffic unfused, and the MFU in PaLM's definition.

    python benchmarks/training_step.py --model gpt2 --batch 8 --seq 1024 --dtype bfloat16
    python benchmarks/training_step.py --small --device cpu --dtype float32
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from collections.abc import Callable

import torch

from typedflops import devices
from typedflops.config import disabled
from typedflops.cost.engine.kernels import kernels_of
from typedflops.nn import CONFIGS, TransformerConfig, TransformerLM
from typedflops.planning.steptime import step_mfu
from typedflops.planning.training import measure_peak, training_memory
from typedflops.text import text_table

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
_SMALL = TransformerConfig.gpt2(vocab=1000, context=256, d_model=256, n_layers=4, n_heads=4)


def saved_bytes(model: torch.nn.Module, step: Callable[[], torch.Tensor]) -> int:
    """Bytes of the storages autograd saves while ``step()`` runs, each once, parameters
    left out."""
    weights = {p.untyped_storage()._cdata for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage._cdata not in weights:
            seen[storage._cdata] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        step()
    return sum(seen.values())


def timed(run: Callable[[], None], device: torch.device, steps: int) -> float:
    """The median seconds of ``steps`` runs after three warm-up runs."""
    for _ in range(3):
        run()
    times = []
    for _ in range(steps):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        run()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gpt2", choices=list(CONFIGS))
    parser.add_argument("--small", action="store_true", help="a 4-layer d_model 256 model")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--dtype", default="bfloat16", choices=list(_DTYPES))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--spec", default=None, help='device-table name ("H100 SXM")')
    parser.add_argument("--kernel", default=None, choices=["sdpa", "einsum"])
    parser.add_argument("--dropout", type=float, default=None)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--compile", action="store_true", help="also time torch.compile")
    args = parser.parse_args()
    dtype, device = _DTYPES[args.dtype], torch.device(args.device)
    config = _SMALL if args.small else CONFIGS[args.model]
    if args.kernel is not None:
        config = dataclasses.replace(config, kernel=args.kernel)
    if args.dropout is not None:
        config = dataclasses.replace(config, dropout=args.dropout)
    name = ("small" if args.small else args.model) + f" ({config.kernel}, dropout {config.dropout})"
    batch, seq = args.batch, args.seq

    with torch.device("meta"):
        meta = TransformerLM(config, dtype=dtype)
    nvidia = device.type == "cuda" and not torch.version.hip
    gpu = torch.cuda.get_device_capability(device) if nvidia else None
    with kernels_of(device.type, gpu):
        plain = training_memory(meta, None, dtype, master_weights=False, batch=batch, seq=seq)
        adamw = training_memory(meta, "adamw", dtype, master_weights=False, batch=batch, seq=seq)
    cost, predicted = plain.cost, plain.bytes

    torch.manual_seed(0)
    model = TransformerLM(config, device=device, dtype=dtype)
    ids = torch.randint(0, config.vocab, (batch, seq), device=device)
    targets = torch.randint(0, config.vocab, (batch, seq), device=device)

    def forward_backward() -> None:
        model.loss(ids, targets).backward()

    with disabled():
        saved = saved_bytes(model, lambda: model.loss(ids, targets))
        forward_backward()  # warm-up: kernels chosen, workspaces made
        model.zero_grad(set_to_none=True)
        peak = measure_peak(forward_backward, device)
        model.zero_grad(set_to_none=True)
        rows: list[tuple[str, int, int]] = [
            ("activation bytes", saved, predicted["activations"]),
            ("forward+backward: peak on meta", peak, plain.forward_backward),
            ("  activations + gradients", peak, predicted["activations"] + predicted["gradients"]),
        ]
        if dtype == torch.float32:
            optimizer = torch.optim.AdamW(model.parameters(), foreach=True)

            def full_step() -> None:
                forward_backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

            full_step()  # the optimizer's state now exists
            held = sum(p.nbytes for p in model.parameters()) + sum(
                t.nbytes
                for state in optimizer.state.values()
                for t in state.values()
                if isinstance(t, torch.Tensor) and t.device.type == device.type
            )
            measured = held + measure_peak(full_step, device)
            rows.append(("AdamW step: peak", measured, adamw.peak))
            rows.append(("  every term at once", measured, adamw.total))
            del optimizer
    print(f"{name} batch {batch} seq {seq} {args.dtype} on {device}")
    print(
        text_table(
            ["memory", "measured B", "predicted B", "predicted/measured"],
            [[label, f"{m:,}", f"{p:,}", f"{p / m:.3f}"] for label, m, p in rows],
            right={1, 2, 3},
        )
    )

    spec = devices.lookup(args.spec) if args.spec else devices.device_spec(device)
    peak_flops = devices.peak_flops(dtype, spec) if spec is not None else None
    times = []
    with disabled():
        times.append(("eager", timed(forward_backward, device, args.steps)))
        if args.compile:
            compiled = torch.compile(model)
            loss_fn = torch.nn.functional.cross_entropy

            def compiled_step() -> None:
                logits = compiled(ids)
                loss_fn(logits.flatten(0, 1), targets.flatten()).backward()

            times.append(("compiled", timed(compiled_step, device, args.steps)))
    step_flops = cost.flops + cost.backward_flops
    least = 2 * predicted["parameters"] + predicted["gradients"] + 2 * predicted["activations"]
    unfused = 3 * cost.bytes
    bounds = [
        ["step FLOPs", f"{step_flops:.4g}", ""],
        ["model FLOPs", f"{3 * cost.matmul_flops:.4g}", ""],
    ]
    if spec is not None and peak_flops:
        bounds.append(["compute bound", f"{step_flops / peak_flops * 1e3:.3f}", "ms"])
        if spec.bandwidth:
            for label, moved in (("least traffic", least), ("unfused traffic", unfused)):
                bounds.append(
                    [f"{label} {moved / 1e9:.2f} GB", f"{moved / spec.bandwidth * 1e3:.3f}", "ms"]
                )
    for label, seconds in times:
        mfu = step_mfu(cost, seconds, spec, dtype) if spec is not None and peak_flops else 0.0
        bounds.append([f"measured {label}", f"{seconds * 1e3:.3f}", f"ms, MFU {mfu:.1%}"])
    where = f"{spec.name}: peak {peak_flops:.4g} FLOP/s" if spec and peak_flops else "no peak"
    print(f"forward+backward time ({where})")
    print(text_table(["", "value", ""], bounds, right={1}))


if __name__ == "__main__":
    main()
