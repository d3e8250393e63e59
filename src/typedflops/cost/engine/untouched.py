"""What a dry run leaves as it found it: the user's own tensors.

A dry run builds its own tensors (meta or fake), but a body may reach real ones: a model
or an optimizer used from a global or a closure. An op whose tensors are all real may run
for real (under ``FakeTensorMode``, an optimizer's step adding its real momentum buffer to
its real weights; on ``meta``, an op returning no tensor, which the counting mode passes
on as it is), and autograd puts a meta or fake gradient in a real leaf's ``.grad``, which
an optimizer's ``zero_grad`` sets to None. Estimating a training step must not train the
model: each real tensor an op writes in place is copied before its first write, and each
real leaf's ``.grad`` is noted when an op first takes the leaf, and both are put back when
the run ends (:class:`Untouched`). A dry run has two: one above its counting mode notes
the leaves the body's ops take (on ``meta`` the counting mode runs them on meta copies),
one below it the tensors written (those an op writes for real, not its meta copies).
"""

from __future__ import annotations

from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._mode_utils import no_dispatch
from torch.utils._python_dispatch import TorchDispatchMode

from ...contract.walk import tensors_in
from .edges import written_arguments

__all__ = ["Untouched"]

_Tensor = torch.Tensor
# The arguments each op writes in place (most: none).
_WRITES: dict[Any, tuple[tuple[int, str], ...]] = {}


def _real(tensor: torch.Tensor) -> bool:
    return not tensor.is_meta and not isinstance(tensor, FakeTensor)


class Untouched(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """A dispatch mode that keeps the real tensors the run writes (``writes``) or the
    ``.grad`` of the real leaves it takes (else), and puts them back on :meth:`restore`."""

    def __init__(self, writes: bool) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.writes = writes
        self.written: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.grads: dict[int, tuple[torch.Tensor, torch.Tensor | None]] = {}

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if not self.writes:
            for value in args:
                if (
                    isinstance(value, _Tensor)
                    and value.requires_grad
                    and value.is_leaf
                    and id(value) not in self.grads
                    and _real(value)
                ):
                    self.grads[id(value)] = (value, value.grad)
            return func(*args, **kwargs)
        writes = _WRITES.get(func)
        if writes is None:
            writes = _WRITES[func] = written_arguments(func) if hasattr(func, "_schema") else ()
        for index, name in writes:
            value = args[index] if index < len(args) else kwargs.get(name)
            for tensor in tensors_in(value, depth=1):
                if id(tensor) not in self.written and _real(tensor):
                    with no_dispatch():
                        self.written[id(tensor)] = (tensor, tensor.clone())
        return func(*args, **kwargs)

    def restore(self) -> None:
        """Put back what the run wrote of the user's tensors and their ``.grad``."""
        with no_dispatch(), torch.no_grad():
            for tensor, copy in self.written.values():
                if tensor.shape == copy.shape and tensor.stride() == copy.stride():
                    tensor.copy_(copy)
                else:  # (resized in place)
                    tensor.set_(
                        copy.untyped_storage(), copy.storage_offset(), copy.shape, copy.stride()
                    )
        for tensor, grad in self.grads.values():
            if tensor.grad is not grad:
                tensor.grad = grad
        self.written.clear()
        self.grads.clear()
