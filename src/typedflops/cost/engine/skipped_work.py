"""Kernels that skip the entries a value marks: what ran, from the values where they are.

``nll_loss`` (``nll_loss2d`` too, and so ``cross_entropy``) passes over a target equal to
``ignore_index``, forward (``NLLLoss.cpp``: no value picked, no weight added) and backward
(no gradient put); ``embedding``'s backward (``embedding_dense_backward``) passes over the
ids equal to ``padding_idx``, and so do ``embedding_bag``'s kernels, forward
(``index_select_add``/``_max``), backward (``_embedding_bag_dense_backward_cpu_sum_mean``)
and the gradient of ``per_sample_weights`` (``EmbeddingBag.cpp``). Their rules
(:mod:`.index_rules`) count per target or per id looked up; given how many were not passed
over (``kept``), they count those alone. Two more work where a value passes a test: a
multi-class margin loss adds where a class's margin is met (``z > 0``, :class:`Margins`),
``histc`` with a range given bins the elements inside it (:class:`Bins`), and a CPU's
``scatter_reduce`` mean with an expanded index divides the rows the index reaches
(:class:`~.expanded_index.ExpandedRows`).

On tensors with values (a record of a real run) the kept entries are counted, one
reduction on the op's own device (``(ids != skip).sum()``) and one read of the number, on
every call: such an op is keyed by that number with its shapes (see :mod:`.opkeys`), so
calls alike in shape that kept other entries are counted apart, and those that kept as
many share one count. On tensors
without values (meta or fake: ``estimate()``, a record on meta, a backward foreseen by a
replay) every entry is counted, as if none equals the skipped value: the count of the usual
input (no padding, no ignored target) and an upper bound otherwise; the Cost names the op in
:attr:`~typedflops.cost.types.Cost.assumed` (:func:`assumed`), and its formulas stay exact,
since they hold at every size for inputs that skip nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor

from .expanded_index import ExpandedRows

__all__ = ["BACKWARD_NOTES", "SKIPS", "Bins", "Margins", "Skip", "assumed"]

aten = torch.ops.aten


class Skip:
    """Where an op finds its ids (targets) and the value it skips: positions in its schema,
    names, the skipped value's default, and what a count without values takes as given.
    ``signed``: ids may be negative (a target may equal a negative ``ignore_index``); an
    embedding's ids may not, so a negative ``padding_idx`` (none given) skips nothing."""

    __slots__ = ("default", "ids", "ids_at", "note", "signed", "value", "value_at")

    def __init__(self, ids: tuple[int, str], value: tuple[int, str], note: str) -> None:
        self.ids_at, self.ids = ids
        self.value_at, self.value = value
        self.signed = self.value == "ignore_index"
        self.default = -100 if self.signed else -1
        self.note = note

    def _skipped(self, args: Sequence[Any], kwargs: Any) -> int:
        found = args[self.value_at] if self.value_at < len(args) else kwargs.get(self.value)
        return self.default if found is None else int(found)

    def _ids(self, args: Sequence[Any], kwargs: Any) -> Any:
        return args[self.ids_at] if self.ids_at < len(args) else kwargs.get(self.ids)

    def kept(self, args: Sequence[Any], kwargs: Any) -> int | None:
        """How many ids are not the skipped value; None where the ids have no values.

        ``ids`` (any shape) is read with one reduction."""
        ids = self._ids(args, kwargs)
        if not isinstance(ids, torch.Tensor) or _without_values(ids):
            return None
        skipped = self._skipped(args, kwargs)
        if skipped < 0 and not self.signed:
            return ids.numel()  # (no padding_idx: no id equals it, nothing to read)
        return int(torch.count_nonzero(ids != skipped))

    def key(self, args: Sequence[Any], kwargs: Any) -> int | None:
        """What the values make the op run, as part of its key (see :mod:`.opkeys`)."""
        return self.kept(args, kwargs)

    def counter(self, rule: Callable[..., Any]) -> Callable[..., Any]:
        """The count of a call that ran (``call``, and its real ``args``, ``kwargs``) by
        ``rule`` given the entries kept; None where the values are not known."""

        def ran(call: Any, args: Sequence[Any], kwargs: Any) -> Any:
            kept = self.kept(args, kwargs)
            return None if kept is None else rule(call, kept)

        return ran

    def unknown(self, args: Sequence[Any], kwargs: Any) -> str | None:
        """What a count of these arguments takes as given (:attr:`note`) where the ids have
        no values and the skipped value may be among them; else None."""
        ids = self._ids(args, kwargs)
        if not isinstance(ids, torch.Tensor) or not _without_values(ids):
            return None
        return self.note if self.signed or self._skipped(args, kwargs) >= 0 else None


