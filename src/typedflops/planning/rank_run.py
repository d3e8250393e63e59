"""A dry run of one rank's training step under torch's own sharding.

A fake process group of the layout's size (``torch.testing._internal.distributed.fake_pg``,
which torch ships for this: collectives return at once and move nothing) stands for the
other ranks; the model is built on ``meta`` and split as torch splits it (tensor
parallelism, :mod:`.tensor_parallel`; ``fully_shard`` for ZeRO stage 3), then rank 0's
step runs: on ``meta`` tensors, or on fake tensors where FSDP needs them to be on a device
(``FakeTensorMode``: shapes and dtypes, no memory, as torchtitan's estimator runs it).
:class:`~.rank_mode.RankMode` counts what the rank computes, communicates and holds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import loss_parallel
from torch.multiprocessing.reductions import StorageWeakRef

from ..config import disabled
from ..cost.engine.kernels import TargetKernels, kernels_of
from ..errors import SpecError
from ..nn import TransformerConfig, TransformerLM
from .layout import ParallelLayout
from .rank_mode import Count, RankMode
from .tensor_parallel import Stage, shard_transformer

__all__ = ["RankRun", "fake_world", "rank_run", "shard"]

StageKind = Literal["whole", "first", "last"]
_BLOCK = re.compile(r"blocks\.\d+(?=\.)")
_SIXTEEN_BIT = (torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class RankRun:
    """What rank 0 holds, computes and moves in one microbatch's forward and backward.

    Lists hold ``(unit, bytes)`` per parameter, gradient and optimizer state tensor (the
    FSDP unit it belongs to: ``"blocks.0"``, or ``"stage"`` for the rest) and per saved
    activation (each storage once, unit ``""``); ``counts`` the FLOPs and collectives (see
    :class:`~.rank_mode.Count`). Peaks are every live byte at once: ``start`` what the step
    starts with, ``forward_backward`` the most during one microbatch, ``steady`` the most
    during a later microbatch (0 when not run), ``step`` the most during the optimizer's
    step (0 when not run).
    """

    counts: tuple[Count, ...]
    activations: tuple[tuple[str, int], ...]
    parameters: tuple[tuple[str, int], ...]
    gradients: tuple[tuple[str, int], ...]
    optimizer: tuple[tuple[str, int], ...]
    output_bytes: int
    start: int
    forward_backward: int
    steady: int
    step: int
    uncounted: frozenset[str]
    assumed: tuple[str, ...] = ()


@contextlib.contextmanager
def fake_world(layout: ParallelLayout) -> Iterator[DeviceMesh]:
    """A fake process group of ``dp * tp`` ranks (one pipeline stage's), this process rank
    0, and its ``("dp", "tp")`` mesh; destroyed on exit."""
    if dist.is_initialized():
        raise SpecError.at(
            "plan_parallel()",
            "a process group already exists in this process",
            hint="plan outside a distributed run (the dry run makes a fake one of its own)",
        )
    from torch.testing._internal.distributed.fake_pg import FakeStore

    size = layout.dp * layout.tp
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=size)
    try:
        yield init_device_mesh("cpu", (layout.dp, layout.tp), mesh_dim_names=("dp", "tp"))
    finally:
        dist.destroy_process_group()


def shard(
    stage: Stage, layout: ParallelLayout, mesh: DeviceMesh, dtype: torch.dtype, seq: int
) -> None:
    """Split ``stage``'s model over ``mesh`` as the layout says, with torch's own sharding:
    tensor (and sequence) parallelism, then ``fully_shard`` on each block and on the stage
    (ZeRO stage 3), computing in ``dtype`` from float32 shards when ``dtype`` is 16-bit."""
    model = stage.model
    if layout.tp > 1:
        shard_transformer(model, mesh["tp"], layout.sp)
        if layout.sp:
            stage.sequence_mesh = mesh["tp"]
    if layout.fsdp:
        mixed = dtype in _SIXTEEN_BIT
        policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=dtype) if mixed else None
        options: dict[str, Any] = {"mesh": mesh["dp"]}
        if policy is not None:
            options["mp_policy"] = policy
        for block in model.blocks:
            fully_shard(block, **options)
        fully_shard(stage, **options)


def _unit(name: str) -> str:
    """The FSDP unit a parameter belongs to: its block (``"blocks.3"``), else the stage."""
    found = _BLOCK.search(name)
    return found.group(0).strip(".") if found else "stage"


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor._local_tensor if isinstance(tensor, DTensor) else tensor


def _bytes(tensor: torch.Tensor) -> int:
    local = _local(tensor)
    return local.numel() * local.element_size()


class _Activations:
    """``saved_tensors_hooks`` noting each storage autograd keeps for backward;
    parameters (and views of them) are not activations."""

    def __init__(self) -> None:
        self.found: list[tuple[str, int]] = []
        self._seen: dict[int, Any] = {}

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        local = _local(tensor)
        for candidate in (tensor, local):
            base = candidate._base if candidate._base is not None else candidate
            if isinstance(base, torch.nn.Parameter):
                return tensor.detach()
        storage = local.untyped_storage()
        known = self._seen.get(storage._cdata)
        if known is None or known.expired():  # a storage freed since has a new address
            self._seen[storage._cdata] = StorageWeakRef(storage)  # type: ignore[no-untyped-call]
            self.found.append(("", storage.nbytes()))
        return tensor.detach()  # (an output kept as it is would hold its grad_fn: a cycle)

    @staticmethod
    def unpack(tensor: torch.Tensor) -> torch.Tensor:
        return tensor


def _tag_fsdp_groups(stage: Stage, mode: RankMode) -> None:
    """Tag the collectives of each FSDP parameter group by the module that owns it: FSDP
    gathers a block's parameters early, in another module's hooks, to prefetch them."""
    for name, module in stage.named_modules():
        if not isinstance(module, FSDPModule):
            continue
        tag = _unit(f"{name}.") if name else "stage"
        state = module._get_fsdp_state()
        for group in getattr(state, "_fsdp_param_groups", ()):
            for method in ("unshard", "post_backward"):
                setattr(group, method, _tagged(getattr(group, method), tag, mode))


def _tagged(method: Any, tag: str, mode: RankMode) -> Any:
    def run(*args: Any, **kwargs: Any) -> Any:
        mode.forced.append(tag)
        try:
            return method(*args, **kwargs)
        finally:
            mode.forced.pop()

    return run


def _optimizer(name: str | None, parameters: list[torch.nn.Parameter]) -> Any:
    if name in ("adam", "adamw"):
        kind = torch.optim.Adam if name == "adam" else torch.optim.AdamW
        return kind(parameters, foreach=True)
    if name in ("sgd", "momentum"):
        return torch.optim.SGD(parameters, lr=0.1, momentum=0.9 if name == "momentum" else 0.0)
    if name == "adagrad":
        return torch.optim.Adagrad(parameters, foreach=True)
    if name == "rmsprop":
        return torch.optim.RMSprop(parameters, foreach=True)
    return None


def rank_run(
    config: TransformerConfig,
    layout: ParallelLayout,
    batch: int,
    seq: int,
    dtype: torch.dtype,
    *,
    stage: StageKind = "whole",
    blocks: int = 1,
    optimizer: str | None = None,
    steady: int = 0,
    target: str = "cuda",
    capability: tuple[int, int] | None = None,
) -> RankRun:
    """Rank 0's step of ``config`` (with ``blocks`` blocks) on a microbatch of ``batch`` x
    ``seq``, split as ``layout`` says; ``stage`` is the pipeline stage it runs (``"whole"``
    without a pipeline). With ``optimizer`` (ZeRO stage 3, where torch's optimizer steps the
    shards) the optimizer's step runs too; with ``steady``, 1F1B's steady state (one
    microbatch's backward while two more are in flight). ``target`` is the device type
    whose kernels the step costs, ``capability`` the GPU's compute capability if known."""
    config = dataclasses.replace(
        config, n_layers=blocks, checkpoint=layout.checkpoint or config.checkpoint
    )
    mixed = layout.fsdp and dtype in _SIXTEEN_BIT
    with fake_world(layout) as mesh, disabled():
        with torch.device("meta"):
            model = TransformerLM(config, dtype=torch.float32 if mixed else dtype)
        step = Stage(model, stage in ("whole", "first"), stage in ("whole", "last"))
        shard(step, layout, mesh, dtype, seq)
        labels = {str(mesh.get_group(name).group_name): name for name in ("dp", "tp")}
        mode = RankMode(labels, target)
        saved = _Activations()
        loss = loss_parallel() if layout.tp > 1 else contextlib.nullcontext()
        with _device(layout) as device:
            if layout.fsdp:
                step.to_empty(device=device)
                _tag_fsdp_groups(step, mode)
            step.train()
            inputs = _inputs(step, config, layout, batch, seq, dtype)
            params = [p for p in step.parameters()]
            mode.ignore([t for t in inputs if not t.is_floating_point()])
            mode.watch([_local(p) for p in params])
            start = mode.peak
            with kernels_of(target, capability), TargetKernels(target), mode, loss:
                with torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack):
                    out = step(*inputs)
                output = _bytes(out) if stage == "first" else 0
                mode.phase = "backward"
                _backward(out)
                del out
                forward_backward = mode.peak
                gradients = [
                    (_unit(n), _bytes(p.grad))
                    for n, p in step.named_parameters()
                    if p.grad is not None
                ]
                steady_peak = _steady(step, inputs, mode, steady) if steady else 0
                states, step_peak = _optimizer_step(step, optimizer, mode)
            activations = tuple(saved.found)
    return RankRun(
        counts=tuple(mode.counts),
        activations=activations,
        parameters=tuple((_unit(n), _bytes(p)) for n, p in step.named_parameters()),
        gradients=tuple(gradients),
        optimizer=tuple(states),
        output_bytes=output,
        start=start,
        forward_backward=forward_backward,
        steady=steady_peak,
        step=step_peak,
        uncounted=frozenset(mode.uncounted),
        assumed=tuple(mode.assumed),
    )


@contextlib.contextmanager
def _device(layout: ParallelLayout) -> Iterator[str]:
    """Where the step runs: fake CPU tensors under FSDP (which refuses ``meta``
    parameters), else ``meta`` (faster: no fake-tensor bookkeeping)."""
    if layout.fsdp:
        with FakeTensorMode(allow_non_fake_inputs=True):
            yield "cpu"
    else:
        with torch.device("meta"):
            yield "meta"


def _inputs(
    step: Stage,
    config: TransformerConfig,
    layout: ParallelLayout,
    batch: int,
    seq: int,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, ...]:
    ids = torch.zeros(batch, seq, dtype=torch.long)
    targets = torch.zeros(batch, seq, dtype=torch.long)
    if step.first:
        return (ids, targets) if step.last else (ids,)
    # A later stage gets the previous stage's output: split along the sequence with sp.
    local_seq = seq // layout.tp if layout.sp else seq
    x = torch.zeros(batch, local_seq, config.d_model, dtype=dtype, requires_grad=True)
    return (x, targets) if step.last else (x,)


def _backward(out: torch.Tensor) -> None:
    if out.dim() == 0:
        out.backward()
    else:
        out.backward(torch.zeros_like(out))


def _steady(step: Stage, inputs: tuple[torch.Tensor, ...], mode: RankMode, in_flight: int) -> int:
    """A later microbatch: the gradients exist; it runs backward while ``in_flight``
    microbatches (itself included) hold their activations."""
    mode.phase = "steady"
    mode.peak = mode.live()
    held = [step(*inputs) for _ in range(in_flight)]
    _backward(held[0])
    del held
    return mode.peak


def _optimizer_step(
    step: Stage, name: str | None, mode: RankMode
) -> tuple[list[tuple[str, int]], int]:
    named = [(n, p) for n, p in step.named_parameters() if p.requires_grad]
    optimizer = _optimizer(name, [p for _, p in named])
    if optimizer is None:
        return [], 0
    mode.phase = "optimizer"
    mode.peak = mode.live()
    optimizer.step()
    states = [
        (_unit(n), _bytes(value))
        for n, p in named
        for value in optimizer.state[p].values()
        if isinstance(value, torch.Tensor) and value.dim() > 0
    ]
    return states, mode.peak
