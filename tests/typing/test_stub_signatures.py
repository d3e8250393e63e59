"""typedflops' einops stubs against einops' own signatures, read from einops' installed
sources with ``inspect``, signature by signature.

For every signature mypy reads in einops (each overload of an overloaded function, the
signature of any other), the stubs declare one with the same parameters (names, kinds,
defaults); and a call made with arguments typed exactly as einops annotates them (its
tensor ``TypeVar`` left free, so any type at all) is accepted with the stubs and given the
type einops' own hints give it, but where the stubs say more on purpose.
"""

from __future__ import annotations

import ast
import inspect
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import einops
import einops.layers.torch
import einops.packing
import pytest
from mypy_runs import PLUGIN, ROOT, MypyRun, plain_python, run_mypy, write_torch_standin

STUBS = ROOT / "src" / "einops-stubs"
CONFIG = "[mypy]\nshow_error_codes = True\n"

# (label, the callable einops defines, the stub file, the stub's name for it, how to call it)
FUNCTIONS: list[tuple[str, Callable[..., Any], str, str]] = [
    ("rearrange", einops.rearrange, "einops.pyi", "rearrange"),
    ("reduce", einops.reduce, "einops.pyi", "reduce"),
    ("repeat", einops.repeat, "einops.pyi", "repeat"),
    ("einsum", einops.einsum, "einops.pyi", "einsum"),
    ("parse_shape", einops.parse_shape, "einops.pyi", "parse_shape"),
    ("asnumpy", einops.asnumpy, "einops.pyi", "asnumpy"),
    ("pack", einops.packing.pack, "packing.pyi", "pack"),
    ("unpack", einops.packing.unpack, "packing.pyi", "unpack"),
]
LAYERS = ["Rearrange", "Reduce", "EinMix"]
# Where the stubs give a call a more precise type than einops' own hints, on purpose.
MORE_PRECISE = {"parse_shape": ('"dict[Any, Any]"', '"dict[str, int]"')}


@dataclass(frozen=True)
class Signature:
    """One signature mypy reads for an einops callable, and how a probe calls it."""

    label: str
    signature: inspect.Signature
    stub_file: str
    stub_name: str  # a function, or Class.method
    callee: str  # the probe's call target


def einops_signatures() -> list[Signature]:
    """Each overload of an overloaded function, else its one signature (einops' sources)."""
    found: list[Signature] = []
    for label, function, stub_file, stub_name in FUNCTIONS:
        overloads = typing.get_overloads(function) or [function]
        for index, overload in enumerate(overloads):
            name = f"{label}#{index}" if len(overloads) > 1 else label
            found.append(Signature(name, inspect.signature(overload), stub_file, stub_name, label))
    for layer in LAYERS:
        cls = getattr(einops.layers.torch, layer)
        for method in ("__init__", "forward"):
            signature = inspect.signature(getattr(cls, method))
            found.append(
                Signature(f"{layer}.{method}", signature, "layers", f"{layer}.{method}", layer)
            )
    return found


def _stub_functions(stub_file: str, name: str) -> list[ast.FunctionDef]:
    """The stub's definitions of ``name`` (a function, or ``Class.method`` looked up in the
    class and, for layers, in the mixins it derives from)."""
    if stub_file == "layers":
        trees = [
            ast.parse((STUBS / "layers" / f).read_text()) for f in ("torch.pyi", "__init__.pyi")
        ]
    else:
        trees = [ast.parse((STUBS / stub_file).read_text())]
    owner, _, member = name.rpartition(".")
    found: list[ast.FunctionDef] = []
    for tree in trees:
        for node in tree.body:
            if not owner and isinstance(node, ast.FunctionDef) and node.name == member:
                found.append(node)
            if owner and isinstance(node, ast.ClassDef):
                mixins = {"Rearrange": "RearrangeMixin", "Reduce": "ReduceMixin"}
                if node.name in (owner, mixins.get(owner)):
                    found += [
                        item
                        for item in node.body
                        if isinstance(item, ast.FunctionDef) and item.name == member
                    ]
    return found


def _shape_of_stub(function: ast.FunctionDef) -> list[tuple[str, str, bool]]:
    args = function.args
    shape: list[tuple[str, str, bool]] = []
    positional = [*args.posonlyargs, *args.args]
    defaults = [False] * (len(positional) - len(args.defaults)) + [True] * len(args.defaults)
    for index, (arg, has_default) in enumerate(zip(positional, defaults, strict=True)):
        kind = "POSITIONAL_ONLY" if index < len(args.posonlyargs) else "POSITIONAL_OR_KEYWORD"
        shape.append((arg.arg, kind, has_default))
    if args.vararg:
        shape.append((args.vararg.arg, "VAR_POSITIONAL", False))
    for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        shape.append((arg.arg, "KEYWORD_ONLY", default is not None))
    if args.kwarg:
        shape.append((args.kwarg.arg, "VAR_KEYWORD", False))
    return shape


def _shape_of(signature: inspect.Signature) -> list[tuple[str, str, bool]]:
    return [
        (p.name, p.kind.name, p.default is not inspect.Parameter.empty)
        for p in signature.parameters.values()
    ]


