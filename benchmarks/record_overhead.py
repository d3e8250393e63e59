"""What ``record()`` costs, side by side with FlopCounterMode and with unrecorded runs.

Every number is a median over interleaved rounds in one process (float32, CPU, 1 thread),
so that machine noise hits every variant alike:

- ``call``: a decorated two-matmul function (8x16 @ 16x16 @ 16x4), checked vs checked
  inside ``record()`` (the ratio ``benchmarks/soak.py`` also prints) vs checked under a
  dispatch mode that does nothing (the floor of any counting mode that sees each op in
  Python: a recorded call's body runs under the counting mode alone) vs checked under a mode
  that only keys each op by its tensors' facts and appends its event (the least a counting
  mode that shares an op's count between like calls does), and the same body
  undecorated under a do-nothing dispatch + function mode pair (what counting and naming
  the user's calls outside decorated ones pays at least) and under FlopCounterMode;
- ``shapes``: 20,000 calls of it over 1,000 distinct batch sizes, checked vs inside one
  ``record()`` (per call, interleaved rounds), then ``rec.total`` and ``rec.table()``
  (formulas fitted on demand: one fit serves every row it reproduces);
- ``model``: a GPT-style model written the usual way (``nn.Linear``, ``nn.LayerNorm``,
  ``F.scaled_dot_product_attention``, no annotations), a forward and backward step, plain,
  under FlopCounterMode and under ``record()``, at one shape and over 12 distinct shapes;
- ``deep``: one forward through a ``ModuleList`` of 10,000 small blocks, under
  FlopCounterMode and under ``record()``, and the time of ``rec.total``.

Prints ``record / FlopCounterMode`` and ``recorded / checked`` (targets <= 3) per case.

Run: ``python benchmarks/record_overhead.py`` (``--quick`` for fewer calls and rounds).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from typedflops import record, typed_flops


@typed_flops
def two_layers(
    x: Float[Tensor, "batch d"], w1: Float[Tensor, "d h"], w2: Float[Tensor, "h k"]
) -> Float[Tensor, "batch k"]:
    return torch.relu(x @ w1) @ w2


def plain_two_layers(x: Tensor, w1: Tensor, w2: Tensor) -> Tensor:
    return torch.relu(x @ w1) @ w2


class _PassDispatch(TorchDispatchMode):
    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


class _PassFunction(TorchFunctionMode):
    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


class _LeastKeyed(TorchDispatchMode):
    """The least a counting mode that keys ops by their tensors can do per op: run it, key
    it by the op, the grad mode and each tensor's shape, dtype, ``requires_grad`` and
    layout, find its event by the key and append it (no call sites, no backward edges, no
    records or tasks, tensors given positionally only)."""

    def __init__(self) -> None:
        super().__init__()
        self.events: dict[Any, object] = {}
        self.items: list[object] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        key: tuple[Any, ...] = (func, torch.is_grad_enabled())
        for a in args:
            key += (a.shape, a.dtype, a.requires_grad, a.layout)
        event = self.events.get(key)
        if event is None:
            event = self.events[key] = object()
        self.items.append(event)
        return out


@contextmanager
def _floor() -> Iterator[None]:
    """A dispatch mode and a function mode that do nothing: what any Python counting mode
    that names the user's calls pays per op before counting anything."""
    with _PassFunction(), _PassDispatch():
        yield


