"""The typedflops command: demo (the lecture's models, costed and timed), devices, plan.

The arguments are parsed, and checked, before torch is imported: ``--help``, ``--version``,
an unknown command or a bad flag answer at once. Bad usage is one line on stderr,
``typedflops: error: ...``, and exit status 2, found before any work is done.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .plot_path import check_plot_path

if TYPE_CHECKING:
    from ..errors import UsageError as UsageError

__all__ = ["UsageError", "check_plot_path", "main"]

HELP = """\
One jaxtyping annotation, three uses: shape checks, FLOP formulas and timings.
"""

EXAMPLES = """\
examples:
  typedflops demo                        the lecture's models on the best device
  typedflops demo --quick --plot r.png   tiny sizes, and a roofline plot (needs matplotlib)
  typedflops devices --wide              the peak table with the source of each row
  typedflops plan --model gpt2 --batch 8 --seq 1024
                                         FLOPs, memory and step time of a training step
  typedflops plan --model gpt3-175b --batch 1536 --seq 2048 --dp 8 --zero 1 --tp 8 --sp \\
      --pp 16 --microbatches 192         the same per rank, across 1024 GPUs
"""

PLAN_HELP = """\
Plan one training step of a named model: its FLOPs, its memory (parameters, gradients,
optimizer state, master weights, activations, and the peak), whether it fits the device,
and its time. Nothing is allocated: the step is dry-run on meta tensors, with the kernels
the device planned for runs. With a parallel layout (--dp, --zero, --tp, --sp, --pp,
--microbatches), rank 0's share of the step: the model split by torch's own sharding
under a fake process group of the layout's size, and the collectives it issues.
"""

#: The named models of typedflops.nn.CONFIGS (a test holds them equal), for --help and for
#: checking --model before torch is imported.
MODEL_NAMES = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "gpt3-175b", "llama-7b")
DTYPE_NAMES = ("bfloat16", "float16", "float32")
#: The optimizers training_memory knows (OPTIMIZER_STATES; a test holds them equal).
OPTIMIZER_NAMES = ("adamw", "adam", "sgd", "momentum", "adagrad", "rmsprop", "none")


def __getattr__(name: str) -> Any:
    # UsageError lives in typedflops.errors, which imports jaxtyping: not needed to parse.
    if name == "UsageError":
        from ..errors import UsageError

        return UsageError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _version() -> str:
    found = []
    for name in ("typedflops", "torch"):
        try:
            found.append(importlib.metadata.version(name))
        except importlib.metadata.PackageNotFoundError:
            found.append("unknown (not installed)")
    return f"typedflops {found[0]} (torch {found[1]})"


def _size(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size >= 1")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction in (0, 1], e.g. 0.4")
    return value


def _flop_per_sec(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of FLOP/s, e.g. 989e12")
    return value


def _model(text: str) -> str:
    # A named model, a JSON file or package.module:factory; the file and the factory are
    # read once torch is imported.
    if text in MODEL_NAMES or text.endswith(".json") or os.path.isfile(text) or ":" in text:
        return text
    raise argparse.ArgumentTypeError(
        f"{text!r} is no model: {_one_of(MODEL_NAMES)}, a JSON config file, or "
        "package.module:factory"
    )


def _add_plan_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "plan",
        help="FLOPs, memory and time of a training step of a named model",
        description=PLAN_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--model",
        required=True,
        type=_model,
        metavar="MODEL",
        help=f"{_one_of(MODEL_NAMES)}; or a JSON config (TransformerConfig's fields, or a "
        "Hugging Face config.json of GPT-2 or LLaMA); or package.module:factory",
    )
    parser.add_argument(
        "--batch", type=_size, required=True, metavar="B", help="sequences per step"
    )
    parser.add_argument("--seq", type=_size, required=True, metavar="S", help="tokens per sequence")
    parser.add_argument(
        "--device",
        default="H100 SXM",
        metavar="NAME",
        help='a device of the table `typedflops devices` prints (default: "H100 SXM")',
    )
    parser.add_argument(
        "--dtype", default="bfloat16", choices=DTYPE_NAMES, help="default: bfloat16"
    )
    parser.add_argument(
        "--optimizer",
        default="adamw",
        choices=OPTIMIZER_NAMES,
        metavar="NAME",
        help=f"{_one_of(OPTIMIZER_NAMES)} (default: adamw)",
    )
    parser.add_argument(
        "--mfu",
        type=_fraction,
        default=0.4,
        help="the MFU the predicted step time assumes (default: 0.4)",
    )
    parser.add_argument(
        "--peak",
        type=_flop_per_sec,
        metavar="FLOP/S",
        help="the device's peak FLOP/s at --dtype, instead of the table's",
    )
    parser.add_argument(
        "--checkpoint", action="store_true", help="recompute each block's forward in backward"
    )
    ranks = parser.add_argument_group(
        "parallel layout", "plan each rank's share of the step (torch's own sharding, dry-run)"
    )
    ranks.add_argument("--dp", type=_size, default=1, metavar="N", help="data-parallel ranks")
    ranks.add_argument(
        "--zero", type=int, default=0, choices=(0, 1, 2, 3), help="ZeRO stage (3: fully_shard)"
    )
    ranks.add_argument("--tp", type=_size, default=1, metavar="T", help="tensor-parallel ranks")
    ranks.add_argument("--sp", action="store_true", help="sequence parallelism (with --tp)")
    ranks.add_argument("--pp", type=_size, default=1, metavar="P", help="pipeline stages (1F1B)")
    ranks.add_argument(
        "--microbatches",
        type=_size,
        default=1,
        metavar="M",
        help="microbatches a step, per data-parallel rank",
    )
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.add_argument(
        "--plot", metavar="FILE", help="also plot memory and step time against the batch size"
    )


def _one_of(names: Sequence[str]) -> str:
    return f"one of {', '.join(names)}"


class _Parser(argparse.ArgumentParser):
    """argparse, whose errors are one line with the command's one prefix (no usage)."""

    def error(self, message: str) -> Any:
        self.exit(2, f"typedflops: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="typedflops",
        description=HELP,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", title="commands"
    )
    demo_parser = commands.add_parser(
        "demo",
        help="cost and time the lecture's models",
        description="Cost and time the linear and two-layer models of CS336 lecture 2.",
    )
    demo_parser.add_argument(
        "--device", metavar="DEVICE", help="cpu, cuda, cuda:N or mps (default: cuda if present)"
    )
    demo_parser.add_argument(
        "--plot", metavar="FILE", help="also write a roofline plot, e.g. roofline.png"
    )
    demo_parser.add_argument("--quick", action="store_true", help="tiny sizes, few runs")
    demo_parser.add_argument("--wide", action="store_true", help="every column, no wrapping")
    devices_parser = commands.add_parser(
        "devices",
        help="the peak FLOP/s table and this machine's device",
        description="The table of promised peaks and bandwidths, and this machine's device.",
    )
    devices_parser.add_argument(
        "--wide", action="store_true", help="also the source of each row, below the table"
    )
    _add_plan_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``typedflops`` console script; returns the exit status."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit_:  # --help, --version, or a bad argument (said on stderr)
        return exit_.code if isinstance(exit_.code, int) else 2
    try:
        if getattr(args, "plot", None):
            check_plot_path(args.plot)
        return _run(args)
    except KeyboardInterrupt:
        print("typedflops: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (``typedflops plan ... | head``): no traceback, and no
        # second error when Python flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as error:
        from ..errors import UsageError

        if not isinstance(error, UsageError):
            raise
        print(f"typedflops: error: {error}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    if args.command == "plan":
        from .plan_cli import run_plan

        return run_plan(args)
    from .demo import demo, devices_report

    if args.command == "demo":
        report = demo(device=args.device, plot=args.plot, quick=args.quick, wide=args.wide)
    else:
        report = devices_report(wide=args.wide)
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
