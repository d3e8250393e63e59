"""Decorated functions and methods pickle by reference, as plain ones do, so they reach
spawn-based worker processes (DataLoader workers, multiprocessing pools)."""

from __future__ import annotations

import copy
import inspect
import multiprocessing
import pickle
import re
from typing import Any

import pytest
import torch
from jaxtyping import Float
from picklable import Scaler, double, row_sums
from torch import Tensor

from typedflops import ShapeError, TypedFunction, typed_flops
from typedflops.contract.bound import TypedMethod


def _round_trip(obj: Any) -> Any:
    return pickle.loads(pickle.dumps(obj))


def test_functions_and_methods_unpickle_as_the_same_objects() -> None:
    assert _round_trip(double) is double
    assert _round_trip(Scaler.forward) is Scaler.forward
    assert _round_trip(Scaler.negate) is Scaler.negate  # a staticmethod
    assert isinstance(double, TypedFunction)
    assert copy.deepcopy(double) is double
    assert copy.copy(double) is double


def test_bound_methods_pickle_their_object_and_name() -> None:
    scaler = Scaler(3)
    for method in (scaler.forward, scaler.apply):
        assert isinstance(method, TypedMethod)
        loaded = _round_trip(method)
        assert isinstance(loaded, TypedMethod)
        assert loaded.__func__ is method.__func__
        assert loaded.__self__.factor == 3
        torch.testing.assert_close(loaded(torch.ones(2)), torch.full((2,), 3.0))
    assert list(inspect.signature(scaler.forward).parameters) == ["x"]  # as a bound method
    assert scaler.forward == scaler.forward and scaler.forward != Scaler(3).forward
    loaded_cls = _round_trip(Scaler.unit)  # a classmethod, bound to the class
    assert loaded_cls == Scaler.unit
    assert loaded_cls.__self__ is Scaler


def test_unpickled_functions_keep_their_contract() -> None:
    loaded = _round_trip(double)
    assert isinstance(loaded, TypedFunction)
    with pytest.raises(ShapeError, match=re.escape("argument 'x' has shape (2, 2)")):
        loaded(torch.ones(2, 2))


def test_modules_with_decorated_methods_pickle() -> None:
    loaded = _round_trip(Scaler(4))
    assert isinstance(loaded, Scaler)
    torch.testing.assert_close(loaded(torch.ones(3)), torch.full((3,), 4.0))


def test_local_functions_fail_to_pickle_as_plain_ones_do() -> None:
    def plain(x: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
        return x

    checked = typed_flops(plain)
    with pytest.raises((pickle.PicklingError, AttributeError)) as plain_error:
        pickle.dumps(plain)
    with pytest.raises(type(plain_error.value), match="local"):
        pickle.dumps(checked)


def test_a_spawned_worker_pool_runs_decorated_functions() -> None:
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        doubled = pool.map(double, [torch.ones(2), torch.arange(3.0)])
        assert [t.tolist() for t in doubled] == [[2.0, 2.0], [0.0, 2.0, 4.0]]
        assert pool.apply(Scaler(5).apply, (torch.ones(2),)).tolist() == [5.0, 5.0]
        assert pool.apply(row_sums, (torch.ones(2, 3),)) == [18.0, 18.0]
        # the worker checks the contract, and its error comes back whole
        with pytest.raises(ShapeError, match=re.escape("double(): argument 'x' has shape")) as info:
            pool.apply(double, (torch.ones(2, 2),))
    assert info.value.function == "double"
    assert info.value.argument == "x"
