"""The values a dry run knows from shapes alone, read where a body reads them.

A dry run's tensors are ``meta``: no values. But some tensors a body makes hold values
that the shapes fix: ``torch.arange(seq)`` position ids, a ``torch.ones(b, s)`` mask, a
module's small constant buffers (a ``position_ids`` buffer, an ``inv_freq``), and what ops
make of them alone (``diff``, ``cumsum``, comparisons, slices). Code that reads such a value
(transformers asks whether the position ids hold packed sequences, ``bool((mask ==
0).all())``) takes one path in a real run; on ``meta`` it could not go on (a run under
``FakeTensorMode`` takes the path written for tracing instead, with other ops).

So a dry run keeps, next to each such meta tensor, its values on the CPU (a tensor of up
to :data:`LIMIT` values): made by a factory op with no tensor input that draws nothing at
random, by an op whose tensor inputs all have values, or copied from a real tensor the
body reaches. A value read of such a tensor (``.item()``, ``bool()``, ``torch.equal``,
``.tolist()``) gets its value, and an op whose output's shape depends on values
(``nonzero``, a boolean mask's index) gets its shape, as a real run would; each is
counted as the op it is. A tensor whose values are not known (an input, a weight) keeps
none: reading it stops the run as before.

A validation, ``torch._is_all_true(valid)`` of a ``valid`` whose values are not known
(``torch.distributions`` checks a distribution's parameters and a ``log_prob``'s value so,
``if not torch._is_all_true(constraint.check(value)): raise ValueError``; so does
``torch._check_tensor_all``), is taken as passed: its result holds ``True``. The
constraint's ops are counted as they run, and what follows computes the same either way.

A run under ``FakeTensorMode`` (where a run on meta cannot go on) keeps them alike for its
fake tensors, to check index bounds only (see :mod:`.index_bounds`): it answers no value
read, so it takes the path it took before.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import _disable_current_modes

__all__ = ["FROM_DATA", "LIMIT", "KnownValues", "note_values"]

#: The most values a tensor kept on the CPU may hold (the ones that decide a path are
#: ids, masks and positions, a few thousand values).
LIMIT = 1 << 16

aten = torch.ops.aten
_META = torch.device("meta")
_CPU = torch.device("cpu")

#: Ops that read a value out (answered from the values known).
READS = frozenset({aten._local_scalar_dense.default, aten.equal.default, aten.is_nonzero.default})
#: Ops whose output's shape depends on values (run on the values known, then on meta).
SHAPED_BY_VALUES = frozenset(
    {
        aten.nonzero.default,
        aten.masked_select.default,
        aten._unique2.default,
        aten.unique_consecutive.default,
        aten.unique_dim.default,
        aten.repeat_interleave.Tensor,
        aten.index.Tensor,
    }
)


#: Torch functions that make a tensor of Python data (``torch.tensor(list(range(s)))``):
#: on meta, no op a dispatch mode sees makes it.
FROM_DATA = frozenset({torch.tensor, torch.as_tensor, torch.asarray})

#: Ops whose values do not depend on their tensor input's values (its shape and dtype only).
_FILLS = frozenset(
    {
        aten.ones_like.default,
        aten.zeros_like.default,
        aten.full_like.default,
        aten.new_ones.default,
        aten.new_zeros.default,
        aten.new_full.default,
    }
)


#: The values of the meta copies of modules' small buffers (see :func:`note_values`).
_NOTED: dict[int, tuple[weakref.ref[torch.Tensor], torch.Tensor]] = {}


def note_values(copy: torch.Tensor, real: torch.Tensor) -> None:
    """``copy``, a dry run's meta (or fake) copy of a module's buffer ``real``, holds its
    values (cast to the copy's dtype), if ``real`` is a small constant on the CPU (a
    ``position_ids`` buffer, rotary frequencies)."""
    if real.requires_grad or real.numel() > LIMIT or real.device.type != "cpu" or real.is_meta:
        return
    if not _dry(copy):
        return
    key = id(copy)

    def gone(_: object, key: int = key) -> None:
        found = _NOTED.get(key)
        if found is not None and found[0]() is None:
            del _NOTED[key]

    with _disable_current_modes():
        _NOTED[key] = (weakref.ref(copy, gone), real.detach().to(copy.dtype, copy=True))


class KnownValues:
    """The values of one dry run's meta tensors that shapes fix, by tensor (held weakly)."""

    def __init__(self) -> None:
        self._values: dict[int, tuple[weakref.ref[torch.Tensor], torch.Tensor]] = {}
        # Tensors written with values not known: a module's buffer among them is not read
        # from its noted values again in this run.
        self._forgotten: set[int] = set()

    def of(self, tensor: torch.Tensor) -> torch.Tensor | None:
        """The values of ``tensor`` on the CPU, if known: a CPU tensor is its own."""
        if tensor.device.type == "cpu" and type(tensor) is torch.Tensor:
            return tensor
        found = self._values.get(id(tensor))
        if found is None and id(tensor) not in self._forgotten:
            noted = _NOTED.get(id(tensor))
            if noted is not None and noted[0]() is tensor:  # (this run's own copy of it)
                with _disable_current_modes():
                    self._keep(tensor, noted[1].clone())
                found = self._values[id(tensor)]
        if found is None or found[0]() is not tensor:
            return None
        return found[1]

    def copied(self, real: torch.Tensor, copy: torch.Tensor) -> None:
        """``copy``, a meta copy of the real tensor ``real``, holds its values (a small
        constant: one that needs no grad)."""
        if not real.requires_grad and real.numel() <= LIMIT and real.device.type == "cpu":
            with _disable_current_modes():  # (a copy: a write the dry run runs stays its own)
                self._keep(copy, real.detach().clone())

    def read(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[bool, Any, tuple[Any, ...]]:
        """(True, what ``func`` (:data:`READS`, :data:`SHAPED_BY_VALUES`) gives on a real
        run, the arguments it is counted with) where the values it reads are known, else
        (False, None, ``args``). An op shaped by values gives meta tensors of the real
        shapes, with their values kept."""
        if func is aten.index.Tensor:
            return self._index(args)
        values = self._on_cpu(args, kwargs)
        if values is None:
            return False, None, args
        with _disable_current_modes():
            out = func(*values[0], **values[1])
        if func in READS:
            return True, out, args
        with _disable_current_modes():
            made = _like_on_meta(out)
        self._pair(made, out)
        return True, made, args

    def _index(self, args: tuple[Any, ...]) -> tuple[bool, Any, tuple[Any, ...]]:
        """``x[mask]`` (``index.Tensor`` with a boolean index): where the mask's values are
        known, the op on meta with the mask's positions (``nonzero``) as the index, as
        torch computes it (its backward an ``index_put`` at those positions), its output of
        the real shape (else the op runs as it is)."""
        source, indices = args[0], list(args[1])
        masks = [
            at
            for at, index in enumerate(indices)
            if isinstance(index, torch.Tensor) and index.dtype in (torch.bool, torch.uint8)
        ]
        if not masks or any(self.of(indices[at]) is None for at in masks):
            return False, None, args
        spread: list[Any] = []
        for at, index in enumerate(indices):
            if at not in masks:
                spread.append(index)
                continue
            mask = self.of(index)
            assert mask is not None
            with _disable_current_modes():
                places = mask.nonzero().unbind(1)
                spread += [
                    torch.empty(place.shape, dtype=torch.long, device=_META) for place in places
                ]
        with _disable_current_modes():
            out = aten.index.Tensor(source, spread)
        return True, out, (source, spread)

    def from_data(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        """Keep the values of ``out``, what ``func`` (:data:`FROM_DATA`) made on meta of
        Python data (no tensor in it), made again on the CPU."""
        if not isinstance(out, torch.Tensor) or not _dry(out) or not _small(out):
            return
        if any(isinstance(t, torch.Tensor) for t in _flat((args, kwargs))):
            return
        try:
            with _disable_current_modes():
                real = func(*args, **{**kwargs, "device": _CPU})
        except Exception:  # (data the CPU does not take alike: its values stay unknown)
            return
        if isinstance(real, torch.Tensor) and real.dtype == out.dtype:
            self._pair(out, real)

    def after(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        """Keep the values of ``out``, what ``func`` made on meta, where its inputs' values
        are known (an op writing a tensor whose values it cannot know forgets them all)."""
        if func in READS or func in SHAPED_BY_VALUES:
            return
        if torch.Tag.nondeterministic_seeded in func.tags or _uninitialized(func):
            self._forget_written(func, args)
            return
        if any(not _dry(t) for t in _written(func, args)):
            return  # (a real tensor written, a module's counter: never written again here)
        if func in _FILLS and _small(out):  # (the input's shape and dtype alone)
            args = tuple(_blank(a) for a in args)
        if not any(isinstance(t, torch.Tensor) for t in _flat((args, kwargs))):
            if not _dry(out) or not _small(out):
                return
            values: tuple[tuple[Any, ...], dict[str, Any]] | None = (args, _cpu_kwargs(kwargs))
        else:
            values = self._on_cpu(args, kwargs) if _small(out) else None
        if values is None:
            if func is aten._is_all_true.default:  # (a validation: taken as passed)
                with _disable_current_modes():
                    self._keep(out, torch.tensor(True))
                return
            self._forget_written(func, args)
            return
        try:
            with _disable_current_modes():
                real = func(*values[0], **values[1])
        except Exception:  # (an op the CPU does not run alike: its values stay unknown)
            self._forget_written(func, args)
            return
        self._pair(out, real)

    def _on_cpu(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """The arguments with each meta tensor replaced by its values (None: one unknown)."""
        unknown = False

        def swap(value: Any) -> Any:
            nonlocal unknown
            if isinstance(value, torch.Tensor):
                found = self.of(value)
                if found is None:
                    unknown = True
                return found
            if isinstance(value, list | tuple):
                return type(value)(swap(item) for item in value)
            return _CPU if isinstance(value, torch.device) and value == _META else value

        swapped = tuple(swap(a) for a in args)
        named = {key: swap(value) for key, value in kwargs.items()}
        if unknown:
            return None
        return swapped, named

    def _pair(self, meta: Any, real: Any) -> None:
        if isinstance(meta, torch.Tensor) and isinstance(real, torch.Tensor):
            if _dry(meta) and tuple(meta.shape) == tuple(real.shape):
                self._keep(meta, real)
        elif isinstance(meta, list | tuple) and isinstance(real, list | tuple):
            for one, other in zip(meta, real, strict=False):
                self._pair(one, other)

    def _keep(self, meta: torch.Tensor, real: torch.Tensor) -> None:
        key = id(meta)
        values = self._values

        def gone(_: object, key: int = key) -> None:
            found = values.get(key)
            if found is not None and found[0]() is None:
                del values[key]

        values[key] = (weakref.ref(meta, gone), real)

    def _forget_written(self, func: Any, args: tuple[Any, ...]) -> None:
        """An op whose values are not known wrote in place: what it wrote, and the views
        that share its memory, are known no more."""
        written = _written(func, args)
        self._forgotten.update(id(t) for t in written)
        if not written or not self._values:
            return
        roots = {id(t._base if t._base is not None else t) for t in written}
        for key, (ref, _) in list(self._values.items()):
            tensor = ref()
            if tensor is None:
                continue
            root = tensor._base if tensor._base is not None else tensor
            if id(root) in roots:
                del self._values[key]
                self._forgotten.add(key)


def _written(func: Any, args: tuple[Any, ...]) -> list[torch.Tensor]:
    """The tensors among ``args`` that ``func`` writes in place."""
    return [
        value
        for value, argument in zip(args, func._schema.arguments, strict=False)
        if argument.alias_info is not None
        and argument.alias_info.is_write
        and isinstance(value, torch.Tensor)
    ]


def _blank(value: Any) -> Any:
    """A tensor argument of a fill as a CPU tensor of its shape and dtype (its values
    unread)."""
    if isinstance(value, torch.Tensor):
        with _disable_current_modes():
            return torch.empty(value.shape, dtype=value.dtype)
    return value


def _uninitialized(func: Any) -> bool:
    """Whether ``func`` makes a tensor whose values are whatever its memory held."""
    name: str = func._overloadpacket.__name__
    return name.lstrip("_").startswith(("empty", "new_empty"))


def _flat(tree: Any) -> list[Any]:
    return torch.utils._pytree.tree_leaves(tree)


def _dry(out: Any) -> bool:
    """Whether ``out`` holds a dry run's tensor (meta, or fake): one without values."""
    return any(
        isinstance(t, torch.Tensor) and (t.device.type == "meta" or isinstance(t, FakeTensor))
        for t in _flat(out)
    )


def _small(out: Any) -> bool:
    tensors = [t for t in _flat(out) if isinstance(t, torch.Tensor)]
    return bool(tensors) and sum(t.numel() for t in tensors) <= LIMIT


def _cpu_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    found = dict(kwargs)
    if "device" in found:
        found["device"] = _CPU
    return found


def _like_on_meta(out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return torch.empty_strided(out.shape, out.stride(), dtype=out.dtype, device=_META)
    if isinstance(out, list | tuple):
        return type(out)(_like_on_meta(item) for item in out)
    return out
