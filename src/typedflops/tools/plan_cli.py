"""``typedflops plan`` with parsed arguments: every argument checked before the dry runs, in
the command line's own words (its flags, not ``plan()``'s parameters)."""

from __future__ import annotations

import argparse
import json
import sys

import torch

from .. import devices
from ..devices.gpus import GPU_TABLE
from ..errors import SpecError, UsageError
from ..nn import CONFIGS
from ..planning.planner import plan, plot_plan

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
    config = CONFIGS[args.model]
    if args.seq > config.context:
        raise UsageError(f"--seq {args.seq} is longer than {args.model}'s context {config.context}")
    spec = _device(args.device)
    dtype = _DTYPES[args.dtype]
    if args.peak is None and devices.peak_source(dtype, spec, tf32=False)[0] is None:
        raise UsageError(
            f"--device {args.device!r}: {spec.name} has no {args.dtype} peak in the table; "
            "give one with --peak FLOP/S"
        )
    try:
        step = plan(
            args.model,
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
