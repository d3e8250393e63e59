"""A step across ranks: planned before it runs, then recorded on every rank as it runs.

``python examples/ex07_ranks.py`` plans a small GPT-2-style model over 2 data-parallel x 2
tensor-parallel ranks (torch's own sharding, dry-run under a fake process group) and prints
rank 0's share. ``torchrun --nproc-per-node 4 examples/ex07_ranks.py`` runs that step on 4
CPU processes (gloo): each rank records its own ops with ``typedflops.record()`` (a
DTensor's local ops, not the global ones), and ``rec.across_ranks()`` gathers them: a row
per rank, the run's FLOP/s and MFU. Rank 0 prints both, the plan's forward FLOPs beside
what it recorded.
"""

from __future__ import annotations

import contextlib
import os

import torch

from typedflops import record
from typedflops.nn import TransformerConfig, TransformerLM
from typedflops.planning import ParallelLayout, plan_parallel

CONFIG = TransformerConfig.gpt2(vocab=512, context=128, d_model=128, n_layers=2, n_heads=4)
LAYOUT = ParallelLayout(dp=2, tp=2, sp=True)
BATCH, SEQ = 8, 128


def planned() -> float:
    """Rank 0's forward FLOPs in the plan (numbers only: no formulas, faster)."""
    plan = plan_parallel(CONFIG, BATCH, SEQ, "cpu", LAYOUT, dtype=torch.float32, formulas=False)
    print(f"planned on {LAYOUT.world} ranks ({LAYOUT.describe()}), rank 0:")
    for key, figure in plan.per_rank.items():
        print(f"  {key:<20} {figure.value:>16,.0f}  from {figure.source}")
    return float(plan.per_rank["forward_flops"].value)


def run_on_ranks() -> None:
    """One step on this process's rank, recorded and gathered across ranks."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import loss_parallel

    from typedflops.planning.rank_run import shard
    from typedflops.planning.tensor_parallel import Stage

    # Plan first: the dry run makes a fake process group of its own, which a process that
    # already has one cannot.
    expected = planned() if os.environ["RANK"] == "0" else 0.0
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (LAYOUT.dp, LAYOUT.tp), mesh_dim_names=("dp", "tp"))
    model = TransformerLM(CONFIG, device="meta")
    stage = Stage(model, True, True)
    shard(stage, LAYOUT, mesh, torch.float32, SEQ)  # the split the plan dry-ran
    stage.to_empty(device="cpu")
    torch.manual_seed(mesh["dp"].get_local_rank())
    ids = torch.randint(0, CONFIG.vocab, (BATCH // LAYOUT.dp, SEQ))
    parallel = loss_parallel() if LAYOUT.tp > 1 else contextlib.nullcontext()
    with parallel, record() as rec:
        stage(ids, ids).backward()
    gathered = rec.across_ranks(peak=1e12)  # every rank calls it: a collective
    if dist.get_rank() == 0:
        print(f"rank 0 recorded {rec.total.flops:,} forward FLOPs; the plan: {expected:,.0f}")
        print(gathered.table())
    dist.destroy_process_group()


def main() -> None:
    if "RANK" in os.environ:  # started by torchrun
        run_on_ranks()
    else:
        planned()


if __name__ == "__main__":
    main()
