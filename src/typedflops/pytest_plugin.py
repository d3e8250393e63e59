"""The typedflops pytest plugin (entry point ``pytest11``; does nothing unless asked).

``pytest --typedflops=mypkg,other``
    installs :func:`typedflops.import_hook.install_import_hook` for the named packages
    before conftest files and tests are imported, so every jaxtyping-annotated function in
    them is checked during the run. The option can be repeated.
``pytest --typedflops-report``
    prints, at the end of the session, one row per ``@typed_flops`` function that ran
    (with checks on): calls, the dims it was called with, its FLOP formula, and its total
    FLOPs over those calls (a caller's FLOPs include its nested decorated calls).

With either option a test that fails with a :class:`~typedflops.errors.ContractError`
is reported compactly: the test's line, the line that made the bad call, and the error's
own message (its reason and the bindings), without the frames inside typedflops. Pass
``--tb=long`` or ``--full-trace`` to see the full traceback.

Importing this module imports neither torch nor the rest of typedflops: a pytest run that
does not use the options pays nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .text import text_table

if TYPE_CHECKING:
    from .cost import Cost
    from .decorator import TypedFunction
    from .import_hook import ImportHook
    from .scope import CallState

__all__ = [
    "pytest_addoption",
    "pytest_configure",
    "pytest_load_initial_conftests",
    "pytest_runtest_makereport",
    "pytest_runtest_teardown",
    "pytest_terminal_summary",
    "pytest_unconfigure",
]

_PACKAGE_DIR = Path(__file__).resolve().parent
_MAX_DIMS_SHOWN = 3
_MAX_DIMS_WIDTH = 60

Size = int | tuple[int, ...]
Binding = tuple[tuple[str, Size], ...]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("typedflops", "typedflops: shape contracts and FLOP counts")
    group.addoption(
        "--typedflops",
        action="append",
        default=[],
        metavar="PKG[,PKG...]",
        help="check every jaxtyping-annotated function of these packages with @typed_flops "
        "(an import hook installed before tests are imported; repeatable)",
    )
    group.addoption(
        "--typedflops-report",
        action="store_true",
        default=False,
        help="print a table of every @typed_flops function that ran: calls, dims seen, "
        "formula, total FLOPs",
    )


def packages_from_option(values: Sequence[str]) -> list[str]:
    """``["a,b", "c", "a"]`` -> ``["a", "b", "c"]``: split on commas, drop repeats.

    >>> packages_from_option(["mypkg, other", "mypkg"])
    ['mypkg', 'other']
    """
    found: list[str] = []
    for value in values:
        for name in value.split(","):
            name = name.strip()
            if name and name not in found:
                found.append(name)
    return found


_hook_key: pytest.StashKey[ImportHook] = pytest.StashKey()
_tally_key: pytest.StashKey[CallTally] = pytest.StashKey()
_active_key: pytest.StashKey[bool] = pytest.StashKey()


def _install_hook(config: pytest.Config, values: Sequence[str]) -> None:
    packages = packages_from_option(values)
    if packages and _hook_key not in config.stash:
        from .import_hook import install_import_hook

        config.stash[_hook_key] = install_import_hook(*packages)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    # Before conftest files are imported: a conftest that imports the package must
    # already get the checked version.
    _install_hook(early_config, getattr(early_config.known_args_namespace, "typedflops", []))


def pytest_configure(config: pytest.Config) -> None:
    values: list[str] = config.getoption("typedflops")
    report: bool = config.getoption("typedflops_report")
    config.stash[_active_key] = bool(packages_from_option(values)) or report
    _install_hook(config, values)  # when the plugin was registered after that hook ran
    if report:
        tally = CallTally()
        tally.start()
        config.stash[_tally_key] = tally


def pytest_unconfigure(config: pytest.Config) -> None:
    hook = config.stash.get(_hook_key, None)
    if hook is not None:
        hook.uninstall()
        del config.stash[_hook_key]
    tally = config.stash.get(_tally_key, None)
    if tally is not None:
        tally.stop()
        del config.stash[_tally_key]


# -- compact contract errors ------------------------------------------------------------


def _inside_typedflops(entry: Any) -> bool:  # a pytest TracebackEntry
    return Path(entry.path).resolve().is_relative_to(_PACKAGE_DIR)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    excinfo = call.excinfo
    if (
        excinfo is None
        or not report.failed
        or call.when != "call"
        or not item.config.stash.get(_active_key, False)
        or item.config.getoption("tbstyle") not in ("auto", "short")
        or item.config.getoption("fulltrace")
    ):
        return report
    from .errors import ContractError

    if isinstance(excinfo.value, ContractError):
        traceback = excinfo.traceback.cut(path=item.path).filter(excinfo)
        excinfo.traceback = traceback.filter(lambda entry: not _inside_typedflops(entry))
        report.longrepr = excinfo.getrepr(style="short", chain=False, funcargs=False)
    return report


# -- the report -------------------------------------------------------------------------


class _Entry:
    """What the tally knows of one function: its calls and costs, per binding of its dims."""

    __slots__ = ("calls", "costs", "function", "name", "pending")

    def __init__(self, function: TypedFunction[..., Any]) -> None:
        self.function = function
        self.name = function.name
        self.calls: dict[Binding, int] = {}
        self.costs: dict[Binding, Cost | None] = {}  # None: it could not be estimated
        # Bindings not costed yet, with the function object called and the object a method
        # was called on (a module's own sizes and weights are part of its cost): held
        # until the test ends, no longer.
        self.pending: dict[Binding, tuple[TypedFunction[..., Any], tuple[Any, ...]]] = {}


class CallTally:
    """Counts the checked calls of every ``@typed_flops`` function and the dims they bound.

    Cheap per call (a dict update). Each distinct binding of a function's dims is costed
    once, by a dry run, when the test that made it ends (:meth:`settle`). Calls on
    ``meta`` tensors (dry runs, ``estimate``) are not counted. It observes calls through
    ``typedflops.decorator.add_call_observer``: every call whose arguments and return passed.
    """

    def __init__(self) -> None:
        # One entry per function definition: a function decorated anew in each test (or
        # each iteration of a loop) is one row.
        self.entries: dict[tuple[str, str, int], _Entry] = {}
        self._remove: Callable[[], None] | None = None

    def start(self) -> None:
        """Begin observing calls."""
        from .decorator import add_call_observer

        self._remove = add_call_observer(self.observe)

    def stop(self) -> None:
        """Stop observing calls (what was counted stays)."""
        if self._remove is not None:
            self._remove()
            self._remove = None

    def observe(
        self, function: TypedFunction[..., Any], args: tuple[Any, ...], state: CallState
    ) -> None:
        """Count one call whose arguments passed the check, with the dims they bound."""
        device = state.device
        if device is not None and device.type == "meta":
            return
        key = (function.__module__, function.name, _first_line(function))
        entry = self.entries.get(key)
        if entry is None:
            entry = self.entries[key] = _Entry(function)
        binding = tuple(state.sizes.items())
        count = entry.calls.get(binding, 0)
        entry.calls[binding] = count + 1
        if not count:
            bound = args[:1] if args and function.contract.takes_self else ()
            entry.pending[binding] = (function, bound)

    def settle(self) -> None:
        """Cost the bindings seen since the last call (one dry run each), then let go."""
        from .testing import _estimate

        observing = self._remove is not None
        self.stop()  # the dry runs call decorated functions themselves
        try:
            for entry in self.entries.values():
                for binding, (function, bound) in entry.pending.items():
                    try:
                        entry.costs[binding] = _estimate(function, bound, dict(binding))
                    except Exception:  # a body that cannot dry-run: "?" in the report, not 0
                        entry.costs[binding] = None
                entry.pending.clear()
        finally:
            if observing:
                self.start()

    def rows(self) -> list[list[str]]:
        """One row per function, sorted by name: name, calls, dims, cost."""
        from .text import format_count

        self.settle()
        entries = sorted(self.entries.values(), key=lambda entry: entry.name)
        names = [entry.name for entry in entries]
        qualified = [_qualified_name(entry) for entry in entries]
        rows = []
        for entry in entries:
            name = entry.name
            if names.count(name) > 1:  # same name, other modules (or other definitions)
                name = _qualified_name(entry)
                if qualified.count(name) > 1:
                    name += f":{_first_line(entry.function)}"
            costs = [entry.costs.get(binding) for binding in entry.calls]
            last = costs[-1]
            formula = "?" if last is None else str(last.formula)
            total = "?"
            if all(cost is not None for cost in costs):
                total = format_count(
                    sum(
                        count * cost.flops
                        for count, cost in zip(entry.calls.values(), costs, strict=True)
                        if cost is not None
                    )
                )
            dims = _shortened(_dims_seen(entry.calls), _MAX_DIMS_WIDTH)
            rows.append([name, str(sum(entry.calls.values())), dims, formula, total])
        return rows

    def table(self) -> list[str]:
        """The report as lines of text."""
        rows = self.rows()
        if not rows:
            return ["no @typed_flops function ran with checks on"]
        header = ["function", "calls", "dims seen", "formula", "FLOPs"]
        return text_table(header, rows, right={1, 4}).splitlines()


def _qualified_name(entry: _Entry) -> str:
    return f"{entry.function.__module__}.{entry.name}"


def _first_line(function: TypedFunction[..., Any]) -> int:
    code = getattr(function.__wrapped__, "__code__", None)
    return code.co_firstlineno if code is not None else 0


def _shortened(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, with ``...`` saying so.

    >>> _shortened("batch=8, d_in=4, d_out=3", 16)
    'batch=8, d_in...'
    """
    return text if len(text) <= width else text[: width - 3] + "..."


def _dims_seen(calls: Mapping[Binding, int]) -> str:
    from .scope import size_text  # here, not at import: the plugin must not import torch

    shown = [", ".join(f"{n}={size_text(s)}" for n, s in b) or "-" for b in calls]
    if len(shown) > _MAX_DIMS_SHOWN:
        more = len(shown) - _MAX_DIMS_SHOWN
        shown = [*shown[:_MAX_DIMS_SHOWN], f"+{more} more"]
    return "; ".join(shown)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    try:
        return (yield)
    finally:
        tally = item.config.stash.get(_tally_key, None)
        if tally is not None:
            tally.settle()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    tally = config.stash.get(_tally_key, None)
    if tally is None:
        return
    terminalreporter.write_sep("=", "typedflops report")
    for line in tally.table():
        terminalreporter.write_line(line)
