"""Records of real runs on a CUDA device, against the same runs on the CPU, separate records
and FlopCounterMode (needs a GPU; exits 0 without one).

1. Kernels that skip entries by value (``cross_entropy`` with ignored targets,
   ``embedding_bag`` with padding, ``histc``, ``multi_margin_loss``): a record on cuda
   against a record of the same values on the CPU, forward and backward.
2. One decorated attention call made under each SDPA kernel in turn inside one record:
   each call's count (the total's step) against a record of that call alone, and
   FlopCounterMode's count of it.
3. A depthwise 7x7 convolution, forward and backward, on cuda against the CPU and the hand
   count (FlopCounterMode's backward formula counts it ~groups x too high).
4. A decorated product called plainly then under ``autocast(bfloat16)`` in one record: each
   call's bytes against a record of it alone; ``x[x > 0]`` with 1 then 4 positive values.
5. Time: a GPT-style forward and backward (``nn.Linear``, ``nn.LayerNorm``, SDPA, bf16) plain,
   under FlopCounterMode and under ``record()``, CUDA-synchronized, interleaved rounds.

Run: ``python benchmarks/gpu_record.py``
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from typedflops import record, typed_flops


def _value_skips(device: str) -> list[tuple[str, int, int, int]]:
    """Each op's forward and backward FLOPs in a record on ``device``, of values made on the
    CPU (the same values on either device), and the lines of its ``assumed``."""
    torch.manual_seed(0)
    out = []
    logits = torch.randn(64, 10, dtype=torch.float64).to(device).requires_grad_()
    targets = torch.randint(0, 10, (64,)).to(device)
    targets[::3] = -100
    with record() as rec:
        F.cross_entropy(logits, targets).backward()
    out.append(
        (
            "cross_entropy, 22 of 64 ignored",
            rec.total.flops,
            rec.total.backward_flops,
            len(rec.total.assumed),
        )
    )
    weight = torch.randn(20, 8, device=device, dtype=torch.float64, requires_grad=True)
    ids = torch.tensor([0, 3, 0, 5, 7, 0, 9, 2], device=device)
    offsets = torch.tensor([0, 3, 3, 6], device=device)
    with record() as rec:
        F.embedding_bag(ids, weight, offsets, mode="mean", padding_idx=0).sum().backward()
    out.append(
        (
            "embedding_bag mean, 3 of 8 padding",
            rec.total.flops,
            rec.total.backward_flops,
            len(rec.total.assumed),
        )
    )
    values = torch.tensor([0.5, 2.0, 9.0, -3.0, float("nan"), 4.0], device=device)
    with record() as rec:
        torch.histc(values, bins=4, min=0, max=4)
    out.append(
        (
            "histc, 3 of 6 in range",
            rec.total.flops,
            rec.total.backward_flops,
            len(rec.total.assumed),
        )
    )
    x = torch.randn(6, 5, dtype=torch.float64).to(device).requires_grad_()
    y = torch.tensor([0, 1, 2, 3, 4, 0], device=device)
    with record() as rec:
        F.multi_margin_loss(x, y).backward()
    out.append(
        ("multi_margin_loss", rec.total.flops, rec.total.backward_flops, len(rec.total.assumed))
    )
    return out


def value_skips() -> None:
    print("kernels that skip entries by value: record on cuda vs the same values on cpu")
    for (name, *gpu), (_, *cpu) in zip(_value_skips("cuda"), _value_skips("cpu"), strict=True):
        verdict = "equal" if gpu[:2] == cpu[:2] else "DIFFER"
        print(
            f"  {name:36s} cuda fwd/bwd {gpu[0]:>6,}/{gpu[1]:>6,}  "
            f"cpu {cpu[0]:>6,}/{cpu[1]:>6,}  {verdict}; assumed lines cuda {gpu[2]}, cpu {cpu[2]}"
        )


@typed_flops
def attend(
    q: Float[Tensor, "b h s d"], k: Float[Tensor, "b h s d"], v: Float[Tensor, "b h s d"]
) -> Float[Tensor, "b h s d"]:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


BACKENDS = ("default", "math", "flash", "efficient", "cudnn")


def kernel_switches() -> None:
    print("one decorated SDPA call per kernel in one record (cuda, bf16 (2, 8, 256, 64), causal):")
    q, k, v = (torch.randn(2, 8, 256, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    ran: list[str] = []
    for name in BACKENDS:
        try:
            with sdpa_kernel_named(name):
                attend(q, k, v)
            ran.append(name)
        except RuntimeError as exc:
            print(f"  {name:9s} not available: {str(exc).splitlines()[0][:80]}")
    steps = []
    with record() as together:
        before = 0
        for name in ran:
            with sdpa_kernel_named(name):
                attend(q, k, v)
            steps.append(together.total.flops - before)
            before = together.total.flops
    for name, step in zip(ran, steps, strict=True):
        with sdpa_kernel_named(name), record() as alone:
            attend(q, k, v)
        with sdpa_kernel_named(name), FlopCounterMode(display=False) as theirs:
            attend(q, k, v)
        verdict = "equal" if step == alone.total.flops else "DIFFER"
        print(
            f"  {name:9s} its step of the shared record {step:>12,}  alone "
            f"{alone.total.flops:>12,} ({verdict})  FlopCounterMode {theirs.get_total_flops():>12,}"
        )


def sdpa_kernel_named(name: str) -> AbstractContextManager[object]:
    backend = {
        "math": SDPBackend.MATH,
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
    }.get(name)
    return nullcontext() if backend is None else sdpa_kernel(backend)


def depthwise() -> None:
    # Hand count: forward 2*7*7 a output value (multiply-add); backward the input's gradient
    # and the weight's, each 2*7*7 an output value: 96 * 56 * 56 * 2 outputs of batch 2.
    outputs = 2 * 96 * 56 * 56
    print(
        f"depthwise 7x7 conv (2, 96, 56, 56), fp32: hand count forward {2 * 49 * outputs:,} "
        f"(+ bias {outputs:,}), backward {4 * 49 * outputs:,} (+ bias's gradient {outputs:,})"
    )
    for device in ("cuda", "cpu"):
        torch.manual_seed(0)
        conv = nn.Conv2d(96, 96, 7, padding=3, groups=96, device=device)
        x = torch.randn(2, 96, 56, 56, device=device, requires_grad=True)
        with record() as rec:
            conv(x).sum().backward()
        with FlopCounterMode(display=False) as theirs:
            conv(x).sum().backward()
        print(
            f"  {device}: record forward {rec.total.flops:>12,} backward "
            f"{rec.total.backward_flops:>12,}; FlopCounterMode fwd+bwd "
            f"{theirs.get_total_flops():>14,}"
        )


@typed_flops
def project(x: Float[Tensor, "n d"], w: Float[Tensor, "d k"]) -> Float[Tensor, "n k"]:
    return x @ w


def positives(x: Tensor) -> Tensor:
    return (x[x > 0] * 2).sum()


def calls_that_differ() -> None:
    x = torch.randn(256, 512, device="cuda")
    w = torch.randn(512, 128, device="cuda")
    autocast = torch.autocast("cuda", dtype=torch.bfloat16)
    with record() as together:
        project(x, w)
        first = together.total.bytes
        with autocast:
            project(x, w)
        second = together.total.bytes - first
    with record() as plain:
        project(x, w)
    with autocast, record() as cast:
        project(x, w)
    verdict = "equal" if (first, second) == (plain.total.bytes, cast.total.bytes) else "DIFFER"
    print(
        f"a decorated product, plain then under autocast(bf16), one record on cuda: bytes "
        f"{first:,} then {second:,}; alone {plain.total.bytes:,} and {cast.total.bytes:,} "
        f"({verdict})"
    )
    one = torch.tensor([-1.0, 2.0, -3.0, -4.0, -5.0], device="cuda")
    four = torch.tensor([1.0, 2.0, 3.0, 4.0, -5.0], device="cuda")
    with record() as together:
        positives(one)
        first = together.total.flops
        positives(four)
        second = together.total.flops - first
    alone = []
    for values in (one, four):
        with record() as rec:
            positives(values)
        alone.append(rec.total.flops)
    verdict = "equal" if [first, second] == alone else "DIFFER"
    print(
        f"x[x > 0] * 2 summed, 1 then 4 positive, one record on cuda: {first} then {second} "
        f"FLOPs; alone {alone[0]} and {alone[1]} ({verdict}); exact {together.total.exact}"
    )


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: Tensor) -> Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(b, s, d))
        out: Tensor = x + self.down(F.gelu(self.up(self.norm2(x))))
        return out


def overhead(rounds: int = 7) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(*(Block(768, 12) for _ in range(6))).to("cuda", torch.bfloat16)
    x = torch.randn(8, 512, 768, device="cuda", dtype=torch.bfloat16, requires_grad=True)

    def step() -> None:
        model(x).float().sum().backward()

    ways: dict[str, Callable[[], AbstractContextManager[object]]] = {
        "plain": nullcontext,
        "FlopCounterMode": lambda: FlopCounterMode(display=False),
        "record()": record,
    }
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(2):  # warm-up: kernels chosen, caches filled
        for make in ways.values():
            with make():
                step()
    torch.cuda.synchronize()
    for _ in range(rounds):
        for name, make in ways.items():
            torch.cuda.synchronize()
            start = time.perf_counter()
            with make():
                step()
            torch.cuda.synchronize()
            times[name].append(time.perf_counter() - start)
    median = {name: statistics.median(t) for name, t in times.items()}
    print(
        "GPT-style forward+backward, 6 blocks d 768, bf16 (8, 512) on cuda, median of "
        f"{rounds} interleaved rounds: plain {median['plain'] * 1e3:.2f} ms, FlopCounterMode "
        f"{median['FlopCounterMode'] * 1e3:.2f} ms, record() {median['record()'] * 1e3:.2f} ms; "
        f"record / FlopCounterMode {median['record()'] / median['FlopCounterMode']:.2f}, "
        f"record / plain {median['record()'] / median['plain']:.2f}"
    )


def main() -> None:
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        return
    print(f"{torch.cuda.get_device_name()} (torch {torch.__version__})")
    for check in (value_skips, kernel_switches, depthwise, calls_that_differ, overhead):
        try:
            check()
        except Exception as exc:  # report and go on: each check stands alone
            print(f"{check.__name__}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")


if __name__ == "__main__":
    main()
