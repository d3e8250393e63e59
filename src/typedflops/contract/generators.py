"""Checked generators and async generators: the call's dim scope lives with the generator.

A decorated generator function checks its arguments when it is called, as any function
does. Its body runs later, one step per ``next()``/``send()``: each step runs with the
call's bindings as the current scope (wrapped ops and nested checks see them, not those of
whoever consumes the generator), and each yielded value is checked against what the return
hint says it yields (``Iterator[Float[Tensor, "n d"]]``), with the dims the arguments bound.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator
from typing import Any

from ..errors import ContractError
from .compiled import Contract
from .scope import CallState, call_scope

__all__ = ["checked_async_generator", "checked_generator"]


def _raise_clean(error: ContractError) -> None:
    raise error.with_traceback(None) from None


def _check_return(contract: Contract, value: Any, state: CallState) -> None:
    if contract.return_checker is not None:
        try:
            contract.check_return(value, state.copy())
        except ContractError as error:
            _raise_clean(error)


def checked_generator(
    body: Generator[Any, Any, Any], contract: Contract, state: CallState
) -> Generator[Any, Any, Any]:
    """Run ``body`` step by step in the scope ``state``, checking what it yields."""
    sent: Any = None
    thrown: BaseException | None = None
    while True:
        token = call_scope.set(state)
        try:
            if thrown is not None:
                error, thrown = thrown, None
                item = body.throw(error)
            else:
                item = body.send(sent)
        except StopIteration as stop:
            _check_return(contract, stop.value, state)
            return stop.value
        finally:
            try:  # noqa: SIM105 (a context manager costs more, here on each call)
                call_scope.reset(token)
            except LookupError:  # (gone already: see contract.scope.call_scope)
                pass
        try:
            contract.check_yield(item, state)
        except ContractError as error:
            body.close()
            _raise_clean(error)
        try:
            sent = yield item
        except GeneratorExit:
            body.close()
            raise
        except BaseException as error:  # thrown in by the consumer: pass it on
            thrown = error


async def checked_async_generator(
    body: AsyncGenerator[Any, Any], contract: Contract, state: CallState
) -> AsyncGenerator[Any, Any]:
    """Run the async generator ``body`` step by step in the scope ``state``, checking what
    it yields."""
    sent: Any = None
    thrown: BaseException | None = None
    while True:
        token = call_scope.set(state)
        try:
            if thrown is not None:
                error, thrown = thrown, None
                item = await body.athrow(error)
            else:
                item = await body.asend(sent)
        except StopAsyncIteration:
            return
        finally:
            try:  # noqa: SIM105 (a context manager costs more, here on each call)
                call_scope.reset(token)
            except LookupError:  # (gone already: see contract.scope.call_scope)
                pass
        try:
            contract.check_yield(item, state)
        except ContractError as error:
            await body.aclose()
            _raise_clean(error)
        try:
            sent = yield item
        except GeneratorExit:
            await body.aclose()
            raise
        except BaseException as error:
            thrown = error
