"""Dry runs of a call on fake tensors: a :class:`Probe` builds the call at any sizes, and
:func:`run_once` runs it and collects what each op cost (its backward included).

Fake tensors carry shapes, dtypes and devices but no storage, so nothing is allocated, and
kernels are chosen as on the device the call would run on.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import logging
import os
import re
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import einops
import sympy
import torch
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensorMode,
    UnsupportedOperatorException,
)
from torch.utils._python_dispatch import _disable_current_modes

from ...config import disabled
from ...errors import ContractError, DryRunError, SpecError
from .backward import backward_of
from .device_runs import standing_for
from .events import Event
from .fit import Size
from .frames import no_frame
from .held_sizes import Held
from .kernels import meta_target
from .module_assignments import assignments_put_back
from .rebuild import Rebuild
from .saved import SavedTensors
from .session import RunSession
from .untouched import Untouched
from .value_checks import _ChecksValues

__all__ = [
    "SAME_OP",
    "TERMS",
    "Counted",
    "Probe",
    "Run",
    "Runner",
    "Thunk",
    "dry_run_error",
    "run_once",
]

Thunk = Callable[[], Any]

#: Ops that torch runs in another op's place at some sizes, for the same work: a slice of a
#: dim's whole length is an ``alias`` (``self.position_ids[:, :seq]`` at ``seq`` equal to
#: the buffer's length, BERT's), a view either way. Runs are compared by these names, so
#: that a size at its most (the table's length) is a value of the size like any other.
SAME_OP = {"alias": "slice"}

#: The counts a dry run gives, each fitted as a formula (the terms of a Cost).
TERMS = ("forward", "backward", "matmul", "recompute", "activation")


@dataclass
class Probe:
    """A call that can be built at any sizes of its dims.

    ``dims`` are the base sizes of every dim of the call, ``variable`` those that may be
    changed independently, ``held`` the sizes the module holds that no rebuild changes
    (:mod:`.held_sizes`), ``repeats`` names for a module's count of repeated blocks,
    ``rebuild`` how to build the module at other sizes of its own (keys
    :meth:`Rebuild.key` in an assignment), ``build`` makes the call at an assignment of
    sizes with its tensors on a device (``"meta"``), ``device`` the device type the call
    would run on, ``declared`` a ``flops=`` formula replacing the outermost call's count,
    ``pinned`` sizes (by key in an assignment) held at a value that no run changes.
    """

    function: str
    dims: dict[str, Size]
    variable: list[str]
    build: Callable[[Mapping[str, Size], str], Thunk]
    device: str = "cpu"
    held: tuple[Held, ...] = ()
    repeats: dict[str, int] = field(default_factory=dict)
    declared: sympy.Expr | None = None
    rebuild: Rebuild | None = None
    pinned: dict[str, Size] = field(default_factory=dict)


@dataclass
class Run:
    """The events of one dry run, the dims its outermost call bound, and the bytes of the
    activations autograd saved for backward (each storage once, weights not included)."""

    events: list[Event]
    bound: dict[str, Size]
    saved: list[Event] = field(default_factory=list)

    @property
    def ops(self) -> list[str]:
        """The names of its ops, in order, an op that is another at some sizes for the same
        work named as that one (:data:`SAME_OP`)."""
        return [SAME_OP.get(event.op, event.op) for event in self.events]

    def counts(self) -> dict[str, int]:
        """Its count of each of :data:`TERMS`."""
        events = self.events
        return {
            "forward": sum(e.flops for e in events),
            "backward": sum(b.flops for e in events for b in e.backward),
            "matmul": sum(e.matmul_flops for e in events),
            "recompute": sum(e.flops for e in events if e.recomputed)
            + sum(r.flops for e in events for r in e.rerun),
            "activation": sum(e.flops for e in self.saved),
        }


@dataclass
class Counted:
    """What a check needs of a run, its events let go: the names of its ops, its count of
    each of :data:`TERMS` and the dims its outermost call bound (a deep model's run holds
    a few events per op: the far checks' runs need not be kept whole)."""

    ops: list[str]
    totals: dict[str, int]
    bound: dict[str, Size]

    @classmethod
    def of(cls, run: Run) -> Counted:
        """The counts of ``run``."""
        return cls(run.ops, run.counts(), dict(run.bound))

    def counts(self) -> dict[str, int]:
        """Its count of each of :data:`TERMS`, as :meth:`Run.counts`."""
        return dict(self.totals)


def _refuse_record(record: logging.LogRecord) -> bool:
    return False


@contextlib.contextmanager
def _quiet_fake_tensors() -> Iterator[None]:
    """Keep FakeTensorMode from logging the errors of runs at sizes the body refuses (a
    changed dim that the weights fix): those runs are expected to fail, quietly. (A filter,
    not a level: setting a level clears every logger's cache.)"""
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    logger.addFilter(_refuse_record)
    try:
        yield
    finally:
        logger.removeFilter(_refuse_record)


def run_once(
    probe: Probe, assignment: Mapping[str, Size], *, fake: bool = False, hooks: bool = True
) -> Run:
    """Run the probe's call once at ``assignment`` and collect its events (and backward).

    On ``meta`` tensors (the default: fast, and tensors made inside the body are meta too),
    attention taking the kernel the call's device would pick; with ``fake=True`` under
    ``FakeTensorMode`` on the call's own device (slower; for bodies that mix in tensors
    that are not arguments, such as module-level constants). With ``hooks=False``, without
    the saved-tensor hooks that measure activation memory (``torch.func``'s transforms
    refuse them): none is measured.

    The dispatch and torch function modes open around it (a ``FlopCounterMode``, a
    profiler's, a record's) are taken off torch's stacks for the run: its ops are the
    model's at other sizes, never work that ran.
    """
    target = None if fake else probe.device
    if target == "meta":
        target = meta_target()
    session = RunSession(probe.function, target, on_meta=not fake)
    saved = SavedTensors()
    session.saved = saved if hooks else None
    with _collection_paused(), _disable_current_modes(), _function_modes_lifted():
        return _run(probe, assignment, session, saved, fake, target)


@contextlib.contextmanager
def _function_modes_lifted() -> Iterator[None]:
    """Take the torch function modes open here off torch's stack inside the block (a
    user's own ``TorchFunctionMode``, a record's naming mode) and put them back after."""
    lifted = [
        torch._C._pop_torch_function_stack() for _ in range(torch._C._len_torch_function_stack())
    ]
    try:
        yield
    finally:
        for mode in reversed(lifted):
            torch._C._push_on_torch_function_stack(mode)


@contextlib.contextmanager
def _collection_paused() -> Iterator[None]:
    """Pause Python's automatic garbage collection while a dry run runs: it makes a few
    objects per op (events, fake tensors, autograd's nodes) and holds them to its end, so
    the collector would walk every one of them again and again for nothing to free (a
    quarter of a deep model's run); what the run leaves is collected as usual after it."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _run(
    probe: Probe,
    assignment: Mapping[str, Size],
    session: RunSession,
    saved: SavedTensors,
    fake: bool,
    target: str | None,
) -> Run:
    """:func:`run_once`'s run, with its session and saved-tensor hooks made."""
    device = probe.device if fake else "meta"
    mode = FakeTensorMode(allow_non_fake_inputs=True) if fake else contextlib.nullcontext()
    # (no record open here counts the dry run's own work: building its inputs and modules)
    with (
        mode,
        torch.device(device),
        disabled(False),
        _quiet_fake_tensors(),
        no_frame(),
        standing_for(target),
    ):
        thunk = probe.build(assignment, device)
        # (the user's real tensors the body reaches stay as they are: those written, seen
        # below the counting mode, and the leaves taken, seen above it: see .untouched)
        written, leaves = Untouched(writes=True), Untouched(writes=False)
        try:
            with (
                written,
                assignments_put_back(),
                session.active(),
                leaves,
                torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack)
                if session.saved is not None
                else contextlib.nullcontext(),
            ):
                result = _finish(thunk())
                if session.mode is not None:
                    session.mode.sums.settle()  # (while the result is held)
                del result
        finally:
            written.restore()
            leaves.restore()
    with standing_for(target):
        for event in session.events:
            # A repeated block's events share their first call's list: filled once.
            if event.needs_grad and not event.backward:
                event.backward.extend(backward_of(event).events)
    return Run(session.events, dict(session.bound), saved.events())


