"""Checked generators and async generators: the call's dim scope lives with the generator.

A decorated generator function checks its arguments when it is called, as any function
does. Its body runs later, one step per ``next()``/``send()``/``throw()`` (and its last one
at ``close()``): each step runs with the call's bindings as the current scope (wrapped ops
and nested checks see them, not those of whoever consumes the generator), and each yielded
value is checked against what the return hint says it yields (``Iterator[Float[Tensor,
"n d"]]``), with the dims the arguments bound. While the cost engine counts, each step's
ops are the generator call's own (see :class:`StepCounter`).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Generator
from typing import Any, Protocol

from ..errors import ContractError
from .compiled import Contract
from .scope import CallState, call_scope

__all__ = ["StepCounter", "checked_async_generator", "checked_generator"]


class StepCounter(Protocol):
    """The cost engine's count of one generator call: each step's ops go to it."""

    def enter(self, awaits: bool, closing: bool = False) -> Any:
        """A step begins (``awaits``: an async generator's, which other tasks interleave
        with; ``closing``: the last one, at ``close()``): a token for :meth:`leave`."""

    def leave(self, token: Any, item: Any) -> None:
        """The step that :meth:`enter` began ended (``item``: what it yielded, or None)."""

    def ended(self, raised: bool) -> None:
        """The generator finished: returned or closed, or raised (``raised``)."""


#: Gives the engine's count of a generator call where a record counts here, else None.
Counted = Callable[[], StepCounter | None]


def _raise_clean(error: ContractError) -> None:
    raise error.with_traceback(None) from None


def _check_return(contract: Contract, value: Any, state: CallState) -> None:
    if contract.return_checker is not None:
        try:
            contract.check_return(value, state.copy())
        except ContractError as error:
            _raise_clean(error)


def checked_generator(
    body: Generator[Any, Any, Any],
    contract: Contract,
    state: CallState,
    counted: Counted | None = None,
) -> Generator[Any, Any, Any]:
    """Run ``body`` step by step in the scope ``state``, checking what it yields (each
    step counted by ``counted()``'s counter, taken at the first step a record sees)."""
    sent: Any = None
    thrown: BaseException | None = None
    counter: StepCounter | None = None
    while True:
        if counter is None and counted is not None:
            counter = counted()
        step = counter.enter(False) if counter is not None else None
        token = call_scope.set(state)
        try:
            if thrown is not None:
                error, thrown = thrown, None
                item = body.throw(error)
            else:
                item = body.send(sent)
        except StopIteration as stop:
            if counter is not None:
                counter.leave(step, stop.value)
            try:
                _check_return(contract, stop.value, state)
            except BaseException:
                if counter is not None:
                    counter.ended(True)
                raise
            if counter is not None:
                counter.ended(False)
            return stop.value
        except BaseException:
            if counter is not None:
                counter.leave(step, None)
                counter.ended(True)
            raise
        finally:
            try:  # noqa: SIM105 (a context manager costs more, here on each call)
                call_scope.reset(token)
            except LookupError:  # (gone already: see contract.scope.call_scope)
                pass
        if counter is not None:
            counter.leave(step, item)
        try:
            contract.check_yield(item, state)
        except ContractError as error:
            _close(body, state, counter, True)
            _raise_clean(error)
        try:
            sent = yield item
        except GeneratorExit:
            _close(body, state, counter if counter is not None else _counter(counted), False)
            raise
        except BaseException as error:  # thrown in by the consumer: pass it on
            thrown = error


def _counter(counted: Counted | None) -> StepCounter | None:
    return None if counted is None else counted()


def _close(
    body: Generator[Any, Any, Any], state: CallState, counter: StepCounter | None, raised: bool
) -> None:
    """Close ``body`` as a last step (its ``finally`` blocks run), then end the call."""
    step = counter.enter(False, True) if counter is not None else None
    token = call_scope.set(state)
    try:
        body.close()
    except BaseException:
        if counter is not None:
            counter.leave(step, None)
            counter.ended(True)
        raise
    finally:
        try:  # noqa: SIM105
            call_scope.reset(token)
        except LookupError:
            pass
    if counter is not None:
        counter.leave(step, None)
        counter.ended(raised)


async def checked_async_generator(
    body: AsyncGenerator[Any, Any],
    contract: Contract,
    state: CallState,
    counted: Counted | None = None,
) -> AsyncGenerator[Any, Any]:
    """Run the async generator ``body`` step by step in the scope ``state``, checking what
    it yields (each step counted as :func:`checked_generator` counts it)."""
    sent: Any = None
    thrown: BaseException | None = None
    counter: StepCounter | None = None
    while True:
        if counter is None and counted is not None:
            counter = counted()
        step = counter.enter(True) if counter is not None else None
        token = call_scope.set(state)
        try:
            if thrown is not None:
                error, thrown = thrown, None
                item = await body.athrow(error)
            else:
                item = await body.asend(sent)
        except StopAsyncIteration:
            if counter is not None:
                counter.leave(step, None)
                counter.ended(False)
            return
        except BaseException:
            if counter is not None:
                counter.leave(step, None)
                counter.ended(True)
            raise
        finally:
            try:  # noqa: SIM105 (a context manager costs more, here on each call)
                call_scope.reset(token)
            except LookupError:  # (gone already: see contract.scope.call_scope)
                pass
        if counter is not None:
            counter.leave(step, item)
        try:
            contract.check_yield(item, state)
        except ContractError as error:
            await _aclose(body, state, counter, True)
            _raise_clean(error)
        try:
            sent = yield item
        except GeneratorExit:
            await _aclose(body, state, counter if counter is not None else _counter(counted), False)
            raise
        except BaseException as error:
            thrown = error


async def _aclose(
    body: AsyncGenerator[Any, Any], state: CallState, counter: StepCounter | None, raised: bool
) -> None:
    """:func:`_close` for an async generator."""
    step = counter.enter(True, True) if counter is not None else None
    token = call_scope.set(state)
    try:
        await body.aclose()
    except BaseException:
        if counter is not None:
            counter.leave(step, None)
            counter.ended(True)
        raise
    finally:
        try:  # noqa: SIM105
            call_scope.reset(token)
        except LookupError:
            pass
    if counter is not None:
        counter.leave(step, None)
        counter.ended(raised)
