"""``typedflops plan`` with parsed arguments: every argument checked before the dry runs, in
the command line's own words (its flags, not ``plan()``'s parameters)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys

import torch

from .. import devices
from ..devices.gpus import GPU_TABLE
from ..errors import SpecError, UsageError
from ..nn import CONFIGS, TransformerConfig
from ..planning.layout import ParallelLayout
from ..planning.model_source import resolve_model
from ..planning.plan_plot import plot_plan
from ..planning.planner import plan
from ..planning.ranks import plan_parallel

__all__ = ["run_plan"]

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def _device(name: str) -> devices.DeviceSpec:
    spec = devices.lookup(name)
    if spec is None:
        known = ", ".join(f'"{record.sku}"' for record in GPU_TABLE)
        raise UsageError(
            f"--device {name!r} is not in the device table (`typedflops devices` lists it); "
            f"known: {known}"
        )
    return spec


def run_plan(args: argparse.Namespace) -> int:
    """Run ``typedflops plan``; a bad argument is a ``UsageError`` raised before any work."""
    try:
        name, config = resolve_model(args.model)
    except SpecError as error:
        raise UsageError(str(error)) from None
    if args.seq > config.context:
        raise UsageError(f"--seq {args.seq} is longer than {name}'s context {config.context}")
    spec = _device(args.device)
    dtype = _DTYPES[args.dtype]
    if args.peak is None and devices.peak_source(dtype, spec, tf32=False)[0] is None:
        raise UsageError(
            f"--device {args.device!r}: {spec.name} has no {args.dtype} peak in the table; "
            "give one with --peak FLOP/S"
        )
    if _parallel(args):
        return _run_parallel(args, name, config, spec)
    try:
        step = plan(
            config if name not in CONFIGS else name,
            args.batch,
            args.seq,
            spec,
            dtype=dtype,
            optimizer=None if args.optimizer == "none" else args.optimizer,
            mfu=args.mfu,
            checkpoint=args.checkpoint,
            peak=args.peak,
        )
    except SpecError as error:  # a combination the flags' own checks cannot see
        raise UsageError(str(error).replace("plan(): ", "")) from None
    print(json.dumps(step.to_dict(), indent=2) if args.json else step.text())
    if args.plot:
        plot_plan(step, args.plot)
        print(f"plot written to {args.plot}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _parallel(args: argparse.Namespace) -> bool:
    sizes = (args.dp, args.tp, args.pp, args.microbatches)
    return any(size != 1 for size in sizes) or bool(args.zero or args.sp)


#: ``plan_parallel``'s and ``ParallelLayout``'s words for a size, and the flag that sets it.
_FLAG_WORDS = re.compile(r"\b(dp|tp|pp|zero|microbatches|batch|seq)=(\d+)")


def _in_flags(error: SpecError) -> str:
    """A layout's mistake in the command line's words: ``--dp 3``, not ``dp=3``."""
    text = re.sub(r"^(ParallelLayout|plan_parallel)\(\): ", "", str(error))
    return _FLAG_WORDS.sub(r"--\1 \2", text.replace("sp=True", "--sp"))


def _run_parallel(
    args: argparse.Namespace, name: str, config: TransformerConfig, spec: devices.DeviceSpec
) -> int:
    """``typedflops plan`` with a parallel layout: rank 0's share of the step."""
    if args.plot:
        raise UsageError("--plot draws one device's step: leave out the parallel layout")
    if args.peak is not None:
        raise UsageError("--peak is for one device's step: leave out the parallel layout")
    try:
        layout = ParallelLayout(
            dp=args.dp,
            zero=args.zero,
            tp=args.tp,
            sp=args.sp,
            pp=args.pp,
            microbatches=args.microbatches,
            checkpoint=args.checkpoint,
        )
        step = plan_parallel(
            config,
            args.batch,
            args.seq,
            spec,
            layout,
            dtype=_DTYPES[args.dtype],
            optimizer=None if args.optimizer == "none" else args.optimizer,
            mfu=args.mfu,
        )
    except SpecError as error:
        raise UsageError(_in_flags(error)) from None
    step = dataclasses.replace(step, model=name)
    print(json.dumps(step.to_dict(), indent=2) if args.json else step.text())
    return 0
