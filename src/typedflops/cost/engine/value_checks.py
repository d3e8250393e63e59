"""Torch functions that read a value only to check it, run on ``meta`` as on a device.

``torch.cov`` (and ``torch.corrcoef``, which calls it) and ``F.gaussian_nll_loss`` read one
value each before they compute, on tensors whose values a dry run does not have:

- ``torch.cov(x, correction=c)`` (``x`` (variables, n) or (n,)) asks whether its degrees of
  freedom ``n - c`` are <= 0 (``equal(norm.le(0), ones)``), where it warns and divides by
  zero. Without weights that number is the shape's: the dry run answers it from ``n``.
  With ``fweights`` or ``aweights`` torch checks the weights' values (non-negative,
  ``fweights`` integral, a sum that is not zero) and the degrees of freedom are their sum:
  values, which a dry run has not (:class:`_ChecksValues` says so).
- ``F.gaussian_nll_loss(input, target, var)`` raises if ``var`` has a negative entry
  (``bool(torch.any(var < 0))``): the dry run takes the check as passed (its ops, ``lt``
  and ``any``, are counted as they run; nothing the loss computes depends on it).

Each read is counted as the op it is (``equal``, ``_local_scalar_dense``) and answered
(:func:`answer`), so the dry run runs the ops a device runs, one for one.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["answer", "checked_on_meta", "checks_values"]

_COV = frozenset({torch.cov, torch.Tensor.cov})
_CORRCOEF = frozenset({torch.corrcoef, torch.Tensor.corrcoef})
_GAUSSIAN_NLL = F.gaussian_nll_loss

#: The answers, in order, to the value reads of the call running now (None: none known).
_ANSWERS: ContextVar[list[Any] | None] = ContextVar("typedflops_value_answers", default=None)


class _ChecksValues(Exception):
    """A check torch makes on a tensor's values before it computes: no dry run goes past
    it. ``what`` names the function and ``check`` the values it checks."""

    def __init__(self, what: str, check: str) -> None:
        super().__init__(f"{what} checks {check}")
        self.what = what
        self.check = check


def checks_values(func: Any) -> bool:
    """Whether ``func`` is one of the functions this module runs on ``meta``.

    >>> checks_values(torch.cov), checks_values(torch.Tensor.corrcoef), checks_values(torch.mm)
    (True, True, False)
    """
    try:
        return func in _COV or func in _CORRCOEF or func is _GAUSSIAN_NLL
    except TypeError:  # an unhashable callable
        return False


def checked_on_meta(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``func(*args, **kwargs)`` on meta tensors, its value checks answered from shapes (or
    :class:`_ChecksValues` where they need values)."""
    answers = _answers(func, args, kwargs)
    with _answering(answers), warnings.catch_warnings():
        # (cov's warning where n <= correction, at a probe's sizes, is not the call's)
        warnings.filterwarnings("ignore", "cov\\(\\): degrees of freedom")
        return func(*args, **kwargs)


def answer(func: Any, args: tuple[Any, ...]) -> tuple[bool, Any]:
    """For a value read ``func(*args)`` on meta tensors: (True, the value the device would
    read) while a call of this module runs and has an answer left, else (False, None)."""
    pending = _ANSWERS.get()
    if not pending or not any(
        isinstance(a, torch.Tensor) and a.device.type == "meta" for a in args
    ):
        return False, None
    return True, pending.pop(0)


@contextlib.contextmanager
def _answering(answers: list[Any]) -> Iterator[None]:
    token = _ANSWERS.set(answers)
    try:
        yield
    finally:
        _ANSWERS.reset(token)


def _answers(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    """The values ``func``'s checks read, in order, known from the arguments' shapes."""
    if func is _GAUSSIAN_NLL:  # (input, target, var, full, eps, reduction)
        var = kwargs.get("var", args[2] if len(args) > 2 else None)
        # `torch.any(var < 0)`: no negative variance (a float var is checked in Python)
        return [False] if isinstance(var, torch.Tensor) else []
    x = kwargs.get("input", args[0] if args else None)  # (input, *, correction, weights)
    assert isinstance(x, torch.Tensor)
    correction = 1
    if func in _COV:
        for key in ("fweights", "aweights"):
            if kwargs.get(key) is not None:
                raise _ChecksValues(
                    "torch.cov",
                    f"the values of its {key} (non-negative, fweights integral, a sum that is"
                    " not zero, the degrees of freedom their sum)",
                )
        correction = int(kwargs.get("correction", 1))
    observations = x.shape[-1] if x.dim() > 0 else 1
    # `norm_factor.le(0)`, the degrees of freedom n - correction (cov's only read)
    return [observations - correction <= 0]
