"""Checks that need a CUDA device, printed side by side (needs a GPU; exits 0 without one).

1. Counts against FlopCounterMode on the kernels that ran: SDPA's flash, memory-efficient,
   cuDNN and math kernels, forward and backward, and a GPT-2-style LM's training step.
2. Training memory: ``typedflops.memory.training_memory`` against
   ``torch.cuda.max_memory_allocated`` over a training step.
3. ``torch.compile`` (inductor) of a typed module on the GPU: outputs, and a broken call's
   ShapeError.
4. The attention kernel a dry run assumes for a GPU of this one's compute capability when
   none is present (torch's priority order and filters there: cuDNN first on sm90 and
   sm100) against the one torch picks on this GPU, over dtypes, head sizes, masks, grouped
   heads and training; and the one a dry run here asks torch for with small tensors.
5. cuDNN attention on meta against the GPU: the tensors it keeps for backward.

Run: ``python benchmarks/gpu_checks.py``
"""

from __future__ import annotations

import contextlib
import itertools

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from typedflops import ShapeError, record
from typedflops.cost.engine.recorder import torch_counts
from typedflops.memory import training_memory
from typedflops.nn import TransformerConfig, TransformerLM

KERNELS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "math": SDPBackend.MATH,
}


def attention_parity() -> None:
    print("SDPA on cuda, bf16 (4, 8, 256, 64), causal: forward and backward FLOPs")
    for name, backend in KERNELS.items():
        q, k, v = (
            torch.randn(4, 8, 256, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            for _ in range(3)
        )
        try:
            with sdpa_kernel(backend), FlopCounterMode(display=False) as theirs:
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                out.sum().backward()
            with sdpa_kernel(backend), record() as ours:
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            counted = torch_counts(ours.session.root)
        except RuntimeError as exc:
            print(f"  {name:9s} not available here: {str(exc).splitlines()[0][:80]}")
            continue
        fcm = theirs.get_total_flops()
        print(
            f"  {name:9s} FlopCounterMode {fcm:>14,}  typedflops (its ops, fwd+bwd) "
            f"{counted[0] + counted[1]:>14,}  {'equal' if fcm == sum(counted) else 'DIFFER'}"
        )


def model_parity() -> None:
    config = TransformerConfig.gpt2(vocab=50257, context=1024, d_model=768, n_layers=4, n_heads=12)
    torch.manual_seed(0)
    model = TransformerLM(config, device="cuda", dtype=torch.bfloat16)
    ids = torch.randint(0, config.vocab, (4, 512), device="cuda")
    with FlopCounterMode(display=False) as theirs:
        model(ids).float().sum().backward()
    with record() as ours:
        logits = model(ids)
    counted = torch_counts(ours.session.root)
    estimate = model.estimate(batch=4, seq=512)
    print("GPT-2-style LM (4 layers, d_model 768) on cuda, bf16, batch 4 x seq 512:")
    print(f"  FlopCounterMode fwd+bwd          {theirs.get_total_flops():>16,}")
    print(f"  typedflops torch_counts fwd+bwd  {counted[0] + counted[1]:>16,}")
    print(f"  typedflops estimate matmul x3    {3 * estimate.matmul_flops:>16,}")
    print(
        f"  record() all ops forward         {ours.total.flops:>16,} (estimate {estimate.flops:,})"
    )
    del logits


def memory() -> None:
    print("training step memory (AdamW), GPT-2-style, cuda:")
    for dtype, layers, batch in ((torch.float32, 4, 8), (torch.bfloat16, 6, 8)):
        config = TransformerConfig.gpt2(
            vocab=50257, context=1024, d_model=768, n_layers=layers, n_heads=12
        )
        torch.cuda.empty_cache()
        torch.manual_seed(0)
        model = TransformerLM(config, device="cuda", dtype=dtype)
        predicted = training_memory(
            model, "adamw", dtype, master_weights=False, batch=batch, seq=512
        )
        optimizer = torch.optim.AdamW(model.parameters())
        ids = torch.randint(0, config.vocab, (batch, 512), device="cuda")
        for _ in range(2):  # the second step holds the optimizer state from the start
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            held = torch.cuda.memory_allocated()
            loss = model.loss(ids, ids)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated()
        terms = predicted.bytes
        step_terms = terms["activations"] + terms["gradients"]
        print(
            f"  {dtype!s:15s} layers {layers} batch {batch}: measured peak "
            f"{peak / 1e9:.3f} GB, of which held before the step {held / 1e9:.3f} GB; "
            f"predicted total {predicted.total / 1e9:.3f} GB (params "
            f"{terms['parameters'] / 1e9:.3f}, grads {terms['gradients'] / 1e9:.3f}, "
            f"optimizer {terms['optimizer'] / 1e9:.3f}, activations "
            f"{terms['activations'] / 1e9:.3f}); measured/total "
            f"{peak / predicted.total:.3f}; predicted peak {predicted.peak / 1e9:.3f} GB, "
            f"measured/predicted peak {peak / predicted.peak:.3f}; step's own peak / "
            f"(activations + grads) {(peak - held) / step_terms:.3f}"
        )
        del model, optimizer, loss


def compiled() -> None:
    from typedflops.nn import TwoLayerMLP

    model = TwoLayerMLP(64, 128, 32, device="cuda")
    fast = torch.compile(model, backend="inductor", fullgraph=True)
    x = torch.randn(16, 64, device="cuda")
    torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-4)
    bad = torch.randn(16, 63, device="cuda")
    try:
        model(bad)
        expected = "no error"
    except ShapeError as exc:
        expected = str(exc).splitlines()[0]
    message = "no error"
    try:
        fast(bad)
    except ShapeError as exc:
        message = f"ShapeError: {str(exc).splitlines()[0]}"
    except Exception as exc:  # fullgraph: dynamo's own error, carrying ours
        carried = "carries" if expected in str(exc) else "does NOT carry"
        message = f"{type(exc).__name__} that {carried} the eager ShapeError: {expected}"
    print(f"torch.compile(inductor, fullgraph) on cuda: outputs equal; a broken call: {message}")


