"""Megatron-LM's tensor and sequence parallelism for typedflops' transformer, as torch does it.

The splits are torch's own (``torch.distributed.tensor.parallel``): ``ColwiseParallel`` and
``RowwiseParallel`` shard each block's matrices (attention's ``qkv`` and the MLP's first
matrices by column, attention's ``out`` and the MLP's last by row), the embedding by
vocabulary rows and an untied head by column; ``SequenceParallel`` runs the norms on the
sequence's shards, ``PrepareModuleInput`` gathers the sequence before attention and the MLP
(Shoeybi et al. 2019; Korthikanti et al. 2022). torch's styles take ``nn.Linear`` and
``nn.Embedding``; typedflops' layers store a linear weight as ``(d_in, d_out)``, so the two
styles here give torch the placements of that layout and keep torch's input and output
handling. The loss runs under torch's ``loss_parallel`` on logits sharded by vocabulary.

A pipeline stage (:class:`Stage`) holds the blocks of one stage: the first also embeds the
ids, the last also applies the final norm and the head and takes the loss.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import (
    DTensor,
    Replicate,
    Shard,
    distribute_module,
    distribute_tensor,
)
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    PrepareModuleOutput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)
from torch.distributed.tensor.placement_types import Placement

from ..nn import Block, Embedding, Linear, TransformerLM

__all__ = ["Stage", "TypedColwise", "TypedRowwise", "cross_entropy", "shard_transformer"]


def _placed(placements: dict[str, Placement]) -> Any:
    """A partition function giving each named parameter of a module its placement."""

    def partition(name: str, module: torch.nn.Module, mesh: DeviceMesh) -> None:
        for key, param in list(module.named_parameters(recurse=False)):
            placed = distribute_tensor(param, mesh, [placements[key]])
            module.register_parameter(
                key, torch.nn.Parameter(placed, requires_grad=param.requires_grad)
            )

    return partition


class TypedColwise(ColwiseParallel):
    """torch's ``ColwiseParallel``, also for :class:`typedflops.nn.Linear` (its
    ``(d_in, d_out)`` weight is split along ``d_out``, its bias with it)."""

    def _apply(self, module: torch.nn.Module, device_mesh: DeviceMesh) -> torch.nn.Module:
        if not isinstance(module, Linear):
            return super()._apply(module, device_mesh)
        return distribute_module(
            module,
            device_mesh,
            _placed({"weight": Shard(1), "bias": Shard(0)}),
            partial(self._prepare_input_fn, self.input_layouts, self.desired_input_layouts),
            partial(self._prepare_output_fn, self.output_layouts, self.use_local_output),
        )


class TypedRowwise(RowwiseParallel):
    """torch's ``RowwiseParallel``, also for :class:`typedflops.nn.Linear` (its weight split
    along ``d_in``, its bias replicated) and :class:`typedflops.nn.Embedding` (split by
    vocabulary rows, as torch splits ``nn.Embedding``)."""

    def _apply(self, module: torch.nn.Module, device_mesh: DeviceMesh) -> torch.nn.Module:
        if isinstance(module, Linear):
            self.desired_input_layouts = (Shard(-1),)
            placements: dict[str, Placement] = {"weight": Shard(0), "bias": Replicate()}
        elif isinstance(module, Embedding):
            self.desired_input_layouts = (Replicate(),)
            placements = {"weight": Shard(0)}
        else:
            return super()._apply(module, device_mesh)
        return distribute_module(
            module,
            device_mesh,
            _placed(placements),
            partial(self._prepare_input_fn, self.input_layouts, self.desired_input_layouts),
            partial(self._prepare_output_fn, self.output_layouts, self.use_local_output),
        )


def shard_transformer(model: TransformerLM, mesh: DeviceMesh, sp: bool) -> None:
    """Split ``model``'s blocks, embedding and head over ``mesh`` (the tensor-parallel ranks)
    as Megatron-LM does, with sequence parallelism when ``sp``; in place.

    Between blocks the activations are whole on every rank (``sp=False``) or split along
    the sequence (``sp=True``, kept as DTensors so that residual adds stay local). Attention
    runs ``n_heads / tp`` heads per rank.
    """
    tp = mesh.size()
    between: Placement = Shard(1) if sp else Replicate()
    for block in model.blocks:
        assert isinstance(block, Block)
        names = ("w1", "w3", "w2") if block.config.mlp == "swiglu" else ("fc", "proj")
        mlp_in, mlp_out = names[:-1], names[-1]
        plan: dict[str, Any] = {
            "attn.qkv": TypedColwise(),
            "attn.out": TypedRowwise(output_layouts=between, use_local_output=not sp),
            **{f"mlp.{name}": TypedColwise() for name in mlp_in},
            f"mlp.{mlp_out}": TypedRowwise(output_layouts=between, use_local_output=not sp),
        }
        if sp:  # norms on the sequence's shards; attention and the MLP gather it
            for norm in ("norm1", "norm2"):
                plan[norm] = SequenceParallel()
            for part in ("attn", "mlp"):
                plan[part] = PrepareModuleInput(
                    input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
                )
        parallelize_module(block, mesh, plan)
        block.attn.n_heads //= tp  # the heads this rank runs
    # a pipeline stage holds some of these (see Stage)
    present = {name for name, child in model.named_children() if child is not None}
    top: dict[str, Any] = {
        "embed": TypedRowwise(
            input_layouts=Replicate(), output_layouts=between, use_local_output=not sp
        ),
        "head": TypedColwise(input_layouts=between, use_local_output=False),
    }
    if sp:
        top["norm"] = SequenceParallel()
    parallelize_module(model, mesh, {k: v for k, v in top.items() if k in present})
    if "norm" in present and "head" not in present:
        # The tied head multiplies by the vocabulary-split embedding: it needs the whole
        # sequence on every rank, as a DTensor.
        whole = PrepareModuleOutput(
            output_layouts=between, desired_output_layouts=Replicate(), use_local_output=False
        )
        parallelize_module(model, mesh, {"norm": whole})
    if sp and "positions" in present:
        table = PrepareModuleOutput(
            output_layouts=Replicate(), desired_output_layouts=Replicate(), use_local_output=False
        )
        parallelize_module(model, mesh, {"positions": table})


class Stage(torch.nn.Module):
    """The part of a :class:`~typedflops.nn.TransformerLM` one pipeline stage runs: its
    blocks (``model.blocks`` holds only those), after the embedding on the first stage, and
    before the final norm, the head and the loss on the last (``first and last``: the whole
    model's loss).

    The first stage takes ids ``(batch, seq)``; the others the previous stage's output
    ``(batch, seq, d_model)``. The last returns the mean cross-entropy of ``targets``
    ``(batch, seq)`` (its logits ``(batch, seq, vocab)`` with ``loss=False``, for a
    pipeline schedule that takes the loss itself); the others their blocks' output
    ``(batch, seq, d_model)``.
    """

    def __init__(self, model: TransformerLM, first: bool, last: bool, *, loss: bool = True) -> None:
        super().__init__()
        # A stage holds only what it runs: the embedding on the first stage (and on the
        # last too when the head is tied to it), positions on the first, the final norm
        # and an untied head on the last.
        if not first:
            model.positions = None
            if not (last and model.head is None):
                del model.embed
        if not last:
            del model.norm
            model.head = None
        self.model, self.first, self.last, self.loss = model, first, last, loss
        #: With sequence parallelism, the tensor-parallel mesh: a later stage's input
        #: arrives as this rank's shard of the sequence.
        self.sequence_mesh: DeviceMesh | None = None

    def forward(self, x: Tensor, targets: Tensor | None = None) -> Tensor:
        """Run the stage on ``x`` (ids on the first stage, activations on the others)."""
        model = self.model
        if self.first and self.last and self.loss:
            assert targets is not None
            loss: Tensor = model.loss(x, targets)
            return loss
        if self.first:
            x = model.embed_ids(x)
        elif self.sequence_mesh is not None and not isinstance(x, DTensor):
            x = DTensor.from_local(x, self.sequence_mesh, [Shard(1)], run_check=False)
        for block in model.blocks:
            x = block(x)
        if not self.last:
            return x
        logits = model.logits_of(x)
        if not self.loss:
            return logits
        assert targets is not None
        return cross_entropy(logits, targets)


def cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
    """The mean cross-entropy of ``targets`` ``(batch, seq)`` under ``logits``
    ``(batch, seq, vocab)``, as :meth:`~typedflops.nn.TransformerLM.loss` takes it."""
    out: Tensor = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    return out


def _rms_norm_sharding() -> None:
    """How DTensor runs the stand-in for CUDA's fused RMS norm (which dry runs of a GPU call,
    :mod:`typedflops.cost.engine.stand_ins`): on any split of the axes it does not normalise
    (the sequence, under sequence parallelism), the weight whole; its weight's gradient is
    then a partial sum, as for torch's own norms."""
    from torch.distributed.tensor import Partial
    from torch.distributed.tensor.experimental import register_sharding

    norm = torch.ops.typedflops._fused_rms_norm.default
    backward = torch.ops.typedflops._fused_rms_norm_backward.default

    @register_sharding(norm)  # type: ignore[untyped-decorator]
    def _forward(x: Any, shape: list[int], weight: Any, eps: Any) -> list[Any]:
        whole = None if weight is None else Replicate()
        found: list[Any] = [([Replicate(), Replicate()], [Replicate(), None, whole, None])]
        for axis in range(len(x.shape) - len(shape)):
            found.append(([Shard(axis), Shard(axis)], [Shard(axis), None, whole, None]))
        return found

    @register_sharding(backward)  # type: ignore[untyped-decorator]
    def _backward(
        grad: Any, x: Any, shape: list[int], rstd: Any, weight: Any, mask: list[bool]
    ) -> list[Any]:
        whole = None if weight is None else Replicate()
        found: list[Any] = [
            ([Replicate(), Replicate()], [Replicate(), Replicate(), None, Replicate(), whole, None])
        ]
        for axis in range(len(x.shape) - len(shape)):
            split = Shard(axis)
            found.append(([split, Partial()], [split, split, None, split, whole, None]))
        return found


_rms_norm_sharding()
