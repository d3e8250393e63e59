"""``@typed_flops`` as a decorator: forms, the descriptor matrix, nested calls, threads,
asyncio, torch.compile, the off switch and what it keeps of the wrapped function."""

from __future__ import annotations

import asyncio
import inspect
import os
import re
import subprocess
import sys
import textwrap
import threading
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from jaxtyping import Float
from torch import Tensor, nn

import typedflops
from typedflops import ContractError, ShapeError, SpecError, TypedFunction, typed_flops
from typedflops.contract.scope import current_call

Linear = TypedFunction[[Tensor, Tensor], Tensor]


def ones(*shape: int) -> Tensor:
    return torch.ones(shape)


# -- forms and what the wrapper keeps --------------------------------------------------------


def test_bare_and_called_forms() -> None:
    def body(x: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
        return x

    bare = typed_flops(body)
    called = typed_flops(name="renamed")(body)
    assert isinstance(bare, TypedFunction) and isinstance(called, TypedFunction)
    assert bare.name == "body" and called.name == "renamed"
    for f in (bare, called):
        with pytest.raises(ShapeError):
            f(ones(2, 2))


def test_options_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        typed_flops(lambda x: x, "2*n")  # type: ignore[call-overload]


def test_decorating_twice_checks_once(linear: Linear) -> None:
    assert typed_flops(linear) is linear


def test_signature_name_doc_and_wrapped() -> None:
    def original(x: Float[Tensor, "batch d"], *, scale: float = 1.0) -> Float[Tensor, " batch"]:
        """Sum the rows, scaled."""
        return x.sum(-1) * scale

    f = typed_flops(original)
    assert inspect.signature(f) == inspect.signature(original)
    assert list(inspect.signature(f).parameters) == ["x", "scale"]
    assert f.__name__ == "original"
    assert f.__qualname__ == original.__qualname__
    assert f.__doc__ == "Sum the rows, scaled."
    assert f.__module__ == original.__module__
    assert f.__wrapped__ is original
    assert inspect.unwrap(f) is original
    assert f.__annotations__ == original.__annotations__
    assert repr(f).startswith("<typed_flops original(x:")


def test_body_never_runs_on_a_bad_call() -> None:
    launched: list[tuple[int, ...]] = []

    @typed_flops
    def f(x: Float[Tensor, "n d"], w: Float[Tensor, "d k"], k: int) -> Float[Tensor, "n k"]:
        launched.append(tuple(x.shape))
        return x @ w

    f(ones(2, 3), ones(3, 4), 1)
    assert launched == [(2, 3)]
    bad_calls: list[Callable[[], Any]] = [
        lambda: f(ones(2, 3), ones(4, 4), 1),
        lambda: f(ones(2, 3), torch.ones(3, 4, dtype=torch.int64), 1),
        lambda: f(ones(2, 3), torch.ones(3, 4, device="meta"), 1),
        lambda: f(ones(2, 3), ones(3, 4), "one"),  # type: ignore[arg-type]
        lambda: f([1.0], ones(3, 4), 1),  # type: ignore[arg-type]
    ]
    for call in bad_calls:
        with pytest.raises(ContractError):
            call()
    assert launched == [(2, 3)]


def test_flops_formula_is_checked_at_decoration() -> None:
    @typed_flops(flops="2*batch*d_in*d_out")
    def mm(
        x: Float[Tensor, "batch d_in"], w: Float[Tensor, "d_in d_out"]
    ) -> Float[Tensor, "batch d_out"]:
        return x @ w

    assert str(mm.formula) == "2*batch*d_in*d_out"
    with pytest.raises(SpecError, match=re.escape("names d_hidden, which no annotation")):

        @typed_flops(flops="2*batch*d_hidden")  # type: ignore[flops-expr]
        def bad(x: Float[Tensor, "batch d_in"]) -> Float[Tensor, " batch"]:
            return x.sum(-1)


def test_import_in_a_formula_runs_nothing(tmp_path: Any) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(SpecError, match="function calls such as"):

        @typed_flops(flops=f"__import__('os').system('touch {marker}')")
        def f(x: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
            return x

    assert not marker.exists()


# -- the descriptor matrix ---------------------------------------------------------------------


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(4, 5))

    @typed_flops
    def forward(self, x: Float[Tensor, "b 4"]) -> Float[Tensor, "b 5"]:
        return x @ self.w

    @typed_flops
    def method(self, x: Float[Tensor, " n"], y: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
        return x + y

    @typed_flops
    @classmethod
    def class_outer(cls, x: Float[Tensor, " n"], y: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
        assert cls is Model
        return x + y

    @classmethod
    @typed_flops
    def class_inner(cls, x: Float[Tensor, " n"], y: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
        assert cls is Model
        return x + y

    @typed_flops
    @staticmethod
    def static_outer(x: Float[Tensor, " n"], y: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
        return x + y

    @staticmethod
    @typed_flops
    def static_inner(x: Float[Tensor, " n"], y: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
        return x + y

    @property
    @typed_flops
    def weight(self) -> Float[Tensor, "4 5"]:
        return self.w

    @property
    @typed_flops
    def broken(self) -> Float[Tensor, "5 5"]:
        return self.w


_CALLABLES = ["method", "class_outer", "class_inner", "static_outer", "static_inner"]


@pytest.mark.parametrize("name", _CALLABLES)
@pytest.mark.parametrize("through", ["instance", "class"])
def test_descriptor_matrix(name: str, through: str) -> None:
    model = Model()
    if through == "class" and name == "method":
        bound: Callable[..., Tensor] = lambda x, y: Model.method(model, x, y)  # noqa: E731
    else:
        bound = getattr(model if through == "instance" else Model, name)
    assert bound(ones(3), ones(3)).shape == (3,)
    with pytest.raises(ShapeError) as info:
        bound(ones(3), ones(4))
    assert info.value.argument == "y"
    assert info.value.function == f"Model.{name}"
    assert str(info.value).startswith(f"Model.{name}(): argument 'y' has shape (4,)")


def test_module_forward() -> None:
    model = Model()
    assert model(ones(2, 4)).shape == (2, 5)
    with pytest.raises(ShapeError, match=re.escape("Model.forward(): argument 'x' has shape")):
        model(ones(2, 3))
    out = model(ones(2, 4))
    out.sum().backward()
    assert model.w.grad is not None and model.w.grad.shape == (4, 5)


def test_property_getter() -> None:
    model = Model()
    assert model.weight.shape == (4, 5)
    with pytest.raises(ShapeError, match=re.escape("the return value has shape (4, 5)")):
        _ = model.broken


def test_bound_methods_of_two_instances_are_independent() -> None:
    a, b = Model(), Model()
    assert a.method(ones(2), ones(2)).shape == (2,)
    assert b.method(ones(7), ones(7)).shape == (7,)


# -- nested calls: each call has its own scope --------------------------------------------------


@typed_flops
def inner(x: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
    scope = current_call()
    assert scope is not None and scope.function == "inner"
    return x * 2


@typed_flops
def outer(x: Float[Tensor, "n m"]) -> Float[Tensor, " n"]:
    # The same name `n` with another size in the callee: no cross-talk.
    inner(torch.ones(x.shape[1] + 5))
    scope = current_call()
    assert scope is not None and scope.function == "outer"
    assert scope.sizes == {"n": x.shape[0], "m": x.shape[1]}
    return inner(x[:, 0])


def test_nested_calls_have_their_own_scope() -> None:
    assert current_call() is None
    assert outer(ones(2, 3)).shape == (2,)
    assert current_call() is None


def test_scope_is_restored_after_an_error_inside() -> None:
    @typed_flops
    def calls_badly(x: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
        inner(torch.ones(2, 2))
        return x

    with pytest.raises(ShapeError, match=re.escape("inner(): argument 'x' has shape (2, 2)")):
        calls_badly(ones(3))
    assert current_call() is None


def test_recursion() -> None:
    @typed_flops
    def halve(x: Float[Tensor, " n"]) -> Float[Tensor, " 1"]:
        return x[:1] if x.shape[0] == 1 else halve(x[: x.shape[0] // 2])

    assert halve(ones(64)).shape == (1,)


# -- threads -------------------------------------------------------------------------------------


def test_threads_with_their_own_sizes_do_not_cross_talk() -> None:
    threads_count, calls = 8, 150
    barrier = threading.Barrier(threads_count)
    failures: list[BaseException] = []
    caught = [0] * threads_count

    @typed_flops
    def mm(x: Float[Tensor, "b d"], w: Float[Tensor, "d k"]) -> Float[Tensor, "b k"]:
        inner(x[:, 0])  # nested: the callee's `n` is the caller's `b`
        return x @ w

    def worker(index: int) -> None:
        b, d, k = index + 1, index + 2, 2 * index + 1
        x, w, bad = torch.ones(b, d), torch.ones(d, k), torch.ones(d + 1, k)
        try:
            barrier.wait()
            for call in range(calls):
                assert mm(x, w).shape == (b, k)
                assert outer(torch.ones(b, d)).shape == (b,)
                if call % 10 == 0:
                    try:
                        mm(x, bad)
                    except ShapeError as error:
                        assert error.expected == d and error.actual == d + 1
                        assert error.bindings == {"b": b, "d": d}
                        caught[index] += 1
        except BaseException as error:  # surfaced by the main thread
            failures.append(error)

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads_count)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    assert failures == []
    assert caught == [calls // 10] * threads_count


@typed_flops
def identity(x: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
    return x


def test_disabled_is_per_thread() -> None:
    seen: list[bool] = []
    ready, done = threading.Event(), threading.Event()

    def other() -> None:
        ready.wait()
        try:
            identity(torch.ones(2, 2))
        except ShapeError:
            seen.append(True)
        else:
            seen.append(False)
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    with typedflops.disabled():
        ready.set()
        done.wait()
        identity(torch.ones(2, 2))  # unchecked here
    thread.join()
    assert seen == [True]


# -- asyncio -------------------------------------------------------------------------------------


@typed_flops
async def async_scale(x: Float[Tensor, " n"], grow: int) -> Float[Tensor, " n"]:
    await asyncio.sleep(0)
    scope = current_call()
    assert scope is not None and scope.function == "async_scale"
    return torch.ones(x.shape[0] + grow)


def test_async_checks_arguments_before_and_return_after_await() -> None:
    assert asyncio.run(async_scale(ones(3), 0)).shape == (3,)
    with pytest.raises(ShapeError, match=re.escape("argument 'x' has shape (2, 2)")):
        _ = async_scale(torch.ones(2, 2), 0)  # raises at the call, before any await
    with pytest.raises(ShapeError) as info:
        asyncio.run(async_scale(ones(3), 1))
    assert str(info.value).startswith("async_scale(): the return value has shape (4,)")
    assert info.value.argument == "return"


def test_async_function_stays_a_coroutine_function() -> None:
    # Frameworks (pytest-asyncio, FastAPI) decide how to call a function by asking this.
    assert asyncio.iscoroutinefunction(async_scale)


def test_async_tasks_interleave_without_cross_talk() -> None:
    async def main() -> list[tuple[int, ...]]:
        sizes = [1, 2, 3, 4, 5, 6, 7, 8] * 4
        results = await asyncio.gather(*(async_scale(ones(n), 0) for n in sizes))
        return [tuple(r.shape) for r in results]

    assert asyncio.run(main()) == [(n,) for n in [1, 2, 3, 4, 5, 6, 7, 8] * 4]
    assert current_call() is None


def test_disabled_is_per_task() -> None:
    async def unchecked() -> None:
        with typedflops.disabled():
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            identity(torch.ones(2, 2))

    async def checked() -> bool:
        await asyncio.sleep(0)
        try:
            identity(torch.ones(2, 2))
        except ShapeError:
            return True
        return False

    async def main() -> bool:
        _, caught = await asyncio.gather(unchecked(), checked())
        return caught

    assert asyncio.run(main()) is True


# -- the off switch -------------------------------------------------------------------------------


def test_disabled_nests_and_restores(linear: Linear) -> None:
    linear(ones(2, 3), ones(3, 4))
    assert typedflops.config.enabled()
    with typedflops.disabled():
        assert not typedflops.config.enabled()
        with typedflops.disabled():
            assert not typedflops.config.enabled()
            with typedflops.disabled(False):
                assert typedflops.config.enabled()
                with pytest.raises(ShapeError):
                    linear(ones(2, 3), ones(4, 4))
            assert not typedflops.config.enabled()
        assert not typedflops.config.enabled()
        with pytest.raises(RuntimeError):  # torch's own error: the contract is off
            linear(ones(2, 3), ones(4, 4))
        linear(ones(2, 3), ones(3, 4))
    assert typedflops.config.enabled()
    with pytest.raises(ShapeError):
        linear(ones(2, 3), ones(4, 4))


def test_disabled_restores_on_exceptions() -> None:
    with pytest.raises(KeyError), typedflops.disabled(), typedflops.disabled(False):
        raise KeyError("inner")
    assert typedflops.config.enabled()
    with pytest.raises(KeyError), typedflops.disabled():
        assert not typedflops.config.enabled()
        raise KeyError("outer")
    assert typedflops.config.enabled()
    with pytest.raises(ShapeError):
        identity(torch.ones(2, 2))


def test_disabled_skips_the_return_check() -> None:
    @typed_flops
    def wrong(x: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
        return torch.ones(x.shape[0] + 1)

    with typedflops.disabled():
        assert wrong(ones(2)).shape == (3,)
    with pytest.raises(ShapeError):
        wrong(ones(2))


def test_environment_variable_switches_checks_off() -> None:
    script = textwrap.dedent(
        """
        import torch
        from torch import Tensor
        from jaxtyping import Float
        import typedflops
        from typedflops import typed_flops

        @typed_flops
        def f(x: Float[Tensor, "n"], y: Float[Tensor, "n"]) -> Float[Tensor, "n"]:
            return x[:1] + y[:1]

        assert not typedflops.config.enabled()
        print(tuple(f(torch.ones(2), torch.ones(3)).shape))
        with typedflops.disabled(False):
            try:
                f(torch.ones(2), torch.ones(3))
            except typedflops.ShapeError:
                print("checked")
        """
    )
    env = {**os.environ, "TYPEDFLOPS_DISABLE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["(1,)", "checked"]


@pytest.mark.parametrize(
    ("value", "enabled"),
    [(None, True), ("", True), ("0", True), ("no", True), ("true", False), (" YES ", False)],
)
def test_environment_variable_values(value: str | None, enabled: bool) -> None:
    # typedflops.config imports neither torch nor the rest of the package: a fast subprocess
    script = "import typedflops.config as c; print(c.enabled())"
    env = {k: v for k, v in os.environ.items() if k != "TYPEDFLOPS_DISABLE"}
    if value is not None:
        env["TYPEDFLOPS_DISABLE"] = value
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.stdout.strip() == str(enabled), done.stderr


# -- torch.compile -----------------------------------------------------------------------------


@typed_flops
def compiled_linear(x: Float[Tensor, "b i"], w: Float[Tensor, "i o"]) -> Float[Tensor, "b o"]:
    return torch.relu(x @ w)


def _model(x: Tensor, w: Tensor) -> Tensor:
    return compiled_linear(x, w).sum() * 2


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_torch_compile(backend: str) -> None:
    direct = torch.compile(compiled_linear, backend=backend)
    model = torch.compile(_model, backend=backend)
    x, w = torch.randn(2, 3), torch.randn(3, 4)
    # valid calls never raise, at the first size and at a new one (a recompile)
    torch.testing.assert_close(direct(x, w), torch.relu(x @ w))
    torch.testing.assert_close(model(x, w), torch.relu(x @ w).sum() * 2)
    assert direct(torch.randn(5, 3), w).shape == (5, 4)
    assert model(torch.randn(5, 3), w).shape == ()
    # a mismatched call raises our ShapeError, not torch's error
    for compiled in (direct, model):
        with pytest.raises(ShapeError, match=re.escape("argument 'w' has shape (4, 4)")):
            compiled(x, torch.randn(4, 4))


@typed_flops
def wrong_return(x: Float[Tensor, "b i"], w: Float[Tensor, "i o"]) -> Float[Tensor, "b i"]:
    return x @ w  # type: ignore[dim-alias]  # the wrong return the test is about


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_compile_checks_the_return_value_too(dynamic: bool) -> None:
    compiled = torch.compile(wrong_return, backend="aot_eager", dynamic=dynamic)
    with pytest.raises(ShapeError, match=re.escape("wrong_return(): the return value has shape")):
        compiled(torch.randn(2, 3), torch.randn(3, 4))


@pytest.mark.usefixtures("fresh_dynamo")
def test_torch_compile_checks_cost_no_graph_break() -> None:
    # The checks become dynamo guards: one graph, no break, and fullgraph=True compiles.
    explained = torch._dynamo.explain(_model)(torch.randn(2, 3), torch.randn(3, 4))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    full = torch.compile(_model, backend="eager", fullgraph=True)
    assert full(torch.randn(2, 3), torch.randn(3, 4)).shape == ()
    assert full(torch.randn(5, 3), torch.randn(3, 4)).shape == ()
    # fullgraph=True lets no exception leave the graph: a violation still fails the call,
    # as dynamo's own error (it cannot be our ShapeError there).
    with pytest.raises(Exception, match="has shape"):
        full(torch.randn(2, 3), torch.randn(4, 4))


def test_a_function_without_annotations_is_said_to_have_nothing_to_check() -> None:
    with pytest.warns(UserWarning) as caught:
        here = sys._getframe().f_lineno + 2  # the line of @typed_flops

        @typed_flops
        def add(x, y):  # type: ignore[no-untyped-def]
            return x + y

    (warning,) = caught
    assert str(warning.message) == (
        "typedflops: add() has no annotations, so @typed_flops has nothing to check and no "
        'dims to write its formula in; annotate its tensors, e.g. x: Float[Tensor, "batch d"]'
    )
    assert (warning.filename, warning.lineno) == (__file__, here)
    assert torch.equal(add(torch.ones(2), torch.ones(2)), torch.full((2,), 2.0))


def test_a_function_with_only_plain_hints_has_something_to_check() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")

        @typed_flops
        def repeat_text(text: str, times: int) -> str:
            return text * times

    with pytest.raises(ContractError):
        repeat_text("a", "b")  # type: ignore[arg-type]