def kernel_choice() -> None:
    """torch's attention kernel on this GPU against the one a dry run assumes for a GPU of
    its compute capability, found without asking torch (the rule), and the one a dry run
    on this GPU asks torch for with small tensors standing for the call; forward and in
    training."""
    from typedflops.cost.engine import kernels
    from typedflops.cost.engine.attention_choice import AttentionCall, gpu_choice

    gpu = None if torch.version.hip else torch.cuda.get_device_capability()
    flags = kernels._flags()
    counts = {"forward": [0, 0], "all": [0, 0], "asked": [0, 0]}
    earlier: tuple[tuple[int, int, int], ...] = ((64, 64, 64), (128, 128, 128), (256, 256, 256))
    earlier += ((512, 512, 512), (62, 62, 62), (64, 64, 32), (80, 80, 80))
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        for heads in (*earlier, (160, 160, 160), (192, 192, 128)):
            for masked, grouped, grad in itertools.product((False, True), repeat=3):
                tensors = []
                for device in ("cuda", "meta"):
                    q = torch.zeros(1, 4, 8, heads[0], dtype=dtype, device=device)
                    k = torch.zeros(1, 2 if grouped else 4, 8, heads[1], dtype=dtype, device=device)
                    v = torch.zeros(1, 2 if grouped else 4, 8, heads[2], dtype=dtype, device=device)
                    mask = torch.zeros(8, 8, dtype=dtype, device=device) if masked else None
                    tensors.append((q.requires_grad_(grad), k, v, mask))
                q, k, v, mask = tensors[0]
                try:
                    real = int(torch._fused_sdp_choice(q, k, v, attn_mask=mask, enable_gqa=grouped))
                except RuntimeError:
                    continue
                mask_dtype = dtype if masked else None
                call = AttentionCall(dtype, heads, mask_dtype, grouped=grouped, grad=grad)
                found = gpu_choice(call, flags, gpu)
                q, k, v, mask = tensors[1]
                named = {"attn_mask": mask, "enable_gqa": grouped}
                asked = kernels._choice("cuda", kernels._arguments((q, k, v), named))
                answers = {"all": found, "asked": asked}
                if heads in earlier and not grad:
                    answers["forward"] = found
                for kind, answer in answers.items():
                    counts[kind][0] += answer == real
                    counts[kind][1] += 1
                if found != real or asked != real:
                    print(
                        f"  differs: {dtype} heads {heads} mask {masked} grouped {grouped} "
                        f"grad {grad}: torch {real}, rule {found}, asked {asked}"
                    )
    name = "an unknown GPU" if gpu is None else f"sm{gpu[0]}{gpu[1]}"
    print(
        f"attention kernel assumed without a GPU for {name}: forward, the cases of earlier "
        f"runs, {counts['forward'][0]} of {counts['forward'][1]}; with training and head sizes "
        f"160 and 192/128, {counts['all'][0]} of {counts['all'][1]}; asked of torch here with "
        f"small tensors, {counts['asked'][0]} of {counts['asked'][1]}"
    )


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a is b:
        return True
    real = a.device.type != "meta" and a.data_ptr() == b.data_ptr()
    return real and a.shape == b.shape