class Margins:
    """A multi-class margin loss (``multi_margin_loss`` and its backward): per sample of
    (N, C) inputs and per class other than its target, work where ``z = margin - x[y] +
    x[i] > 0`` alone. ``at``: the input's position (the targets follow it, then ``p`` and
    ``margin``); ``note``: what a count without values takes as given."""

    __slots__ = ("at", "note")

    def __init__(self, at: int, note: str) -> None:
        self.at = at
        self.note = note

    def met(self, args: Sequence[Any], kwargs: Any) -> int | None:
        """How many pairs have ``z > 0``; None where the input has no values."""
        x, target = args[self.at], args[self.at + 1]
        if _without_values(x) or _without_values(target):
            return None
        found = self.at + 3 < len(args)
        margin = float(args[self.at + 3] if found else kwargs.get("margin", 1))
        with torch.no_grad():
            rows = x.detach().reshape(-1, x.shape[-1] if x.dim() else 1)
            targets = target.reshape(-1, 1)
            z = margin - rows.gather(1, targets) + rows
            z.scatter_(1, targets, 0.0)  # (the target's own class is passed over)
            return int(torch.count_nonzero(z > 0))

    def key(self, args: Sequence[Any], kwargs: Any) -> int | None:
        """What the values make the op run, as part of its key (see :mod:`.opkeys`)."""
        return self.met(args, kwargs)

    def counter(self, rule: Callable[..., Any]) -> Callable[..., Any]:
        """The count of a call that ran by ``rule`` given the pairs met; None where the
        values are not known."""

        def ran(call: Any, args: Sequence[Any], kwargs: Any) -> Any:
            met = self.met(args, kwargs)
            return None if met is None else rule(call, met)

        return ran

    def unknown(self, args: Sequence[Any], kwargs: Any) -> str | None:
        """:attr:`note` where the input has no values; else None."""
        x = args[self.at]
        return self.note if isinstance(x, torch.Tensor) and _without_values(x) else None


class Bins:
    """``histc(x, bins, min, max)`` with a range given: an element below ``min`` (or NaN)
    stops at the first compare, one above ``max`` at the second; the bin and the add are
    for the elements in range alone. (``min == max``: the input's own range, every
    element in it.)"""

    note = "histc: every element counted in range"

    def ranged(self, args: Sequence[Any], kwargs: Any) -> tuple[int, int] | None:
        """The elements at least ``min`` and those in ``[min, max]``; None without values."""
        x = args[0]
        if _without_values(x):
            return None
        low = float(args[2] if len(args) > 2 else kwargs.get("min", 0))
        high = float(args[3] if len(args) > 3 else kwargs.get("max", 0))
        at_least = x >= low
        inside = at_least & (x <= high)
        return int(torch.count_nonzero(at_least)), int(torch.count_nonzero(inside))

    def key(self, args: Sequence[Any], kwargs: Any) -> tuple[int, int] | None:
        """What the values make the op run, as part of its key (see :mod:`.opkeys`)."""
        return self.ranged(args, kwargs)

    def counter(self, rule: Callable[..., Any]) -> Callable[..., Any]:
        """The count of a call that ran by ``rule`` given the elements in range; None
        where the values are not known."""

        def ran(call: Any, args: Sequence[Any], kwargs: Any) -> Any:
            ranged = self.ranged(args, kwargs)
            return None if ranged is None else rule(call, ranged)

        return ran

    def unknown(self, args: Sequence[Any], kwargs: Any) -> str | None:
        """:attr:`note` where a range is given and the input has no values; else None."""
        low = float(args[2] if len(args) > 2 else kwargs.get("min", 0))
        high = float(args[3] if len(args) > 3 else kwargs.get("max", 0))
        x = args[0]
        given = low != high and isinstance(x, torch.Tensor) and x.is_floating_point()
        return self.note if given and _without_values(x) else None


