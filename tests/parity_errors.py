"""jaxtyping's ``ParamError`` and ``ReturnError``, for the ports of its test suite: a
:class:`~typedflops.ContractError` on an argument, or on the return value."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from typedflops import ContractError


@contextlib.contextmanager
def param_error() -> Iterator[None]:
    """jaxtyping's ParamError: the call's arguments break the contract."""
    with pytest.raises(ContractError) as caught:
        yield
    assert caught.value.argument != "return", caught.value


@contextlib.contextmanager
def return_error() -> Iterator[None]:
    """jaxtyping's ReturnError: the return value breaks the contract."""
    with pytest.raises(ContractError) as caught:
        yield
    assert caught.value.argument == "return", caught.value
