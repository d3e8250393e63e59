"""The error vocabulary and message shapes of SPEC §5, locked by exact fragments."""

from __future__ import annotations

import ast
import pickle
import re
import traceback
import typing
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import einops
import jaxtyping
import pytest
import torch
from jaxtyping import Float, Int
from torch import Tensor

import typedflops
from typedflops import (
    ContractError,
    DeviceError,
    DtypeError,
    PatternError,
    ShapeError,
    SpecError,
    TypedFunction,
    errors,
    rearrange,
    typed_flops,
)
from typedflops.errors import UnresolvedHintError

Linear = TypedFunction[[Tensor, Tensor], Tensor]


def _raised(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> ContractError:
    with pytest.raises(ContractError) as info:
        fn(*args, **kwargs)
    return info.value


# -- hierarchy ---------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [ShapeError, DtypeError, DeviceError])
def test_contract_errors_are_type_check_errors(cls: type[ContractError]) -> None:
    assert issubclass(cls, ContractError)
    assert issubclass(cls, jaxtyping.TypeCheckError)
    assert issubclass(cls, TypeError)
    assert not issubclass(cls, SpecError)


def test_spec_and_pattern_errors() -> None:
    assert issubclass(SpecError, ValueError)
    assert not issubclass(SpecError, TypeError)
    assert issubclass(PatternError, SpecError)
    assert issubclass(PatternError, einops.EinopsError)


def test_attributes_default_to_empty() -> None:
    error = ContractError("boom")
    assert (error.function, error.argument, error.dim, error.expected, error.actual) == (
        None,
        None,
        None,
        None,
        None,
    )
    assert error.bindings == {}
    assert str(error) == "boom"


# -- the SPEC's example, exactly -----------------------------------------------------------


def test_spec_example_message_exactly(linear: Linear) -> None:
    error = _raised(linear, torch.ones(8, 784), torch.ones(600, 10))
    assert type(error) is ShapeError
    assert str(error).splitlines() == [
        "linear(): argument 'w' has shape (600, 10) but its annotation \"d_in d_out\" "
        "needs d_in=784",
        "  d_in=784 was bound by argument 'x' (shape (8, 784), axis 1)",
        "  bound so far: batch=8, d_in=784",
    ]


def test_spec_example_attributes(linear: Linear) -> None:
    error = _raised(linear, torch.ones(8, 784), torch.ones(600, 10))
    assert error.function == "linear"
    assert error.argument == "w"
    assert error.dim == "d_in"
    assert error.expected == 784
    assert error.actual == 600
    assert error.bindings == {"batch": 8, "d_in": 784}


def test_one_exception_no_chain(linear: Linear) -> None:
    error = _raised(linear, torch.ones(8, 784), torch.ones(600, 10))
    assert error.__cause__ is None
    assert error.__context__ is None
    text = "".join(traceback.format_exception(error))
    assert "During handling" not in text
    assert "direct cause" not in text
    assert text.count("ShapeError:") == 1


def test_return_error_is_one_exception(linear: Linear) -> None:
    @typed_flops
    def wrong(x: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
        return torch.ones(4)

    error = _raised(wrong, torch.ones(3))
    assert error.__cause__ is None and error.__context__ is None
    assert str(error).splitlines()[0] == (
        'wrong(): the return value has shape (4,) but its annotation "n" needs n=3'
    )
    assert error.argument == "return"
    assert (error.dim, error.expected, error.actual) == ("n", 3, 4)


def test_shapes_not_values(linear: Linear) -> None:
    x = torch.full((2, 3), 98765.4321)
    error = _raised(linear, x, torch.full((4, 5), 12345.678))
    assert "98765" not in str(error)
    assert "12345" not in str(error)
    assert "tensor(" not in str(error)
    assert "(2, 3)" in str(error) and "(4, 5)" in str(error)


def test_bindings_are_a_snapshot(linear: Linear) -> None:
    error = _raised(linear, torch.ones(2, 3), torch.ones(4, 5))
    bindings = error.bindings
    linear(torch.ones(7, 7), torch.ones(7, 7))
    assert error.bindings is bindings
    assert bindings == {"batch": 2, "d_in": 3}


# -- each kind of violation ---------------------------------------------------------------


def test_rank_message_has_no_bound_line_when_nothing_is_bound() -> None:
    @typed_flops
    def f(x: Float[Tensor, "n m"]) -> None:
        pass

    error = _raised(f, torch.ones(3))
    assert type(error) is ShapeError
    assert (
        str(error)
        == "f(): argument 'x' has shape (3,) but its annotation \"n m\" needs 2 dimensions"
    )
    assert (error.expected, error.actual, error.dim) == (2, 1, None)


def test_fixed_size_message() -> None:
    @typed_flops
    def f(x: Float[Tensor, "n 4"]) -> None:
        pass

    error = _raised(f, torch.ones(2, 3))
    assert str(error).splitlines() == [
        "f(): argument 'x' has shape (2, 3) but its annotation \"n 4\" needs size 4 at axis 1",
        "  bound so far: n=2",
    ]
    assert (error.expected, error.actual) == (4, 3)


def test_variadic_message() -> None:
    @typed_flops
    def f(x: Float[Tensor, "*batch d"], y: Float[Tensor, "*batch d"]) -> None:
        pass

    error = _raised(f, torch.ones(2, 3, 4), torch.ones(3, 3, 4))
    lines = str(error).splitlines()
    assert lines[0] == (
        "f(): argument 'y' has shape (3, 3, 4) but its annotation \"*batch d\" needs *batch=(2, 3)"
    )
    assert lines[1] == "  batch=(2, 3) was bound by argument 'x' (shape (2, 3, 4), axis 0)"
    assert (error.dim, error.expected, error.actual) == ("batch", (2, 3), (3, 3))


def test_symbolic_message() -> None:
    @typed_flops
    def f(x: Float[Tensor, "h dh"]) -> Float[Tensor, " h*dh"]:
        return torch.ones(5)

    error = _raised(f, torch.ones(2, 3))
    assert str(error).splitlines() == [
        'f(): the return value has shape (5,) but its annotation "h*dh" needs h*dh=6 at axis 0',
        "  dh=3 was bound by argument 'x' (shape (2, 3), axis 1)",
        "  h=2 was bound by argument 'x' (shape (2, 3), axis 0)",
        "  bound so far: h=2, dh=3",
    ]
    assert (error.dim, error.expected, error.actual) == ("h*dh", 6, 5)


def test_dtype_message() -> None:
    @typed_flops
    def f(x: Int[Tensor, " n"]) -> None:
        pass

    error = _raised(f, torch.ones(3))
    assert type(error) is DtypeError
    assert str(error) == (
        "f(): argument 'x' has dtype float32 but its annotation Int[Tensor, \"n\"] needs "
        "an Int dtype (int16, int2, int32, int4, int64, int8)"
    )
    assert error.actual == torch.float32
    assert error.argument == "x"


def test_long_dtype_lists_are_cut() -> None:
    @typed_flops
    def f(x: Float[Tensor, " n"]) -> None:
        pass

    message = str(_raised(f, torch.ones(3, dtype=torch.int64)))
    assert message.startswith("f(): argument 'x' has dtype int64 but its annotation Float[")
    assert re.search(r"needs a Float dtype \((\w+, ){5}\.\.\.\)$", message)


def test_device_message() -> None:
    @typed_flops
    def f(x: Float[Tensor, " n"], y: Float[Tensor, " n"]) -> None:
        pass

    error = _raised(f, torch.ones(3), torch.ones(3, device="meta"))
    assert type(error) is DeviceError
    assert str(error).splitlines()[0] == (
        "f(): argument 'y' is on meta but argument 'x' is on cpu; "
        "all tensors of one call must be on one device"
    )
    assert (error.expected, error.actual) == (torch.device("cpu"), torch.device("meta"))


def test_non_tensor_for_a_tensor() -> None:
    @typed_flops
    def f(x: Float[Tensor, " n"]) -> None:
        pass

    error = _raised(f, [1.0, 2.0])
    assert type(error) is ContractError
    assert str(error) == (
        "f(): argument 'x' is a list but its annotation Float[Tensor, \"n\"] needs a torch.Tensor"
    )


def test_non_tensor_hint_carries_beartypes_reason() -> None:
    @typed_flops
    def f(x: Float[Tensor, " n"], k: int) -> None:
        pass

    error = _raised(f, torch.ones(3), "four")
    assert type(error) is ContractError
    first = str(error).splitlines()[0]
    # beartype's own reason, without its internal function name
    assert "Die_if_unbearable" not in str(error)
    assert first == "f(): argument 'k' violates its hint int: str 'four' not instance of int"
    assert error.argument == "k"
    assert (error.expected, error.actual) == ("int", "str")


def test_element_of_a_container_is_named() -> None:
    @typed_flops
    def f(xs: list[Float[Tensor, "n d"]]) -> None:
        pass

    xs = [torch.ones(2, 3)] * 5 + [torch.ones(2, 4)]
    error = _raised(f, xs)
    assert str(error).splitlines() == [
        "f(): argument 'xs[5]' has shape (2, 4) but its annotation \"n d\" needs d=3",
        "  d=3 was bound by argument 'xs[0]' (shape (2, 3), axis 1)",
        "  bound so far: n=2, d=3",
    ]
    assert error.argument == "xs[5]"


def test_errors_can_be_caught_as_type_error(linear: Linear) -> None:
    with pytest.raises(TypeError, match=re.escape("needs d_in=3")):
        linear(torch.ones(2, 3), torch.ones(4, 5))


def test_method_name_in_message() -> None:
    class Model:
        @typed_flops
        def forward(self, x: Float[Tensor, "n 4"]) -> None:
            pass

    error = _raised(Model().forward, torch.ones(2, 5))
    assert str(error).startswith("Model.forward(): argument 'x' has shape (2, 5)")
    assert error.function == "Model.forward"


def test_name_option_is_used_in_messages() -> None:
    @typed_flops(name="projection")
    def f(x: Float[Tensor, "n 4"]) -> None:
        pass

    assert str(_raised(f, torch.ones(2, 5))).startswith("projection(): argument 'x'")


# -- SpecError at decoration --------------------------------------------------------------


def test_unbound_symbolic_name_at_decoration() -> None:
    with pytest.raises(SpecError) as info:

        @typed_flops
        def f(x: Float[Tensor, " n"]) -> Float[Tensor, " m+1"]:
            return x

    assert str(info.value) == (
        'f(): return annotation "m+1" uses m in "m+1" but no parameter\'s annotation binds it'
    )


@pytest.mark.parametrize(
    ("formula", "fragment"),
    [
        ("2*(batch", "not a valid expression"),
        ("2*batch*oops", "names oops, which no annotation of f binds (its dims: batch, d)"),
        ("abs(batch)", "function calls such as 'abs(batch)' are not allowed"),
        ("batch.real", "'batch.real' is not allowed"),
        ("'batch'", "the literal 'batch' is not an integer"),
        ("2.5*batch", "the literal 2.5 is not an integer"),
        ("batch if d else 1", "is not allowed"),
        ("__import__('os').system('x')", "function calls such as"),
    ],
)
def test_bad_flops_formula_at_decoration(formula: str, fragment: str) -> None:
    with pytest.raises(SpecError, match=re.escape(fragment)):

        @typed_flops(flops=formula)
        def f(x: Float[Tensor, "batch d"]) -> Float[Tensor, " batch"]:
            return x.sum(-1)


def test_a_hint_beartype_cannot_check_at_decoration() -> None:
    def f(rows: Any) -> int:
        return 0

    f.__annotations__["rows"] = typing.cast(Any, list)[int, str]  # list takes one type
    with pytest.raises(SpecError) as info:
        typed_flops(f)
    assert str(info.value).startswith("hint list[int, str]: beartype cannot check it (")


def test_deprecated_typing_hints_check_without_warnings() -> None:
    # Dict[str, Any] and Callable[..., Tensor] are valid; beartype's PEP 585 deprecation
    # warnings about them are not passed on, neither for a good call nor for a bad one.
    def f(fn: typing.Callable[..., Tensor], extra: typing.Dict[str, Any] | None) -> None:  # noqa: UP006
        return None

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        checked = typed_flops(f)
        checked(torch.neg, {"a": 1})
        message = "f(): argument 'extra' violates its hint dict[str, Any] | None: int 3 not"
        with pytest.raises(ContractError, match=re.escape(message)):
            checked(torch.neg, 3)  # type: ignore[arg-type]


# -- the SpecError builder ------------------------------------------------------------------


def test_the_builder_joins_where_reason_hint_and_context() -> None:
    error = SpecError.at(
        "f.estimate()", "missing size for k", hint="pass k=...", context=["one", "two"]
    )
    assert str(error) == "f.estimate(): missing size for k; pass k=...\n  one\n  two"
    assert error.args == (str(error),)
    assert (error.where, error.reason, error.hint, error.context) == (
        "f.estimate()",
        "missing size for k",
        "pass k=...",
        ("one", "two"),
    )


@pytest.mark.parametrize("where", [None, ""])
def test_the_builder_without_where_or_hint_is_the_reason(where: str | None) -> None:
    error = SpecError.at(where, "peak= must be positive")
    assert str(error) == "peak= must be positive"
    assert (error.where, error.reason, error.hint, error.context) == (
        None,
        "peak= must be positive",
        None,
        (),
    )


def test_a_spec_error_made_by_hand_is_all_reason() -> None:
    error = SpecError("f(): bad")
    assert str(error) == "f(): bad"
    assert (error.where, error.reason, error.hint, error.context) == (None, "f(): bad", None, ())
    assert str(SpecError()) == "" and SpecError().reason == ""


def test_the_builder_makes_the_class_it_is_called_on() -> None:
    pattern = PatternError.at('rearrange "a -> b"', "axis 'a' is on one side only")
    assert type(pattern) is PatternError
    assert isinstance(pattern, einops.EinopsError)
    unresolved = UnresolvedHintError.at("f()", "cannot resolve its type hints (name 'T')")
    assert type(unresolved) is UnresolvedHintError
    assert isinstance(unresolved, NameError) and isinstance(unresolved, SpecError)
    assert str(unresolved) == "f(): cannot resolve its type hints (name 'T')"


@pytest.mark.parametrize("cls", [SpecError, PatternError, UnresolvedHintError])
def test_spec_errors_pickle_with_their_parts(cls: type[SpecError]) -> None:
    error = cls.at('annotation "n m"', "why", hint="what instead", context=["shapes: (2,)"])
    loaded = pickle.loads(pickle.dumps(error))
    assert type(loaded) is cls
    assert str(loaded) == str(error) and loaded.args == error.args
    assert (loaded.where, loaded.reason, loaded.hint, loaded.context) == (
        'annotation "n m"',
        "why",
        "what instead",
        ("shapes: (2,)",),
    )


def test_contract_errors_pickle_with_their_parts() -> None:
    error = ShapeError("f(): bad shape", function="f", argument="x", bindings={"n": 2})
    loaded = pickle.loads(pickle.dumps(error))
    assert type(loaded) is ShapeError and str(loaded) == "f(): bad shape"
    assert (loaded.function, loaded.argument, loaded.bindings) == ("f", "x", {"n": 2})


def test_raised_spec_errors_carry_their_parts(linear: Linear) -> None:
    with pytest.raises(SpecError) as info:
        linear.estimate(batch=8)
    error = info.value
    assert (
        str(error) == "linear.estimate(): missing sizes for d_in, d_out; pass d_in=..., d_out=..."
    )
    assert (error.where, error.reason, error.hint) == (
        "linear.estimate()",
        "missing sizes for d_in, d_out",
        "pass d_in=..., d_out=...",
    )

    with pytest.raises(SpecError) as info:

        @typed_flops
        def f(x: Float[Tensor, "n 2*"]) -> Float[Tensor, " n"]:
            return x

    assert info.value.where == 'annotation "n 2*"'
    assert info.value.reason.startswith("symbolic axis '2*': not a valid expression")
    assert info.value.hint is None


def test_raised_pattern_errors_carry_their_context() -> None:
    with pytest.raises(PatternError) as info:
        rearrange(torch.ones(2, 3), "a b -> b c")  # type: ignore[pattern]
    error = info.value
    assert (error.where, error.reason, error.context) == (
        'rearrange "a b -> b c"',
        "axis 'a' is on one side only (rearrange keeps every axis)",
        ("input shapes: (2, 3)", "offending axis: a"),
    )
    assert str(error).splitlines() == [
        "rearrange \"a b -> b c\": axis 'a' is on one side only (rearrange keeps every axis)",
        "  input shapes: (2, 3)",
        "  offending axis: a",
    ]


def test_unresolved_hints_are_spec_errors_from_errors_py() -> None:
    @typed_flops
    def f(x: Undefined) -> None:  # type: ignore[name-defined]  # noqa: F821
        return None

    with pytest.raises(UnresolvedHintError) as info:
        f(1)
    assert (info.value.where, info.value.reason) == (
        "f()",
        "cannot resolve its type hints (name 'Undefined' is not defined)",
    )
    assert type(info.value).__module__ == "typedflops.errors"


# -- one home for error classes, one builder for SpecError messages -------------------------

_SOURCE = Path(typedflops.__file__).parent


def _modules() -> list[tuple[str, ast.Module]]:
    return [
        (path.relative_to(_SOURCE).as_posix(), ast.parse(path.read_text(), str(path)))
        for path in sorted(_SOURCE.rglob("*.py"))
    ]


def _base_names(node: ast.ClassDef) -> set[str]:
    return {ast.unparse(base).rsplit(".", 1)[-1] for base in node.bases}


def test_every_error_class_is_defined_in_errors_py() -> None:
    """``syntax.Problem`` is the one exception: the grammar core's short reason, which the
    mypy plugin imports too, so it cannot live beside classes built on jaxtyping's. A
    private class (``_Poisoned``) is a signal inside one module that no user meets."""
    known = {"BaseException", "Exception", "Warning"} | {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, BaseException)
    }
    elsewhere = [
        f"{module}: {node.name}"
        for module, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        and module != "errors.py"
        and not node.name.startswith("_")
        and (
            _base_names(node) & known
            or any(name.endswith(("Error", "Exception")) for name in _base_names(node))
        )
    ]
    assert elsewhere == ["syntax/__init__.py: Problem"]


def test_spec_error_messages_are_built_only_by_the_builder() -> None:
    """Outside errors.py, a SpecError (or subclass) is only made by ``.at(...)``."""
    classes = {"SpecError", "PatternError", "UnresolvedHintError"}
    direct = [
        f"{module}:{node.lineno}"
        for module, tree in _modules()
        if module != "errors.py"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and ast.unparse(node.func).rsplit(".", 1)[-1] in classes
    ]
    assert direct == []


def test_moved_error_classes_keep_their_old_import_paths() -> None:
    from typedflops.contract import checkers
    from typedflops.tools import cli

    assert checkers.UnresolvedHintError is UnresolvedHintError
    assert cli.UsageError is errors.UsageError
