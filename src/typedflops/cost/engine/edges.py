"""Which inputs an op sends gradients to, which it writes in place, and where the tensors a
block reaches come from: what :mod:`.fan_in` counts its edges with.

An op's edges are the inputs needing grad its backward differentiates: one replay of its
backward (:mod:`.backward` hands it here) per op and pattern of inputs needing grad says,
kept on the op's event.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

import torch

from ...contract.walk import tensors_in
from .events import Event
from .tensors import differentiable

__all__ = [
    "Role",
    "edges_of",
    "flows_of",
    "op_tensors",
    "own_saves",
    "replay_with",
    "role_tensor",
    "roles",
    "split_of",
    "written",
    "written_arguments",
]

_UNSET: Any = object()
_Tensor = torch.Tensor


def edges_of(
    event: Event, keys: tuple[Any, Any], args: tuple[Any, ...], kwargs: Any
) -> tuple[int, ...] | None:
    """The inputs needing grad that ``event``'s op differentiates (their positions among
    them; None: every one), kept on the event with the outputs a gradient flows through
    (:func:`flows_of`). Which inputs an op differentiates depends on the op and on which
    of its inputs need grad (and are complex: a complex determinant's sign has a
    gradient), not on their sizes: one replay of its backward per such pattern says. Asked
    inside ``__torch_dispatch__``, below autograd: the replay runs with ``keys``, the
    dispatch keys outside the mode."""
    found = event.__dict__.get("_edges", _UNSET)
    if found is not _UNSET:
        return found  # type: ignore[no-any-return]
    if not _REPLAY:
        return None
    grads = tuple(
        (t.requires_grad, t.is_complex()) for t in op_tensors(args, kwargs) if differentiable(t)
    )
    pattern = (event.func, grads)
    known = _EDGES.get(pattern)
    if known is None:
        # (what the replay saves is its own: not the run's activations, nor a region's)
        with torch._C._ForceDispatchKeyGuard(*keys), own_saves():
            result = _REPLAY[0](event)
            split = _split(event, result.edges, result.flows)
        if len(_EDGES) > 4096:
            _EDGES.clear()
        known = _EDGES[pattern] = (result.edges, result.flows, split)
    edges: tuple[int, ...] | None = known[0]
    event.__dict__["_edges"], event.__dict__["_flows"], event.__dict__["_split"] = known
    return edges


def _split(
    event: Event, edges: tuple[int, ...] | None, flows: tuple[int, ...] | None
) -> dict[int, tuple[int, ...]] | None:
    """The inputs each output of an op with several sends a gradient to, where they are
    not all the op's (``torch._foreach_mul``: the k-th output's go to the k-th input
    alone); None where each output's go to every edge, or the op has too many outputs
    to replay one by one."""
    if not flows or not edges or len(flows) < 2 or len(edges) < 2 or len(flows) > 64:
        return None
    each: dict[int, tuple[int, ...]] = {}
    for index in flows:
        alone = object.__new__(Event)
        alone.__dict__.update(event.__dict__)
        alone.reached = (index,)
        found = _REPLAY[0](alone).edges
        if found is None:
            return None
        each[index] = found
    return None if all(found == edges for found in each.values()) else each


def split_of(event: Event) -> dict[int, tuple[int, ...]] | None:
    """The inputs each output of ``event``'s op sends a gradient to, where they are not
    all its edges (see :func:`edges_of`); None: each sends one to every edge."""
    found: dict[int, tuple[int, ...]] | None = event.__dict__.get("_split")
    return found


def flows_of(event: Event) -> tuple[int, ...] | None:
    """The outputs of ``event``'s op that a gradient flows through (their positions among
    its floating-point outputs; None: not known), found with its edges
    (:func:`edges_of`)."""
    found: tuple[int, ...] | None = event.__dict__.get("_flows")
    return found


#: Edges, the outputs a gradient flows through and the edges of each where they differ,
#: by op and by which of its inputs need grad.
_EDGES: dict[Any, tuple[Any, ...]] = {}


# The replay that finds an op's backward (see .backward, which counts with the counting
# mode and so sets it here).
_REPLAY: list[Callable[[Event], Any]] = []


def replay_with(find: Callable[[Event], Any]) -> None:
    """Find each op's edges with ``find`` (its backward: :func:`.backward.backward_of`)."""
    _REPLAY[:] = [find]


def _same(tensor: Any) -> Any:
    return tensor


def own_saves() -> Any:
    """Saved-tensor hooks that keep what they are given, over those of the run (a dry
    run's, a checkpointed region's, ``save_on_cpu``'s: a replay's meta tensors are its
    own, never packed by the user's hooks), where hooks may be pushed."""
    if (
        torch._C._autograd._top_saved_tensors_default_hooks(False) is None
        or not torch._C._autograd._saved_tensors_hooks_is_enabled()  # type: ignore[attr-defined]
    ):
        return contextlib.nullcontext()
    return torch.autograd.graph.saved_tensors_hooks(_same, _same)


def op_tensors(args: tuple[Any, ...], kwargs: Any) -> list[torch.Tensor]:
    """An op's tensor arguments in order (an op takes tensors and lists of them), as
    :func:`~typedflops.contract.walk.tensors_in` finds them, in one pass."""
    found: list[torch.Tensor] = []
    for value in (*args, *kwargs.values()) if kwargs else args:
        if isinstance(value, _Tensor):
            found.append(value)
        elif type(value) is list or type(value) is tuple:
            found.extend(item for item in value if isinstance(item, _Tensor))
    return found


@functools.lru_cache(maxsize=4096)
def written_arguments(func: Any) -> tuple[tuple[int, str], ...]:
    """The arguments an op writes in place (``add_``'s self, an ``out=``): their positions
    and names; none for most ops."""
    return tuple(
        (index, argument.name)
        for index, argument in enumerate(func._schema.arguments)
        if argument.alias_info is not None and argument.alias_info.is_write
    )


def written(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """The tensors an op writes in place (``add_``'s self, an ``out=``)."""
    found: list[torch.Tensor] = []
    for index, name in written_arguments(func):
        value = args[index] if index < len(args) else kwargs.get(name)
        found.extend(tensors_in(value, depth=1))
    return found


# Where a tensor a block reaches came from: ("arg", i), ("module", i, name).
Role = tuple[Any, ...]


def roles(args: tuple[Any, ...], kwargs: Any) -> list[tuple[Role, torch.Tensor]]:
    """The tensors needing grad that a call reaches from outside: its tensor arguments and
    its modules' parameters and buffers, each with where it came from."""
    found: list[tuple[Role, torch.Tensor]] = [
        (("arg", index), tensor)
        for index, tensor in enumerate(tensors_in((args, kwargs)))
        if tensor.requires_grad
    ]
    for index, value in enumerate(args):
        if isinstance(value, torch.nn.Module):
            for name, tensor in (*value.named_parameters(), *value.named_buffers()):
                if tensor.requires_grad:
                    found.append((("module", index, name), tensor))
    return found


def role_tensor(role: Role, args: tuple[Any, ...], kwargs: Any) -> torch.Tensor | None:
    """The tensor of ``role`` in another call's arguments (None if it has none)."""
    try:
        if role[0] == "arg":
            return tensors_in((args, kwargs))[role[1]]
        module = args[role[1]]
        return dict((*module.named_parameters(), *module.named_buffers()))[role[2]]  # type: ignore[no-any-return]
    except (IndexError, KeyError, AttributeError):
        return None
