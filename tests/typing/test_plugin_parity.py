"""The mypy plugin against typedflops' runtime: on generated einops calls and ``flops=``
formulas, the plugin reports exactly where the runtime raises, in the same words.

Each example is a batch of calls written into one module, checked by mypy once and run
once by typedflops (a few batches: each costs a mypy run)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from jaxtyping import Float
from mypy_runs import PLUGIN, STRICT, run_mypy, shared_cache
from syntax_strategies import TransformCase, einsum_cases, shape_for, transform_cases
from torch import Tensor

import typedflops
from typedflops import PatternError, SpecError

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore::FutureWarning")

HEADER = """from jaxtyping import Float
from torch import Tensor

from typedflops import einsum, rearrange, reduce, repeat, typed_flops
"""
FORMULA_TOKENS = (
    "batch",
    "d_in",
    "d_ot",
    "2",
    "1_000",
    "0x10",
    "+",
    "*",
    "**",
    "//",
    "/",
    "(",
    ")",
    "-",
    "9**9**9",
    "abs(batch)",
    "1.5",
    "0",
)


@st.composite
def formulas(draw: st.DrawFn) -> str:
    """A flops= formula, right or wrong."""
    return " ".join(draw(st.lists(st.sampled_from(FORMULA_TOKENS), min_size=1, max_size=5)))


Case = tuple[str, Any]  # ("transform", TransformCase) | ("einsum", (pattern, count)) | ...


def _source(index: int, kind: str, case: Any) -> tuple[str, int]:
    """The code of one case, and the offset of the line that carries its call."""
    name = f"case_{index}"
    if kind == "flops":
        return (
            f"@typed_flops(flops={case!r})\n"
            f'def {name}(x: Float[Tensor, "batch d_in"]) -> Float[Tensor, "batch d_in"]:\n'
            "    return x\n",
            0,
        )
    if kind == "einsum":
        pattern, count = case
        params = ", ".join(f"x{i}: Tensor" for i in range(count))
        args = ", ".join(f"x{i}" for i in range(count))
        return f"def {name}({params}) -> None:\n    einsum({args}, {pattern!r})\n", 1
    assert isinstance(case, TransformCase)
    lengths = "".join(f", {axis}={size}" for axis, size in case.lengths)
    reduction = ', "sum"' if case.op == "reduce" else ""
    call = f"{case.op}(x, {case.pattern!r}{reduction}{lengths})"
    return f"def {name}(x: Tensor) -> None:\n    {call}\n", 1


def _runtime_message(index: int, kind: str, case: Any) -> str | None:
    """The first line of the error typedflops raises for the case, or None."""
    try:
        if kind == "flops":

            def fn(x: Tensor) -> Tensor:
                return x

            fn.__qualname__ = fn.__name__ = f"case_{index}"
            fn.__annotations__ = {
                "x": Float[Tensor, "batch d_in"],
                "return": Float[Tensor, "batch d_in"],
            }
            typedflops.typed_flops(flops=case)(fn)
        elif kind == "einsum":
            pattern, count = case
            texts = pattern.split("->")[0].split(",")
            operands = [
                torch.zeros(shape_for(texts[i] if i < len(texts) else "a", einsum=True))
                for i in range(count)
            ]
            typedflops.einsum(*operands, pattern)
        else:
            x = torch.zeros(shape_for(case.pattern.split("->")[0]))
            args: tuple[Any, ...] = ("sum",) if case.op == "reduce" else ()
            getattr(typedflops, case.op)(x, case.pattern, *args, **dict(case.lengths))
    except (PatternError, SpecError) as error:
        return str(error).splitlines()[0]
    return None


CASES = st.lists(
    st.one_of(
        transform_cases().map(lambda case: ("transform", case)),
        einsum_cases().map(lambda case: ("einsum", case)),
        formulas().map(lambda case: ("flops", case)),
    ),
    min_size=100,
    max_size=100,
)


@settings(
    max_examples=4,
    deadline=None,
    phases=(Phase.generate,),
    suppress_health_check=list(HealthCheck),
)
@given(CASES)
def test_plugin_reports_what_the_runtime_raises(
    tmp_path_factory: pytest.TempPathFactory, cases: list[Case]
) -> None:
    directory = tmp_path_factory.mktemp("parity")
    lines = [HEADER]
    call_lines: dict[int, int] = {}
    line = HEADER.count("\n") + 1
    for index, (kind, case) in enumerate(cases):
        code, offset = _source(index, kind, case)
        lines.append("\n\n" + code)
        line += 2
        call_lines[line + offset] = index
        line += code.count("\n")
    module = directory / "generated_calls.py"
    module.write_text("".join(lines))
    run = run_mypy([module], cache_dir=shared_cache("plugin"), config=STRICT + PLUGIN)
    reported: dict[int, list[str]] = {}
    for found in run.diagnostics:
        reported.setdefault(found.line, []).append(found.message)
    assert set(reported) <= set(call_lines), run.lines
    mismatches = []
    for number, index in call_lines.items():
        kind, case = cases[index]
        expected = _runtime_message(index, kind, case)
        got = reported.get(number, [])
        if got != ([] if expected is None else [expected]):
            mismatches.append(f"{kind} {case!r}: runtime {expected!r}, plugin {got!r}")
    assert not mismatches, "\n".join(mismatches)