def _dispatch_floor() -> AbstractContextManager[Any]:
    """A dispatch mode that does nothing: what any counting mode that sees each op in
    Python pays per op."""
    return _PassDispatch()


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: Tensor) -> Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=2)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, s, d))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class GPT(nn.Module):
    def __init__(self, vocab: int = 256, d: int = 64, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(256, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids: Tensor) -> Tensor:
        x = self.embed(ids) + self.pos(torch.arange(ids.shape[1]))
        for block in self.blocks:
            x = block(x)
        logits: Tensor = self.head(x)
        return logits


def _seconds(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


Variant = tuple[Callable[[], AbstractContextManager[Any]], Callable[[], object]]


def _medians(variants: dict[str, Variant], rounds: int) -> dict[str, float]:
    """The median time of each ``(context, run)`` variant over interleaved rounds."""
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, (context, run) in variants.items():
            with context():
                samples[name].append(_seconds(run))
    return {name: statistics.median(values) for name, values in samples.items()}


def _each(
    run: Callable[[], object], **contexts: Callable[[], AbstractContextManager[Any]]
) -> dict[str, Variant]:
    return {name.replace("_", " "): (context, run) for name, context in contexts.items()}


def _counter() -> AbstractContextManager[Any]:
    return FlopCounterMode(display=False)


def bench_call(rounds: int, calls: int) -> None:
    x, w1, w2 = torch.randn(8, 16), torch.randn(16, 16), torch.randn(16, 4)

    def checked() -> None:
        for _ in range(calls):
            two_layers(x, w1, w2)

    def plain() -> None:
        for _ in range(calls):
            plain_two_layers(x, w1, w2)

    variants = {
        **_each(
            checked,
            checked=nullcontext,
            recorded=record,
            checked_floor=_dispatch_floor,
            least_keyed=_LeastKeyed,
        ),
        **_each(plain, plain=nullcontext, floor=_floor, FlopCounterMode=_counter, record=record),
    }
    per = {name: value / calls * 1e6 for name, value in _medians(variants, rounds).items()}
    print(f"call ({calls} calls, 8x16 @ 16x16 @ 16x4):")
    for name, value in per.items():
        print(f"  {name:<16} {value:9.2f} us")
    print(f"  recorded / checked:                     {per['recorded'] / per['checked']:.2f}")
    print(
        f"  checked floor (a pass-through dispatch mode) / checked: "
        f"{per['checked floor'] / per['checked']:.2f}"
    )
    print(
        f"  least keyed (a mode that only keys and appends each op) / checked: "
        f"{per['least keyed'] / per['checked']:.2f}"
    )
    print(f"  floor (pass-through modes) / plain:     {per['floor'] / per['plain']:.2f}")
    print(f"  record / FlopCounterMode (plain body):  {per['record'] / per['FlopCounterMode']:.2f}")


def bench_shapes(calls: int, shapes: int, rounds: int) -> None:
    w1, w2 = torch.randn(16, 16), torch.randn(16, 4)
    xs = [torch.randn(batch, 16) for batch in range(1, shapes + 1)]

    def checked() -> None:
        for index in range(calls):
            two_layers(xs[index % shapes], w1, w2)

    def plain() -> None:
        for index in range(calls):
            plain_two_layers(xs[index % shapes], w1, w2)

    # each round a record of its own: every distinct shape is a new row again
    found = _medians(_each(checked, checked=nullcontext, recorded=record), rounds)
    unrecorded, recorded = found["checked"], found["recorded"]
    with record() as rec:
        checked()
    with FlopCounterMode(display=False):
        counted = _seconds(plain)
    with record():
        recorded_plain = _seconds(plain)
    total_time = _seconds(lambda: rec.total)
    table_time = _seconds(rec.table)
    print(f"shapes ({calls} calls over {shapes} batch sizes, one record a round):")
    print(
        f"  checked {unrecorded / calls * 1e6:.1f} us a call, recorded {recorded / calls * 1e6:.1f}"
    )
    print(f"  recorded / checked: {recorded / unrecorded:.2f} (median of {rounds} rounds)")
    print(
        f"  undecorated: FlopCounterMode {counted / calls * 1e6:.1f} us a call, record "
        f"{recorded_plain / calls * 1e6:.1f}; record / FlopCounterMode: "
        f"{recorded_plain / counted:.2f}"
    )
    print(
        f"  {len(rec.calls)} rows; rec.total {total_time:.2f} s (exact: {rec.total.exact}), "
        f"rec.table() {table_time:.2f} s"
    )


def bench_model(rounds: int) -> None:
    torch.manual_seed(0)
    model = GPT()
    shapes = [(batch, seq) for batch in (1, 2, 4) for seq in (16, 24, 32, 64)]
    one = torch.randint(0, 256, (4, 32))
    many = [torch.randint(0, 256, shape) for shape in shapes]

    def step(ids: Tensor) -> None:
        model(ids).float().pow(2).mean().backward()

    def steps() -> None:
        for ids in many:
            step(ids)

    contexts = {"plain": nullcontext, "FlopCounterMode": _counter, "record": record}
    single = _medians(_each(lambda: step(one), **contexts), rounds)
    spread = _medians(_each(steps, **contexts), max(rounds // 3, 1))
    print("model (GPT-style, 2 layers, d=64, forward + backward):")
    for label, found in (("one shape (4, 32)", single), (f"{len(shapes)} shapes", spread)):
        cells = ", ".join(f"{name} {value * 1e3:.1f} ms" for name, value in found.items())
        print(f"  {label}: {cells}")
        print(f"    record / FlopCounterMode: {found['record'] / found['FlopCounterMode']:.2f}")


def bench_deep(blocks: int, rounds: int) -> None:
    layers = nn.ModuleList(nn.Linear(16, 16) for _ in range(blocks))
    x = torch.randn(4, 16)

    def forward() -> None:
        y = x
        for layer in layers:
            y = torch.relu(layer(y))

    contexts = {"plain": nullcontext, "FlopCounterMode": _counter, "record": record}
    found = _medians(_each(forward, **contexts), rounds)
    with record() as rec:
        forward()
    total_time = _seconds(lambda: rec.total)
    cells = ", ".join(f"{name} {value:.2f} s" for name, value in found.items())
    print(f"deep (one forward through {blocks} Linear+ReLU blocks): {cells}")
    print(f"  record / FlopCounterMode: {found['record'] / found['FlopCounterMode']:.2f}")
    print(f"  rec.total {total_time:.2f} s, {rec.total.flops:.4g} FLOPs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls and rounds")
    quick = parser.parse_args().quick
    torch.set_num_threads(1)
    with record():  # the first record loads torch's compiler stack: not part of a figure
        two_layers(torch.randn(2, 16), torch.randn(16, 16), torch.randn(16, 4))
    with FlopCounterMode(display=False):
        plain_two_layers(torch.randn(2, 16), torch.randn(16, 16), torch.randn(16, 4))
    bench_call(rounds=5 if quick else 15, calls=100 if quick else 500)
    bench_shapes(
        calls=2_000 if quick else 20_000, shapes=100 if quick else 1_000, rounds=3 if quick else 5
    )
    bench_model(rounds=3 if quick else 9)
    bench_deep(blocks=1_000 if quick else 10_000, rounds=1 if quick else 3)


if __name__ == "__main__":
    main()
