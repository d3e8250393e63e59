"""Real ranks for the planner's tests: worker processes that run a sharded training step with
the gloo backend on the CPU (loopback only) and report what each rank measured.

:class:`GlooRanks` starts its workers once (importing torch takes most of the time) and runs
one scenario after another in them, each in a fresh process group on a free port. A
scenario builds the planner's own split of the model (:func:`typedflops.planning.rank_run.shard`,
:class:`~typedflops.planning.tensor_parallel.Stage`), or torch's 1F1B schedule over pipeline
stages, runs one step to warm up, then measures the next: the peak the CPU allocator saw
above what the step started with (``torch.profiler`` allocation events, as the
single-device peak tests measure it) and the bytes of each collective kind.
"""

from __future__ import annotations

import contextlib
import gc
import os
import queue
import socket
from dataclasses import dataclass
from typing import Any

import torch
import torch.multiprocessing as mp

#: Seconds a scenario may take on every rank before the test fails.
TIMEOUT = 120


@dataclass(frozen=True)
class Scenario:
    """What to run: a ``TransformerConfig``'s fields, a ``ParallelLayout``'s, the whole
    step's batch and sequence, and the optimizer stepped after backward (None: none)."""

    config: dict[str, Any]
    layout: dict[str, Any]
    batch: int
    seq: int
    optimizer: str | None = None
    #: Record the step with ``typedflops.record()`` instead, and gather it across ranks.
    record: bool = False

    @property
    def world(self) -> int:
        layout = self.layout
        return int(layout.get("dp", 1) * layout.get("tp", 1) * layout.get("pp", 1))


def _free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class GlooRanks:
    """``size`` worker processes; :meth:`run` runs a scenario on the first ``world`` of
    them and returns each rank's measurements, by rank: ``start`` (the bytes of its
    parameters), ``peak`` (the most allocated at once in the step, from ``start``), ``comm``
    (bytes by collective kind and mesh dimension, ``"all_gather/dp"``; ``"other"`` for a
    pipeline's group)."""

    def __init__(self, size: int) -> None:
        context = mp.get_context("spawn")
        self.tasks = [context.Queue() for _ in range(size)]
        self.results: Any = context.Queue()
        self.workers = [
            context.Process(target=_serve, args=(rank, self.tasks[rank], self.results))
            for rank in range(size)
        ]
        for worker in self.workers:
            worker.start()

    def run(self, scenario: Scenario) -> list[dict[str, Any]]:
        port = _free_port()
        for rank in range(scenario.world):
            self.tasks[rank].put((scenario, port))
        found: list[dict[str, Any]] = []
        for _ in range(scenario.world):
            try:
                found.append(self.results.get(timeout=TIMEOUT))
            except queue.Empty:
                raise AssertionError(f"a rank took over {TIMEOUT} s: {scenario}") from None
        errors = [result["error"] for result in found if "error" in result]
        if errors:
            raise AssertionError(errors[0])
        return sorted(found, key=lambda result: int(result["rank"]))

    def close(self) -> None:
        for task in self.tasks:
            task.put(None)
        for worker in self.workers:
            worker.join(timeout=30)
            if worker.is_alive():
                worker.kill()


def _serve(rank: int, tasks: Any, results: Any) -> None:
    torch.set_num_threads(1)
    while True:
        task = tasks.get()
        if task is None:
            return
        scenario, port = task
        try:
            results.put(_run(rank, scenario, port))
        except Exception as error:  # reported to the test, which fails with it
            results.put({"rank": rank, "error": f"rank {rank}: {type(error).__name__}: {error}"})


def _run(rank: int, scenario: Scenario, port: int) -> dict[str, Any]:
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=scenario.world)
    try:
        from typedflops.planning import ParallelLayout

        layout = ParallelLayout(**scenario.layout)
        if layout.pp > 1:
            return _pipeline(rank, scenario, layout)
        return _sharded(rank, scenario, layout)
    finally:
        dist.destroy_process_group()


def _init(stage: torch.nn.Module) -> None:
    from torch.distributed.tensor import DTensor

    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in stage.parameters():
            local = parameter.to_local() if isinstance(parameter, DTensor) else parameter
            local.normal_(0.0, 0.02)


def _held(stage: torch.nn.Module) -> int:
    from torch.distributed.tensor import DTensor

    total = 0
    for parameter in stage.parameters():
        local = parameter.to_local() if isinstance(parameter, DTensor) else parameter
        total += local.numel() * local.element_size()
    return total


def _measure(
    rank: int, warm: Any, step: Any, stage: torch.nn.Module, labels: dict[str, str]
) -> dict[str, Any]:
    """Run ``warm`` (gloo's buffers, lazy initialisation), then measure ``step``."""
    from typedflops.planning.rank_mode import RankMode
    from typedflops.planning.training import measure_peak

    warm()
    for parameter in stage.parameters():
        parameter.grad = None
    start = _held(stage)
    mode = RankMode(labels, "cpu")
    with mode:
        above = _quiet(measure_peak, step)
    # twice more, the lowest peak kept: gloo's threads allocate now and then beside the step
    for _ in range(2):
        for parameter in stage.parameters():
            parameter.grad = None
        above = min(above, _quiet(measure_peak, step))
    moved: dict[str, int] = {}
    for count in mode.counts:
        if "/" in count.figure:
            moved[count.figure] = moved.get(count.figure, 0) + count.value
    return {
        "rank": rank,
        "start": start,
        "peak": start + above,
        "comm": moved,
        "tracked": mode.peak,
    }


