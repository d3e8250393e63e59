"""Frames found up the stack by their code (a Function's ``apply``, DTensor's pass)."""

from __future__ import annotations

from types import FrameType

from typedflops.cost.engine.stack import frame_of


def _nested(levels: int, depth: int, skip: int = 2) -> FrameType | None:
    """At the innermost of ``levels`` nested calls of itself, look for its own code."""
    if levels > 1:
        return _nested(levels - 1, depth, skip)
    return _look(depth, skip)


def _look(depth: int, skip: int) -> FrameType | None:
    return frame_of(_nested.__code__, depth, skip)


def test_the_innermost_frame_of_the_code_is_found() -> None:
    found = _nested(3, depth=8)
    assert found is not None
    assert found.f_code is _nested.__code__
    assert found.f_locals["levels"] == 1  # (the innermost of the three)


def test_frames_past_the_depth_are_not_looked_at() -> None:
    # skip=2 starts at _look's caller, the innermost _nested: depth 1 reaches it alone
    assert _nested(1, depth=1) is not None
    # skip=3 starts one frame above it: this test's frame, then pytest's
    assert _nested(1, depth=1, skip=3) is None
    assert _nested(2, depth=1, skip=3) is not None  # (the outer _nested)
    assert _nested(1, depth=0) is None


def test_a_stack_shallower_than_the_skip_finds_nothing() -> None:
    assert frame_of(_nested.__code__, 8, skip=10_000) is None