class Runner:
    """The dry runs of one probe, each set of sizes run once: on ``meta``, or under
    ``FakeTensorMode`` where the base run cannot run on meta (a module-level tensor the
    body uses cannot mix with meta ones)."""

    def __init__(self, probe: Probe) -> None:
        self.probe = probe
        self.fake = False
        #: Whether the runs go without saved-tensor hooks (the body calls ``torch.func``'s
        #: transforms, which refuse them): no activation memory is measured.
        self.hooks = True
        #: Whether the base run on meta read a tensor's value (``bool(x.all())``) and the
        #: run under FakeTensorMode went on: the body took a path on fake tensors (code that
        #: checks for them, as transformers' masks do) that an eager run may not take.
        self.branched = False
        #: The ops the base run ran (what a run at other sizes is predicted from).
        self.ops = 0
        self._runs: dict[tuple[tuple[str, Size], ...], Run | None] = {}
        self._counted: dict[tuple[tuple[str, Size], ...], Counted] = {}

    def base(self, assignment: Mapping[str, Size]) -> Run:
        """The run at the call's own sizes; its errors are the call's."""
        try:
            run = run_once(self.probe, assignment, hooks=self.hooks)
        except (ContractError, SpecError):
            raise
        except _ChecksValues as exc:
            raise value_check_error(self.probe, exc) from None
        except (RuntimeError, NotImplementedError, TypeError) as exc:
            if _too_large(exc):
                raise dry_run_error(self.probe, exc) from None
            if isinstance(exc, UnsupportedOperatorException):  # (refused before it ran)
                raise no_shape_kernel_error(self.probe, exc) from None
            if self.hooks and _REFUSES_HOOKS in str(exc):  # (torch.func.grad, vjp, jacrev)
                self.hooks = False
                return self.base(assignment)
            self.fake = True  # a tensor the body reaches that meta cannot stand in for
            self.branched = _reads_value(exc)
            try:
                run = run_once(self.probe, assignment, fake=True, hooks=self.hooks)
            except (ContractError, SpecError):
                raise
            except Exception as error:
                if _no_shape_kernel(error) is not None:
                    raise no_shape_kernel_error(self.probe, error) from None
                if _no_layout_kernel(exc):  # (a sparse or nested layout on meta, then fake)
                    raise no_shape_kernel_error(self.probe, exc) from None
                if not _explained(error):
                    raise body_error(self.probe, error) from error
                raise dry_run_error(self.probe, error) from None
        except Exception as exc:  # the body's own refusal (an assert, a ValueError...)
            raise body_error(self.probe, exc) from exc
        self._runs[_key(assignment)] = run
        self.ops = len(run.events)
        return run

    def run(self, assignment: Mapping[str, Size]) -> Run | None:
        """The run at ``assignment``, or None where the body refuses those sizes."""
        key = _key(assignment)
        if key not in self._runs:
            try:
                self._runs[key] = run_once(self.probe, assignment, fake=self.fake, hooks=self.hooks)
            except Exception:
                self._runs[key] = None
        return self._runs[key]

    def counted(self, assignment: Mapping[str, Size]) -> Run | Counted | None:
        """The run at ``assignment`` for a check that reads only its op names and counts
        (None where the body refuses those sizes): the whole run where one is kept, else
        its counts, its events not kept (a later :meth:`run` at these sizes runs again)."""
        key = _key(assignment)
        if key in self._runs:
            return self._runs[key]
        if key not in self._counted:
            try:
                run = run_once(self.probe, assignment, fake=self.fake, hooks=self.hooks)
            except Exception:
                self._runs[key] = None
                return None
            self._counted[key] = Counted.of(run)
        return self._counted[key]


