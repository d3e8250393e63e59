"""The tensors a value holds: a call's arguments, an op's outputs, a function's result.

One walk for every layer above: the cost engine reads an op's tensors (their bytes, their
grad, whether they are real) and a repeated call's arguments, the bench finds where a
call's tensors live.
"""

from __future__ import annotations

import torch

__all__ = ["tensors_in"]


def tensors_in(value: object, *, parameters: bool = False, depth: int = 6) -> list[torch.Tensor]:
    """The tensors in ``value``, in order: ``value`` itself, the items of its lists and
    tuples and the values of its dicts, looked into ``depth`` containers deep (deeper ones
    are passed over, as is anything else); with ``parameters``, each ``nn.Module``'s
    parameters too.

    >>> x, y = torch.ones(2), torch.zeros(3)
    >>> [tuple(t.shape) for t in tensors_in(((x, 1.0), {"bias": [y]}))]
    [(2,), (3,)]
    >>> len(tensors_in([[[x]]], depth=2)), len(tensors_in(torch.nn.Linear(2, 3), parameters=True))
    (0, 2)
    """
    found: list[torch.Tensor] = []
    _collect(value, found, parameters, depth)
    return found


def _collect(value: object, found: list[torch.Tensor], parameters: bool, depth: int) -> None:
    if isinstance(value, torch.Tensor):
        found.append(value)
    elif not depth:
        return
    elif isinstance(value, (list, tuple)):
        for item in value:
            _collect(item, found, parameters, depth - 1)
    elif isinstance(value, dict):
        for item in value.values():
            _collect(item, found, parameters, depth - 1)
    elif parameters and isinstance(value, torch.nn.Module):
        found.extend(value.parameters())
