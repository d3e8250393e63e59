"""Gradient sums of small random programs: views (``x[1:]``, ``.t()``, ``.view``,
``.unsqueeze``, ``.expand``, ``chunk``), views of views, pointwise ops, products and
decorated calls (one returning a view), or writes in place through views of views, run in
a record's own code and inside a decorated call.

The oracle is the backward that runs inside ``record()`` (the engine's adds as they ran); a
record of the same program without the backward predicts it. Every tensor a program makes
is read by a later op or summed into its result, so each reaches the backward that runs.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from jaxtyping import Float
from kernel_counts import ran_and_predicted
from torch import Tensor

import typedflops
from typedflops import typed_flops

_Step = tuple[str, int, int]

_KINDS = (
    "slice",
    "t",
    "view",
    "unsqueeze",
    "expand",
    "chunk",
    "mul",
    "add",
    "exp",
    "matmul",
    "call view",
    "call",
    "mul_",
    "assign",
)
_VIEWS = ("slice", "t", "view", "unsqueeze", "expand", "chunk", "call view")
_WRITES = ("mul_", "assign")


def _steps(kinds: tuple[str, ...]) -> st.SearchStrategy[list[tuple[str, int, int]]]:
    return st.lists(
        st.tuples(st.sampled_from(kinds), st.integers(0, 15), st.integers(0, 15)),
        min_size=1,
        max_size=7,
    )


@typed_flops
def _viewed(x: Float[Tensor, "..."], kind: int) -> Float[Tensor, "..."]:
    """A view of ``x`` made in a decorated call."""
    if kind == 0:
        return x.unsqueeze(0)
    return x.view(-1) if kind == 1 else x[..., 1:]


@typed_flops
def _scaled(x: Float[Tensor, "..."]) -> Float[Tensor, "..."]:
    return torch.exp(x) * x


def _made(pool: list[Tensor], kind: int, first: int, second: int) -> tuple[Tensor, ...]:
    """What one step makes from the tensors made so far (nothing where it does not apply),
    and (last) the second tensor it read, if any."""
    a, b = pool[first % len(pool)], pool[second % len(pool)]
    name = _KINDS[kind]
    if name == "slice":
        return (a[1:],) if a.dim() and a.shape[0] > 1 else ()
    if name == "t":
        return (a.t(),) if a.dim() == 2 else ()
    if name == "view":
        return (a.view(-1),) if a.is_contiguous() else ()
    if name == "unsqueeze":
        return (a.unsqueeze(0),)
    if name == "expand":
        return (a.unsqueeze(0).expand(2, *a.shape),)
    if name == "chunk":
        return a.chunk(2) if a.dim() and a.shape[0] > 1 else ()
    if name in ("mul", "add"):
        if a.shape != b.shape:
            return ()
        return (a * b if name == "mul" else a + b, b)
    if name == "exp":
        return (torch.exp(a),)
    if name == "matmul":
        return (a @ a.t(),) if a.dim() == 2 else ()
    if name == "call view":
        return (_viewed(a, second % 3),) if a.dim() and a.shape[-1] > 1 else ()
    if name == "call":
        return (_scaled(a),)
    if name == "mul_":
        a.mul_(2.0)
    elif a.dim() and a.shape[0] > 1:  # (a slice assignment)
        a[0] = a[-1]
    return ()


def _run(x: Tensor, steps: list[_Step]) -> Tensor:
    """The program ``steps`` spell, from ``x * 1``: each step an op on the tensors made so
    far; the tensors no op read since they were last written (a write through a view
    writes its base) are summed into the result."""
    pool = [x * 1.0]
    bases = [0]  # (the base of each, by its place in the pool)
    read: set[int] = set()
    for kind, first, second in steps:
        index = first % len(pool)
        made = _made(pool, _KINDS.index(kind), first, second)
        if kind in _WRITES:
            read.difference_update((index, bases[index]))
        if not made:
            continue
        read.add(index)
        if kind in ("mul", "add"):
            read.add(second % len(pool))
            made = made[:1]
        for tensor in made:
            bases.append(bases[index] if kind in _VIEWS else len(pool))
            pool.append(tensor)
    total = pool[-1].sum()
    for index, tensor in enumerate(pool[:-1]):
        if index not in read:
            total = total + tensor.sum()
    return total


def _check(steps: list[_Step]) -> None:
    """The program run in a record's own code and as a decorated call: the backward that
    ran and the one predicted, all four alike."""

    @typed_flops
    def program(x: Float[Tensor, "4 4"]) -> Float[Tensor, ""]:
        return _run(x, steps)

    ran, predicted = ran_and_predicted(lambda x: _run(x, steps))
    assert predicted == ran
    assert ran_and_predicted(program) == (ran, ran)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(steps=_steps(_KINDS[:-2]))
def test_views_in_a_records_own_code_and_in_calls_predict_the_sums_that_run(
    steps: list[_Step],
) -> None:
    _check(steps)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(steps=_steps(tuple(kind for kind in _KINDS if not kind.startswith("call"))))
def test_writes_through_views_of_views_predict_the_sums_that_run(steps: list[_Step]) -> None:
    try:  # (autograd refuses some writes: a view of a leaf, of an expand, of a chunk)
        _run(torch.randn(4, 4, requires_grad=True), steps).backward()
    except RuntimeError:
        assume(False)
    _check(steps)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(steps=_steps(_KINDS))
def test_calls_and_writes_through_views_together_predict_the_sums_that_run(
    steps: list[_Step],
) -> None:
    try:
        _run(torch.randn(4, 4, requires_grad=True), steps).backward()
    except RuntimeError:
        assume(False)
    _check(steps)


# Programs where a view held where a decorated call begins or returns (a call's result, a
# view made before it) has its base written before it is read: autograd makes it a new
# node, and its view op's edge reaches nothing. Each predicted one sum too many, marked
# exact, while the call's boundary kept the view's edge (ran, then predicted).
_WRITTEN_AFTER_A_CALL = [
    # a call's result h.unsqueeze(0), then h.mul_ (48 vs 64)
    [("call view", 0, 0), ("mul_", 0, 0)],
    # a call's view written itself before any read: CopySlices' edge stands for its own
    # (60 vs 76)
    [("call view", 2, 14), ("mul_", 5, 3), ("exp", 8, 12)],
    # views of a call's view, its base assigned through a slice (80 vs 96)
    [
        ("call view", 8, 9),
        ("add", 0, 12),
        ("call view", 14, 1),
        ("call view", 9, 13),
        ("assign", 0, 8),
    ],
    # an own-code slice held where a call begins, then written through (120 vs 136)
    [
        ("exp", 11, 6),
        ("mul", 15, 3),
        ("slice", 14, 10),
        ("call view", 3, 9),
        ("mul_", 4, 12),
        ("mul_", 9, 3),
    ],
    # an expand held where a call begins, a call's view, their base assigned: the sum a
    # later edge added because of the taken-back edge is taken back too (144 vs 160)
    [("assign", 10, 4), ("expand", 0, 2), ("call view", 10, 9), ("assign", 10, 1)],
    # views read in calls, never written: their edges still count (96)
    [("call view", 3, 6), ("call view", 15, 9), ("call", 9, 14)],
    # a call's view read before its base is written: its edge still counts
    [("call view", 0, 0), ("exp", 1, 0), ("mul_", 0, 0)],
]


@pytest.mark.parametrize("steps", _WRITTEN_AFTER_A_CALL)
def test_a_view_held_at_a_call_and_written_before_it_is_read_reaches_nothing(
    steps: list[_Step],
) -> None:
    _check(steps)


# Programs of every kind together whose prediction was off by a sum or a view's backward
# (ran vs predicted before): a held view's edge that added a sum where it was counted and
# reached nothing (96 vs 80, 64 vs 48), a view held at a call reached by what the write of
# its base reads (95 vs 79), an expand held at a call made again when read
# (224 vs 256, 112 vs 144, 256 vs 288), a view whose base was written let go unread.
_FOUND_BY_SEARCH = [
    [("call view", 4, 2), ("assign", 1, 4), ("call", 15, 13)],
    [("call view", 11, 2), ("assign", 3, 12), ("mul_", 6, 15), ("view", 13, 10)],
    [
        ("call view", 11, 10),
        ("assign", 7, 3),
        ("assign", 15, 5),
        ("exp", 6, 15),
        ("call view", 1, 14),
        ("exp", 7, 11),
    ],
    [
        ("expand", 0, 6),
        ("t", 13, 5),
        ("exp", 0, 10),
        ("call", 8, 0),
        ("assign", 0, 11),
        ("mul", 3, 7),
        ("call view", 5, 10),
    ],
    [
        ("expand", 2, 4),
        ("t", 3, 2),
        ("call view", 8, 13),
        ("assign", 14, 7),
        ("unsqueeze", 15, 13),
        ("assign", 15, 2),
    ],
    [
        ("expand", 4, 5),
        ("exp", 8, 0),
        ("view", 7, 13),
        ("call", 5, 7),
        ("mul_", 4, 5),
        ("call", 7, 9),
        ("mul_", 0, 14),
    ],
    # a view read by a view of it, written through that one: let go where the record's
    # code returns, its node is reached by nothing (48: x * 1, mul_, one sum where h's new
    # node has two readers; 64 before, its unsqueeze's edge a result again)
    [("unsqueeze", 0, 0), ("unsqueeze", 1, 0), ("mul_", 2, 0)],
    # the same, a slice of the base made first and summed (64; 80 before)
    [("slice", 14, 0), ("unsqueeze", 6, 3), ("view", 14, 14), ("mul_", 15, 15)],
    # two calls' slices of h, then h written: their edges taken back, and the sum the
    # second added while the first's might be (64: x * 1, mul_, two sums where h's new
    # node has three readers; 80 before)
    [("call view", 0, 2), ("call view", 0, 2), ("mul_", 0, 0)],
    # the same with an unsqueeze of h written through (80; 112 before)
    [("unsqueeze", 1, 10), ("call view", 10, 5), ("call view", 6, 2), ("mul_", 5, 0)],
    # a call's view u, u.unsqueeze(0).expand(...) (the unsqueeze a temporary let go), its
    # base assigned through the expand, e[0] = e[-1]: the write reads u through the
    # temporary first, so u's edge stays (112; 96 before)
    [("call view", 0, 0), ("expand", 1, 0), ("assign", 2, 0)],
    [("call view", 2, 3), ("expand", 13, 10), ("assign", 2, 13), ("slice", 7, 13)],
    # a slice s of h, h assigned through a slice, then a call's view of s (s made again
    # inside it), then h written: the view's edge is taken back, and so is the edge of s
    # made again that it alone read (64: x * 1, the assignment's sum, mul_, one sum where
    # h's last node has two readers; 80 before)
    [("slice", 0, 0), ("assign", 0, 0), ("call view", 1, 0), ("mul_", 0, 0)],
    # the same with a slice of s made again held where a call begins (80; 96 before)
    [("slice", 0, 0), ("assign", 0, 0), ("slice", 1, 0), ("call view", 0, 0), ("mul_", 0, 0)],
    # an expand e of h held where a call begins, the call's view of e, then h written: the
    # view made again sums over e's expanded dim, the sum e's backward counted (80: x * 1,
    # mul_, that sum, one sum where h's new node has two readers; 112 before)
    [("expand", 0, 0), ("call view", 1, 0), ("mul_", 0, 0)],
    # a slice s of h read by s.t() and by an expand of s, both held where a call begins,
    # then h written: neither reaches s, whose edge is taken back with theirs (104: x * 1,
    # mul_, the expand made again (24), three sums where h's new node has four readers;
    # 120 before)
    [("slice", 0, 0), ("t", 1, 0), ("expand", 1, 0), ("call view", 0, 0), ("mul_", 0, 0)],
    # a slice s of h read by exp, a call's view of s, then h written: the sum the view's
    # edge added to s's is taken back with it, no later edge to s to take it from (76:
    # x * 1, exp, mul_, a sum where h's old node has two readers and one where its new
    # node has two; 88 before)
    [("slice", 0, 0), ("exp", 1, 0), ("call view", 1, 0), ("mul_", 0, 0)],
    # a slice s of h, s.t() held where a call begins, then exp(s), then h written: exp
    # reads s after the hold, so s's edge stays though s.t()'s is taken back (92: x * 1,
    # exp, mul_, a sum where h's old node has two readers, s's slice and mul_, and one where
    # its new node has two; 76 before)
    [("slice", 0, 0), ("t", 1, 0), ("call view", 0, 0), ("exp", 1, 0), ("mul_", 0, 0)],
    # an expand e of h, h assigned, a call's view of e (e made again), then e[0] = e[-1]:
    # the write reads e made again first, its edge and its sum over the expanded dim stay
    # (176)
    [("expand", 0, 0), ("assign", 0, 0), ("call view", 1, 0), ("assign", 1, 0)],
    # an expand e of h held where a call begins, the call's e[..., 1:] returned, then h
    # written: e's backward (a sum of 32) waits with its edge and is taken back with it;
    # the slice made again sums its own 24 (72: x * 1, mul_, that sum, one sum where h's
    # new node has two readers; 80, 104 before)
    [("expand", 0, 0), ("call view", 1, 2), ("mul_", 0, 0)],
]


@pytest.mark.parametrize("steps", _FOUND_BY_SEARCH)
def test_programs_of_calls_views_and_writes_predict_the_sums_and_views_that_run(
    steps: list[_Step],
) -> None:
    _check(steps)


@typed_flops
def _expanded(h: Float[Tensor, "4 4"]) -> Float[Tensor, "2 4 4"]:
    return h.unsqueeze(0).expand(2, 4, 4)


def _expand_returned(x: Tensor) -> Tensor:
    h = x * 1.0
    t = _expanded(h)
    h.mul_(2.0)
    return t.sum() + h.sum()


def _expand_returned_never_read(x: Tensor) -> Tensor:
    h = x * 1.0
    _ = _expanded(h)  # (held, never read)
    h.mul_(2.0)
    return h.sum()


def _expand_returned_read_twice(x: Tensor) -> Tensor:
    h = x * 1.0
    t = _expanded(h)
    h.mul_(2.0)
    return t.sum() + t.mean() + h.sum()


def _expand_returned_written_through(x: Tensor) -> Tensor:
    h = x * 1.0
    t = _expanded(h)
    t[0].mul_(2.0)
    return t.sum() + h.sum()


def _expand_held_where_a_call_begins(x: Tensor) -> Tensor:
    h = x * 1.0
    e = h.unsqueeze(0).expand(2, 4, 4)
    u = _twice(h)
    h.mul_(2.0)
    return e.sum() + h.sum() + u.sum()


@typed_flops
def _twice(h: Float[Tensor, "4 4"]) -> Float[Tensor, "4 4"]:
    return h * 2.0


@pytest.mark.parametrize(
    ("program", "ran"),
    [
        # h * 1 (16), mul_ (16), the view made again of t: the sum over its expanded dim
        # (32), one sum where h's new node has two readers (16); the expand returned never
        # runs its backward (112 predicted before)
        (_expand_returned, 80),
        # the expand let go unread, h written, h.sum() alone: h * 1 and mul_ (32); the
        # expand's backward, waiting with its edge, is taken back with it (64 before)
        (_expand_returned_never_read, 32),
        # t made again once, read twice: a sum of its 32 gradients (32) and mean's (32):
        # 144 (176 before)
        (_expand_returned_read_twice, 144),
        # t written through a view of it: 80 (112 before)
        (_expand_returned_written_through, 80),
        # the expand made before the call: 112 (144 before)
        (_expand_held_where_a_call_begins, 112),
    ],
)
def test_an_expand_held_at_a_call_and_made_again_costs_one_sum_of_what_it_repeats(
    program: Callable[[Tensor], Tensor], ran: int
) -> None:
    assert ran_and_predicted(program) == (ran, ran)


def test_an_expand_returned_by_the_function_costed_costs_its_backward() -> None:
    # the expand's sum of its 2x4x4 gradient over the repeated dim (32), waiting with the
    # held view's edge until the run ends, as a backward from the result runs it
    cost = typedflops.estimate(_expanded, Float[Tensor, "4 4"], grad=("h",))
    assert cost.backward_flops == 32
    assert ran_and_predicted(lambda x: _expanded(x).sum()) == (32, 32)


def test_a_chain_of_views_sums_only_where_a_tensor_has_two_readers() -> None:
    # h = x * 1 (4x4), s = h[1:] (3x4), s[1:].t().unsqueeze(0) summed, exp(s) summed: the
    # product's gradient (16), exp's (12), and one sum of s's 12 values (read by its slice
    # and by exp); h, the slice of s, its transpose and its unsqueeze have one reader each
    steps = [("slice", 0, 0), ("slice", 1, 0), ("t", 2, 0), ("unsqueeze", 3, 0), ("exp", 1, 0)]
    assert ran_and_predicted(lambda x: _run(x, steps)) == (16 + 12 + 12, 16 + 12 + 12)