#: What torch says where ``torch.func``'s transforms meet saved-tensor hooks.
_REFUSES_HOOKS = "don't yet support saved tensor hooks"


def _key(assignment: Mapping[str, Size]) -> tuple[tuple[str, Size], ...]:
    return tuple(sorted(assignment.items()))


def _finish(result: Any) -> Any:
    """Run a coroutine or generator body to its end (a dry run costs the whole body)."""
    if inspect.iscoroutine(result):
        return _drive(result)
    if inspect.isgenerator(result):
        return list(result)
    if inspect.isasyncgen(result):

        async def drain() -> list[Any]:
            return [item async for item in result]

        return _drive(drain())
    return result


def _drive(coroutine: Any) -> Any:
    """Run a coroutine to completion without an event loop when it never waits on one."""
    try:
        while True:
            coroutine.send(None)
    except StopIteration as stop:
        return stop.value
    except RuntimeError:
        coroutine.close()
        raise
    finally:
        with contextlib.suppress(RuntimeError):
            coroutine.close()


_SPARSE_LAYOUTS = ("", "_csr", "_csc", "_bsr", "_bsc")

# Ops whose output depends on values, by what the user wrote.
_VALUE_OPS = {
    "_local_scalar_dense": "a tensor's value (.item(), bool(), int(), an `if` on a tensor)",
    "nonzero": "nonzero (what x[mask] runs)",
    "_grouped_mm": "_grouped_mm (a grouped product: each group's rows, offs, are values)",
    "_ctc_loss": "ctc_loss (its work, set by the input and target lengths and labels, is values)",
    "multilabel_margin_loss_forward": (
        "multilabel_margin_loss (its work, set by which margins are positive, is values)"
    ),
    "_unique2": "unique",
    "unique_dim": "unique",
    "unique_consecutive": "unique_consecutive",
    **{f"_to_sparse{to}": f"to_sparse{to} (one value per nonzero)" for to in _SPARSE_LAYOUTS},
}


