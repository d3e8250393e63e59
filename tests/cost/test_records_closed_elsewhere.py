"""A record whose block is closed on another thread than the one that opened it (a
generator holding ``with record()``, closed or collected there) counts what ran inside it,
and leaves both threads as they were: the opening thread's modes stop counting at once and
are off torch's stacks once it opens its next record; the closing thread's own records,
nested ones too, open and close as usual; ``torch.backends.mha``'s fast path is set back.

Hand count: ``x @ x`` for a 4x4 ``x`` is 2·4·4·4 = 128 FLOPs.
"""

from __future__ import annotations

import threading
from collections.abc import Generator
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

from typedflops import record
from typedflops.cost.engine.report import Recorder

PRODUCT = 2 * 4 * 4 * 4


def _stacks() -> tuple[list[Any], int]:
    return list(_get_current_dispatch_mode_stack()), torch._C._len_torch_function_stack()


def _held(opened: list[Recorder], x: torch.Tensor) -> Generator[None, None, None]:
    with record() as rec:
        opened.append(rec)
        x @ x
        yield


def _closed_on_another_thread(generator: Generator[None, None, None]) -> None:
    thread = threading.Thread(target=generator.close)
    thread.start()
    thread.join()


def test_a_record_closed_on_another_thread_leaves_its_own_thread_as_it_was() -> None:
    x = torch.randn(4, 4)
    before = _stacks()
    fast = torch.backends.mha.get_fastpath_enabled()
    opened: list[Recorder] = []
    generator = _held(opened, x)
    next(generator)
    _closed_on_another_thread(generator)
    x @ x  # after the close: in no record
    assert opened[0].total.flops == PRODUCT
    assert torch.backends.mha.get_fastpath_enabled() is fast
    with record() as rec:
        x @ x
        x @ x
    assert rec.total.flops == 2 * PRODUCT
    assert opened[0].total.flops == PRODUCT
    assert _stacks() == before


def test_the_closing_threads_own_records_nest_as_usual() -> None:
    x = torch.randn(4, 4)
    opened: list[Recorder] = []
    generator = _held(opened, x)
    next(generator)
    found: dict[str, Any] = {}

    def close_then_record() -> None:
        before = _stacks()
        generator.close()
        with record() as outer:
            with record() as inner:
                x @ x
            x @ x
        found["counts"] = (outer.total.flops, inner.total.flops)
        found["stacks"] = (before, _stacks())

    thread = threading.Thread(target=close_then_record)
    thread.start()
    thread.join()
    assert found["counts"] == (2 * PRODUCT, PRODUCT)
    before, after = found["stacks"]
    assert after == before
    assert opened[0].total.flops == PRODUCT
    with record() as rec:  # the opening thread's next record takes its old modes off
        x @ x
    assert rec.total.flops == PRODUCT
    assert _stacks() == ([], 0)


def test_after_a_close_on_another_thread_no_op_is_handed_to_a_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the opening thread's ops pass its mode untouched until its next record takes the mode
    # off: none is handed on (to the closed record, which would drop it, at a record's cost)
    from typedflops.cost.engine import recording

    x = torch.randn(4, 4)
    opened: list[Recorder] = []
    generator = _held(opened, x)
    next(generator)
    _closed_on_another_thread(generator)
    handed: list[Any] = []
    place = vars(recording)["_place"]  # (imported there from .placing)

    def counted(calls: Any, event: Any) -> None:
        handed.append(event)
        place(calls, event)

    monkeypatch.setattr(recording, "_place", counted)
    for _ in range(3):
        x @ x
    assert handed == []
    assert opened[0].total.flops == PRODUCT
    with record() as rec:
        x @ x
    assert rec.total.flops == PRODUCT
    assert _stacks() == ([], 0)


def test_a_record_open_on_the_opening_thread_goes_on_counting_and_closes_clean() -> None:
    x = torch.randn(4, 4)
    opened: list[Recorder] = []
    generator = _held(opened, x)
    next(generator)
    with record() as rec:
        x @ x
        _closed_on_another_thread(generator)
        x @ x
    assert (opened[0].total.flops, rec.total.flops) == (2 * PRODUCT, 2 * PRODUCT)
    assert _stacks() == ([], 0)