@pytest.mark.parametrize("signature", einops_signatures(), ids=lambda s: s.label)
def test_the_stubs_declare_each_signature_with_einops_parameters(signature: Signature) -> None:
    stubs = [_shape_of_stub(f) for f in _stub_functions(signature.stub_file, signature.stub_name)]
    assert stubs, f"no stub for {signature.stub_name}"
    assert _shape_of(signature.signature) in stubs, (signature.signature, stubs)


def _annotation(parameter: inspect.Parameter) -> str:
    if parameter.annotation is inspect.Parameter.empty:
        return "Any"
    text = inspect.formatannotation(parameter.annotation)
    return re.sub(r"~\w+", "T", text)


def _probe(index: int, signature: Signature) -> str:
    """A function whose parameters are typed as einops types them, calling the callable."""
    parameters, arguments = [], []
    receiver = signature.label.endswith(".forward")
    params = list(signature.signature.parameters.values())
    if receiver or signature.label.endswith(".__init__"):
        params = params[1:]  # self
    if receiver:
        parameters.append(f"layer: {signature.callee}")
    previous_kind = None
    for parameter in params:
        if previous_kind == inspect.Parameter.POSITIONAL_ONLY and (
            parameter.kind != inspect.Parameter.POSITIONAL_ONLY
        ):
            parameters.append("/")
        previous_kind = parameter.kind
        typed = f"{parameter.name}: {_annotation(parameter)}"
        if parameter.kind == inspect.Parameter.VAR_POSITIONAL:
            parameters.append(f"*{typed}")
            arguments.append(f"*{parameter.name}")
        elif parameter.kind == inspect.Parameter.VAR_KEYWORD:
            parameters.append(f"**{typed}")
            arguments.append(f"**{parameter.name}")
        elif parameter.kind == inspect.Parameter.KEYWORD_ONLY:
            parameters.append(typed)
            arguments.append(f"{parameter.name}={parameter.name}")
        else:
            parameters.append(typed)
            arguments.append(parameter.name)
    if previous_kind == inspect.Parameter.POSITIONAL_ONLY:
        parameters.append("/")
    callee = "layer.forward" if receiver else signature.callee
    return (
        f"def probe_{index}({', '.join(parameters)}) -> None:\n"
        f"    reveal_type({callee}({', '.join(arguments)}))\n"
    )


def probe_module() -> str:
    """Every probe, one per signature, in one module."""
    head = (
        "from typing import Any, Callable, List, Optional, Sequence, Tuple, TypeVar, Union\n"
        "from einops import asnumpy, einsum, parse_shape, rearrange, reduce, repeat\n"
        "from einops.packing import pack, unpack\n"
        "from einops.layers.torch import EinMix, Rearrange, Reduce\n\n"
        'T = TypeVar("T")\n\n\n'
    )
    return head + "\n\n".join(_probe(i, s) for i, s in enumerate(einops_signatures()))


@pytest.fixture(scope="module")
def probes(tmp_path_factory: pytest.TempPathFactory) -> tuple[MypyRun, MypyRun, Path]:
    """(plain mypy on the probes with einops' own hints, mypy with typedflops' set-up)."""
    base = tmp_path_factory.mktemp("probes")
    standin = write_torch_standin(base / "stubs")  # layers import torch; its names suffice
    module = base / "probes.py"
    module.write_text(probe_module())
    config = CONFIG + f"mypy_path = {standin}\n"
    python = plain_python(base / "plain-env")
    plain = run_mypy([module], cache_dir=base / "plain", config=config, python=python, cwd=base)
    ours = run_mypy([module], cache_dir=base / "ours", config=config + PLUGIN, cwd=base)
    return plain, ours, module


def _revealed(run: MypyRun) -> dict[int, str]:
    found = {}
    for line in run.lines:
        match = re.match(r".*probes\.py:(\d+): note: Revealed type is (.*)$", line)
        if match:
            found[int(match[1])] = match[2]
    return found


def test_the_stubs_accept_every_call_einops_own_hints_accept(
    probes: tuple[MypyRun, MypyRun, Path],
) -> None:
    plain, ours, _ = probes
    assert not [line for line in plain.lines if ": error:" in line], plain.lines
    assert not [line for line in ours.lines if ": error:" in line], ours.lines


def test_the_stubs_give_each_call_the_type_einops_own_hints_give(
    probes: tuple[MypyRun, MypyRun, Path],
) -> None:
    plain, ours, module = probes
    plain_types, our_types = _revealed(plain), _revealed(ours)
    assert len(plain_types) == len(einops_signatures()) == len(our_types)
    lines = module.read_text().splitlines()
    different = []
    for line, plain_type in sorted(plain_types.items()):
        callee = re.search(r"reveal_type\((\w+)", lines[line - 1])
        expected = plain_type
        if callee and MORE_PRECISE.get(callee[1], ("", ""))[0] == plain_type:
            expected = MORE_PRECISE[callee[1]][1]
        if our_types[line] != expected:
            different.append(f"{lines[line - 1].strip()}: {plain_type} vs {our_types[line]}")
    assert not different, "\n".join(different)