def _too_large(exc: BaseException) -> bool:
    return "overflow" in str(exc).lower() and "size" in str(exc).lower()


def _reads_value(exc: BaseException) -> bool:
    """Whether a run on meta stopped at reading a tensor's value (``.item()``, ``bool()``,
    ``.tolist()``) or at an op whose output shape depends on values (``nonzero``)."""
    text = str(exc)
    return any(part in text for part in _VALUE_READS)


_VALUE_READS = (
    "item() cannot be called on meta tensors",
    "Cannot copy out of meta tensor",
    "meta device type tensor to numpy",
    "a correct data-independent implementation does not exist",
)


def _explained(exc: BaseException) -> bool:
    return isinstance(exc, DynamicOutputShapeException | DataDependentOutputException) or (
        _too_large(exc)
    )


def dry_run_error(probe: Probe, exc: BaseException) -> DryRunError:
    """One line for an exception a dry run cannot go past: what the body ran, the user's
    line that ran it, and the way out."""
    where = _user_line(exc)
    at = f" at {where}" if where else ""
    if _too_large(exc):
        shape = re.search(r"sizes=\[([0-9, ]*)\]", str(exc))
        tensor = f"a tensor of shape ({shape.group(1)})" if shape else "a tensor"
        given = [name for name in probe.dims if name in probe.variable] or list(probe.dims)
        sizes = ", ".join(f"{name}={probe.dims[name]}" for name in given)
        return DryRunError.at(
            f"{probe.function}()",
            f"at {sizes}, {tensor}{at} has more bytes than torch can address (2**63), even on meta",
            hint="estimate at smaller sizes and evaluate cost.formula at these",
        )
    func = exc.args[0] if exc.args else None
    name = str(getattr(getattr(func, "_overloadpacket", None), "__name__", func))
    shown = _VALUE_OPS.get(name, name)
    error = DryRunError.at(
        f"{probe.function}()",
        f"a dry run cannot go past {shown}{at}: its result depends on the tensors' values, "
        "not only their shapes",
        hint="record a real run instead (with typedflops.record() as rec: ...)",
    )
    error.reads_values = f"{shown}{at}"
    return error


def _no_shape_kernel(exc: BaseException) -> str | None:
    """The op a run on meta and under FakeTensorMode cannot run, torch having no kernel for
    it on shapes alone (a strided nested tensor built from a list, a backend's kernel
    called by name, a product of a sparse layout), or None for another failure."""
    if isinstance(exc, UnsupportedOperatorException):
        return str(exc.func._overloadpacket.__name__)
    found = _NO_META_KERNEL.match(str(exc))
    return (found.group(1) or found.group(2)) if found else None


# torch's words for an op with no kernel on meta: "aten::slow_conv3d_forward: attempted to
# run this operator with Meta tensors", "Could not run 'aten::addmm.out' with arguments
# from the 'SparseCsrMeta' backend" (the layout's meta backend named first, if any)
_NO_META_KERNEL = re.compile(
    r"aten::(\w+): attempted to run this operator with Meta tensors"
    r"|Could not run 'aten::(\w+)(?:\.\w+)?' with arguments from the '(\w*)Meta' backend"
)