def _grouped_attention(
    device: str, gpu: tuple[int, int], counting: contextlib.AbstractContextManager[object]
) -> tuple[torch.Tensor, list[str]]:
    """Masked grouped-query attention (bf16, q (4, 8, 256, 64), k/v (4, 2, 256, 64)),
    forward and backward, on ``device`` (on meta: the dry run's kernel for ``gpu``, by
    the rule); its output and the tensors it keeps beside its inputs."""
    from typedflops.cost.engine import kernels

    half = torch.bfloat16
    q = torch.randn(4, 8, 256, 64, device=device, dtype=half, requires_grad=True)
    k, v = (torch.randn(4, 2, 256, 64, device=device, dtype=half, requires_grad=True) for _ in "kv")
    keep = torch.ones(256, 256, dtype=torch.bool, device=device).tril()
    kept: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        kept.append(t)
        return t

    with counting, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        if device == "cuda":
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, enable_gqa=True)
        else:
            present = kernels._present
            kernels._present = lambda capability: False  # the rule, not torch's answer
            try:
                with kernels.kernels_of("cuda", gpu):
                    named = {"attn_mask": keep, "enable_gqa": True}
                    out = kernels.attention_on_meta("cuda", (q, k, v), named)
            finally:
                kernels._present = present
        out.sum().backward()
    beside = sorted(
        f"{tuple(t.shape)} {str(t.dtype)[6:]} on {t.device.type}"
        for t in kept
        if not any(_same(t, x) for x in (q, k, v))
    )
    return out, beside


def cudnn_dry_run() -> None:
    """A masked grouped-query attention: the kernel torch runs here, its FLOPs
    (FlopCounterMode) and the tensors it keeps, against a dry run on meta for a GPU of this
    one's capability."""
    gpu = torch.cuda.get_device_capability() if torch.cuda.is_available() else (9, 0)
    print("SDPA, bf16 q (4, 8, 256, 64), k/v (4, 2, 256, 64), a boolean (256, 256) mask:")
    for device in ("cuda", "meta") if torch.cuda.is_available() else ("meta",):
        counted: FlopCounterMode | None = FlopCounterMode(display=False)
        try:
            out, beside = _grouped_attention(device, gpu, counted or contextlib.nullcontext())
        except AssertionError:  # torch before 2.12: FlopCounterMode takes no grouped heads
            counted = None
            out, beside = _grouped_attention(device, gpu, contextlib.nullcontext())
        flops = "refuses grouped heads" if counted is None else f"{counted.get_total_flops():,}"
        print(
            f"  {device}: {type(out.grad_fn).__name__}, FlopCounterMode {flops}; "
            f"keeps {'; '.join(beside)}"
        )


def main() -> None:
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        return
    print(f"{torch.cuda.get_device_name()} (torch {torch.__version__})")
    for check in (attention_parity, model_parity, memory, compiled, kernel_choice, cudnn_dry_run):
        try:
            check()
        except Exception as exc:  # report and go on: each check stands alone
            print(f"{check.__name__}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")


if __name__ == "__main__":
    main()