def _quiet(measure: Any, step: Any) -> int:
    """``measure(step)`` with Python's garbage collector run before and held off during:
    what an earlier scenario left in reference cycles is not freed inside the window."""
    gc.collect()
    gc.disable()
    try:
        return int(measure(step))
    finally:
        gc.enable()


def _sharded(rank: int, scenario: Scenario, layout: Any) -> dict[str, Any]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import loss_parallel

    from typedflops.config import disabled
    from typedflops.cost.engine.kernels import TargetKernels
    from typedflops.nn import TransformerConfig, TransformerLM
    from typedflops.planning.rank_run import shard
    from typedflops.planning.tensor_parallel import Stage

    dtype = torch.float32
    mesh = init_device_mesh("cpu", (layout.dp, layout.tp), mesh_dim_names=("dp", "tp"))
    config = TransformerConfig(**scenario.config)
    with torch.device("meta"):
        model = TransformerLM(config, dtype=dtype)
    stage = Stage(model, True, True)
    shard(stage, layout, mesh, dtype, scenario.seq)
    stage.to_empty(device="cpu")
    _init(stage)
    runner: torch.nn.Module = stage
    if layout.dp > 1 and not layout.fsdp:  # ZeRO stage 0: torch's DistributedDataParallel
        from torch.nn.parallel import DistributedDataParallel

        runner = DistributedDataParallel(
            stage, process_group=mesh["dp"].get_group(), broadcast_buffers=False
        )
    micro = scenario.batch // (layout.dp * layout.microbatches)
    generator = torch.Generator().manual_seed(mesh["dp"].get_local_rank())
    ids = torch.randint(0, config.vocab, (micro, scenario.seq), generator=generator)
    targets = torch.randint(0, config.vocab, (micro, scenario.seq), generator=generator)

    def forward_backward() -> None:
        parallel = loss_parallel() if layout.tp > 1 else contextlib.nullcontext()
        with disabled(), TargetKernels("cpu"), parallel:
            for _ in range(layout.microbatches):
                runner(ids, targets).backward()

    def step() -> None:
        forward_backward()
        optimizer = _optimizer(scenario.optimizer, stage)
        if optimizer is not None:  # its first step: it makes its state, as planned
            optimizer.step()

    labels = {str(mesh.get_group(name).group_name): name for name in ("dp", "tp")}
    if scenario.record:
        return _recorded(rank, stage, ids, targets, layout)
    return _measure(rank, forward_backward, step, stage, labels)


def _recorded(
    rank: int, stage: torch.nn.Module, ids: torch.Tensor, targets: torch.Tensor, layout: Any
) -> dict[str, Any]:
    """The step under ``typedflops.record()`` (checks on, as a user runs it), gathered."""
    from torch.distributed.tensor.parallel import loss_parallel

    from typedflops import record
    from typedflops.cost.engine.kernels import TargetKernels

    parallel = loss_parallel() if layout.tp > 1 else contextlib.nullcontext()
    with TargetKernels("cpu"), parallel, record() as rec:
        stage(ids, targets).backward()
    gathered = rec.across_ranks(peak=1e12)
    return {"rank": rank, "flops": rec.total.flops, "gathered": gathered.to_dict()}


def _optimizer(name: str | None, stage: torch.nn.Module) -> Any:
    if name is None:
        return None
    if name != "adamw":
        raise ValueError(f"scenario optimizer {name!r}: only adamw")
    return torch.optim.AdamW(stage.parameters(), foreach=True)


def _pipeline(rank: int, scenario: Scenario, layout: Any) -> dict[str, Any]:
    import dataclasses

    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    from typedflops.config import disabled
    from typedflops.cost.engine.kernels import TargetKernels
    from typedflops.nn import TransformerConfig, TransformerLM
    from typedflops.planning.tensor_parallel import Stage, cross_entropy

    config = TransformerConfig(**scenario.config)
    per_stage = dataclasses.replace(config, n_layers=config.n_layers // layout.pp)
    model = TransformerLM(per_stage, dtype=torch.float32)
    first, last = rank == 0, rank == layout.pp - 1
    stage = Stage(model, first, last, loss=False)
    _init(stage)
    pipe = PipelineStage(stage, rank, layout.pp, torch.device("cpu"))
    schedule = Schedule1F1B(pipe, layout.microbatches, loss_fn=cross_entropy)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, config.vocab, (scenario.batch, scenario.seq), generator=generator)
    targets = torch.randint(0, config.vocab, (scenario.batch, scenario.seq), generator=generator)

    def step() -> None:
        with disabled(), TargetKernels("cpu"):
            if first:
                schedule.step(ids, return_outputs=False)
            elif last:
                schedule.step(target=targets, losses=[], return_outputs=False)
            else:
                schedule.step(return_outputs=False)

    return _measure(rank, step, step, stage, {})
