"""The call in a decorated function's body that ran an op: its call site, and its name.

Inside a decorated call, ``record()`` names the ops by where the body made them: the
instruction of the body's frame that was running when the op ran (``x @ w``,
``torch.relu(h)``, ``self.proj(x)``, a helper's call). The ops of one site, one after
another, form one row of the call's breakdown, named after what the code there calls
(``matmul``, ``relu``, ``proj``). Finding a site reads frames only; its name is read from
the code (the instruction, and the source the compiler kept positions of) once, when a
breakdown first shows it.
"""

from __future__ import annotations

import ast
import dis
import linecache
import sys
import types
from typing import Any

__all__ = ["Site", "call_name", "find_site", "sites_of"]

#: How many frames up from an op a body's frame is looked for (modules inside modules).
_DEPTH = 64

# Operators as the names torch gives their methods (``__matmul__`` is ``matmul``).
_OPERATORS = {
    "@": "matmul",
    "+": "add",
    "-": "sub",
    "*": "mul",
    "/": "truediv",
    "//": "floordiv",
    "%": "mod",
    "**": "pow",
    "&": "and",
    "|": "or",
    "^": "xor",
    "<<": "lshift",
    ">>": "rshift",
    "<": "lt",
    "<=": "le",
    ">": "gt",
    ">=": "ge",
    "==": "eq",
    "!=": "ne",
}
_INSTRUCTIONS = {
    "BINARY_SUBSCR": "getitem",
    "STORE_SUBSCR": "setitem",
    "UNARY_NEGATIVE": "neg",
    "UNARY_INVERT": "invert",
    "UNARY_POSITIVE": "pos",
    "BINARY_MATRIX_MULTIPLY": "matmul",  # (Python 3.10)
    "INPLACE_MATRIX_MULTIPLY": "matmul",
    "BINARY_ADD": "add",
    "INPLACE_ADD": "add",
    "BINARY_SUBTRACT": "sub",
    "INPLACE_SUBTRACT": "sub",
    "BINARY_MULTIPLY": "mul",
    "INPLACE_MULTIPLY": "mul",
    "BINARY_TRUE_DIVIDE": "truediv",
    "INPLACE_TRUE_DIVIDE": "truediv",
    "BINARY_POWER": "pow",
    "INPLACE_POWER": "pow",
}


class Site:
    """One place in a body's code (an instruction) where it makes a call; one object per
    place, so that sites compare by identity."""

    __slots__ = ("_name", "code", "offset")

    def __init__(self, code: types.CodeType, offset: int) -> None:
        self.code = code
        self.offset = offset
        self._name: str | bool | None = False  # not read yet

    @property
    def name(self) -> str | None:
        """What the code calls there (``matmul``, ``relu``, ``proj``), if it can be read."""
        if self._name is False:
            try:
                self._name = call_name(self.code, self.offset)
            except Exception:  # code without source, or source that changed since
                self._name = None
        return self._name  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"<site {self.name} at {self.code.co_name}+{self.offset}>"


# Sites by code object (closures made in a loop share theirs), then by offset.
_SITES: dict[types.CodeType, dict[int, Site]] = {}
_getframe = sys._getframe


def sites_of(code: types.CodeType | None) -> dict[int, Site] | None:
    """The sites of a body's code, by offset (None for a body without code)."""
    if code is None:
        return None
    found = _SITES.get(code)
    if found is None:
        found = _SITES[code] = {}
    return found


def find_site(code: types.CodeType, sites: dict[int, Site]) -> Site | None:
    """The site of ``code``'s innermost running frame that the current op runs under (None
    when no frame of it is found near)."""
    frame: types.FrameType | None = _getframe(1)
    for _ in range(_DEPTH):
        if frame is None:
            return None
        if frame.f_code is code:
            offset = frame.f_lasti
            site = sites.get(offset)
            if site is None:
                site = sites[offset] = Site(code, offset)
            return site
        frame = frame.f_back
    return None


def call_name(code: types.CodeType, offset: int) -> str | None:
    """The name of what the instruction at ``offset`` calls: an operator's (``matmul``),
    the called function's or method's (``relu``, ``proj``), an attribute's (``T``)."""
    instruction = None
    for candidate in dis.get_instructions(code):
        if candidate.offset > offset:
            break
        instruction = candidate  # (a call into Python code stops on its inline caches)
    if instruction is None:
        return None
    opname = instruction.opname
    shown = str(instruction.argrepr)
    if opname == "COMPARE_OP":
        return _OPERATORS.get(shown.removeprefix("bool(").removesuffix(")"))
    if opname == "BINARY_OP":  # (in place: "+=")
        return _OPERATORS.get(shown[:-1] if shown.endswith("=") else shown)
    if opname in _INSTRUCTIONS:
        return _INSTRUCTIONS[opname]
    if opname in ("LOAD_ATTR", "LOAD_METHOD"):
        return str(instruction.argval)
    if opname.startswith("CALL"):
        return _called(code, instruction)
    return None


def _called(code: types.CodeType, instruction: dis.Instruction) -> str | None:
    """The name of the function a call instruction calls, from the call's source."""
    positions = getattr(instruction, "positions", None)  # (Python 3.11 and later)
    if positions is None or positions.lineno is None or positions.end_lineno is None:
        return None
    lines = linecache.getlines(code.co_filename)[positions.lineno - 1 : positions.end_lineno]
    if not lines or positions.col_offset is None or positions.end_col_offset is None:
        return None
    # Column offsets count UTF-8 bytes.
    encoded = [line.encode() for line in lines]
    encoded[-1] = encoded[-1][: positions.end_col_offset]
    encoded[0] = encoded[0][positions.col_offset :]
    source = b"".join(encoded).decode()
    try:
        expression: Any = ast.parse(source.strip(), mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(expression, ast.Call):
        return None
    function = expression.func
    while isinstance(function, ast.Subscript | ast.Call):  # self.blocks[i](x), f(a)(b)
        function = function.value if isinstance(function, ast.Subscript) else function.func
    if isinstance(function, ast.Attribute):
        return _normal(function.attr)
    if isinstance(function, ast.Name):
        return _normal(function.id)
    return None


def _normal(name: str) -> str:
    """A method's name as a row names it: ``add_`` (in place) is ``add``."""
    if name.endswith("_") and not name.startswith("_"):
        return name[:-1]
    return name