_MARGINS = "every class's margin counted as met (z > 0)"


_TARGETS = "every target counted, as if none equals ignore_index"
_IDS = "every id counted, as if none equals padding_idx"
_TARGET, _IGNORE, _BACKWARD_TARGET, _BACKWARD_IGNORE = (
    (1, "target"),
    (4, "ignore_index"),
    (2, "target"),
    (5, "ignore_index"),
)
_INDICES = (1, "indices")

#: The ops whose work values decide, by overload packet.
SKIPS: dict[Any, Skip | Margins | Bins | ExpandedRows] = {
    aten.scatter_reduce: ExpandedRows(),
    aten.scatter_reduce_: ExpandedRows(),
    aten.histc: Bins(),
    aten.multi_margin_loss: Margins(0, f"multi_margin_loss: {_MARGINS}"),
    aten.multi_margin_loss_backward: Margins(1, f"multi_margin_loss backward: {_MARGINS}"),
    aten.nll_loss_forward: Skip(_TARGET, _IGNORE, f"nll_loss: {_TARGETS}"),
    aten.nll_loss2d_forward: Skip(_TARGET, _IGNORE, f"nll_loss: {_TARGETS}"),
    aten.nll_loss_backward: Skip(
        _BACKWARD_TARGET, _BACKWARD_IGNORE, f"nll_loss backward: {_TARGETS}"
    ),
    aten.nll_loss2d_backward: Skip(
        _BACKWARD_TARGET, _BACKWARD_IGNORE, f"nll_loss backward: {_TARGETS}"
    ),
    aten.embedding_dense_backward: Skip(
        _INDICES, (3, "padding_idx"), f"embedding backward: {_IDS}"
    ),
    aten._embedding_bag: Skip(_INDICES, (8, "padding_idx"), f"embedding_bag: {_IDS}"),
    aten._embedding_bag_forward_only: Skip(_INDICES, (8, "padding_idx"), f"embedding_bag: {_IDS}"),
    aten._embedding_bag_backward: Skip(
        _INDICES, (11, "padding_idx"), f"embedding_bag backward: {_IDS}"
    ),
    aten._embedding_bag_dense_backward: Skip(
        _INDICES, (9, "padding_idx"), f"embedding_bag backward: {_IDS}"
    ),
    aten._embedding_bag_per_sample_weights_backward: Skip(
        (2, "indices"), (6, "padding_idx"), f"embedding_bag backward: {_IDS}"
    ),
}

#: The notes of backward kernels: a backward that ran replaces what was foreseen of it.
BACKWARD_NOTES = frozenset(skip.note for skip in SKIPS.values() if " backward: " in skip.note)


def assumed(events: Iterable[Any], backward: Callable[[Any], Sequence[Any]]) -> tuple[str, ...]:
    """What the counts of ``events`` (and their backward, by ``backward``: an event's
    foreseen backward events) take as given of values they did not have, each once."""
    found: list[str] = []
    for event in events:
        if event.assumed is not None:
            found.append(event.assumed)
        if event.needs_grad:
            found.extend(step.assumed for step in backward(event) if step.assumed is not None)
    return tuple(dict.fromkeys(found))


def _without_values(tensor: torch.Tensor) -> bool:
    return tensor.is_meta or isinstance(tensor, FakeTensor)