def _no_layout_kernel(exc: BaseException) -> bool:
    """Whether a run on meta stopped at an op with no kernel for a sparse or nested
    layout's meta backend (``SparseCsrMeta``): fake tensors have none either."""
    found = _NO_META_KERNEL.match(str(exc))
    return found is not None and bool(found.group(3))


def no_shape_kernel_error(probe: Probe, exc: BaseException) -> DryRunError:
    """One line for an op torch cannot run on shapes alone: which, the user's line, and the
    way out."""
    where = _user_line(exc)
    at = f" at {where}" if where else ""
    return DryRunError.at(
        f"{probe.function}()",
        f"a dry run cannot go past {_no_shape_kernel(exc)}{at}: torch has no kernel for it "
        "on shapes alone (meta or fake tensors)",
        hint="record a real run instead (with typedflops.record() as rec: ...)",
    )


def value_check_error(probe: Probe, exc: _ChecksValues) -> DryRunError:
    """One line for a function that checks its tensors' values before it computes (see
    :mod:`.value_checks`): which, the user's line, what it checks, and the way out."""
    where = _user_line(exc)
    at = f" at {where}" if where else ""
    error = DryRunError.at(
        f"{probe.function}()",
        f"a dry run cannot go past {exc.what}{at}: it checks {exc.check}, values a dry run"
        " does not have",
        hint="record a real run instead (with typedflops.record() as rec: ...)",
    )
    error.reads_values = f"{exc.what}{at}"
    return error


def body_error(probe: Probe, exc: BaseException) -> SpecError:
    """One line for a body that torch refuses at the call's sizes (a ``Linear(8, 16)`` given
    ``d=9``, a kernel larger than its input, ``.numpy()``): the sizes, the user's line and
    torch's reason."""
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, LookupError | AssertionError):  # ``KeyError: 20`` says more than 20
        reason = f"{type(exc).__name__}: {reason}"
    where = _user_line(exc)
    at = f" at {where}" if where else ""
    # (a value read outside torch's ops: a NumPy copy, a number formatted, f"{loss:.3f}")
    read = ".numpy()" if "numpy" in reason and "tensor subclasses" in reason else None
    if isinstance(exc, TypeError) and reason.startswith("unsupported format string passed"):
        read = 'a tensor\'s value formatted (f"{x:.3f}")'
    if "don't yet support saved tensor hooks" in reason:  # (torch.func.grad, vjp, jacrev)
        return DryRunError.at(
            f"{probe.function}()",
            f"a dry run cannot go through {reason.split(' don')[0]}{at}: they refuse the "
            "saved-tensor hooks a dry run measures activation memory with",
            hint="record a real run instead (with typedflops.record() as rec: ...)",
        )
    if read is not None:
        error = DryRunError.at(
            f"{probe.function}()",
            f"a dry run cannot go past {read}{at}: its result depends on the tensors' "
            "values, not only their shapes",
            hint="record a real run instead (with typedflops.record() as rec: ...)",
        )
        error.reads_values = f"{read}{at}"
        return error
    sizes = ", ".join(f"{name}={size}" for name, size in probe.dims.items())
    if not sizes:  # (every size a number: none to change)
        return SpecError.at(f"{probe.function}()", f"the body fails{at}: {reason}")
    return SpecError.at(
        f"{probe.function}()",
        f"at {sizes} the body fails{at}: {reason}",
        hint="give sizes the body can run at",
    )


# Where code that is not the user's lives: torch, sympy, typedflops, the standard library.
_LIBRARIES = (
    *(os.path.dirname(module.__file__ or "") + os.sep for module in (torch, sympy, einops)),
    os.path.dirname(os.path.dirname(os.path.dirname(__file__))) + os.sep,
)
_STDLIB = os.path.dirname(contextlib.__file__) + os.sep


def _library(filename: str) -> bool:
    return (
        filename.startswith(_LIBRARIES)
        or filename.startswith("<")
        or (filename.startswith(_STDLIB) and "-packages" not in filename)
    )


def _user_line(exc: BaseException) -> str | None:
    """``file.py:12 (the line)`` of the innermost frame of the traceback outside torch,
    typedflops and the standard library."""
    found = None
    for summary in traceback.extract_tb(exc.__traceback__):
        if not _library(summary.filename):
            found = summary
    if found is None:
        return None
    line = f" ({found.line.strip()})" if found.line else ""
    return f"{os.path.basename(found.filename)}:{found.lineno}{line}"
