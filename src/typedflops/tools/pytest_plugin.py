"""The typedflops pytest plugin (entry point ``pytest11``; does nothing unless asked).

``pytest --typedflops=mypkg,other``
    installs :func:`typedflops.tools.import_hook.install_import_hook` for the named packages
    before conftest files and tests are imported, so every jaxtyping-annotated function in
    them is checked during the run. The option can be repeated.
``pytest --typedflops-report``
    prints, at the end of the session, one row per ``@typed_flops`` function that ran
    (with checks on), per set of dims it was called with (``...`` included): calls, the
    dims, its FLOP formula, FLOPs per call and over those calls (a caller's FLOPs include
    its nested decorated calls); uncounted ops by name, and why a "?" could not be costed.

With either option a test that fails with a :class:`~typedflops.errors.ContractError`
is reported compactly: the test's line, the line that made the bad call, and the error's
own message (its reason and the bindings), without the frames inside typedflops and
torch (``Module.__call__`` between a model and the module it calls). Pass
``--tb=long`` or ``--full-trace`` to see the full traceback.

Importing this module imports neither torch nor the rest of typedflops: a pytest run that
does not use the options pays nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..text import text_table

if TYPE_CHECKING:
    from ..contract.function import CheckedFunction
    from ..contract.scope import CallState
    from ..cost.engine.dryrun import Probe
    from ..cost.types import Cost
    from .import_hook import ImportHook

__all__ = [
    "pytest_addoption",
    "pytest_configure",
    "pytest_load_initial_conftests",
    "pytest_runtest_makereport",
    "pytest_runtest_teardown",
    "pytest_terminal_summary",
    "pytest_unconfigure",
]

_PACKAGE_DIR = Path(__file__).resolve().parents[1]
_MAX_DIMS_SHOWN = 5
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


def _hidden_directories() -> tuple[Path, ...]:
    """typedflops' own package, and torch's when it is loaded (``Module.__call__`` and the
    other frames between a model's code and the module it calls)."""
    import sys

    torch = sys.modules.get("torch")
    torch_file = getattr(torch, "__file__", None)
    if torch_file is None:
        return (_PACKAGE_DIR,)
    return (_PACKAGE_DIR, Path(torch_file).resolve().parent)


def _is_hidden(entry: Any, directories: tuple[Path, ...]) -> bool:  # a pytest TracebackEntry
    path = Path(entry.path).resolve()
    return any(path.is_relative_to(directory) for directory in directories)


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
    from ..errors import ContractError

    if isinstance(excinfo.value, ContractError):
        traceback = excinfo.traceback.cut(path=item.path).filter(excinfo)
        hidden = _hidden_directories()
        excinfo.traceback = traceback.filter(lambda entry: not _is_hidden(entry, hidden))
        report.longrepr = excinfo.getrepr(style="short", chain=False, funcargs=False)
    return report


# -- the report -------------------------------------------------------------------------


class _Entry:
    """What the tally knows of one function: its calls and costs, per binding of its dims."""

    __slots__ = ("calls", "costs", "function", "name", "pending")

    def __init__(self, function: CheckedFunction[..., Any]) -> None:
        self.function = function
        self.name = function.name
        self.calls: dict[Binding, int] = {}
        # A Cost, or why none could be had (shown after the table).
        self.costs: dict[Binding, Cost | str] = {}
        # Bindings not costed yet, with the probe that rebuilds the call (shapes, not
        # tensors; a module it was called on): held until the test ends, no longer.
        self.pending: dict[Binding, Probe] = {}


class CallTally:
    """Counts the checked calls of every ``@typed_flops`` function and the dims they bound.

    Cheap per call (a dict update). Each distinct binding of a function's dims (``...``
    included) is costed once, by dry runs, when the test that made it ends
    (:meth:`settle`). Calls made by dry runs are not counted. It observes calls through
    ``typedflops.contract.function.add_call_observer``: every call whose arguments and return
    passed.
    """

    def __init__(self) -> None:
        # One entry per function definition: a function decorated anew in each test (or
        # each iteration of a loop) is one row.
        self.entries: dict[tuple[str, str, int], _Entry] = {}
        self._remove: Callable[[], None] | None = None

    def start(self) -> None:
        """Begin observing calls."""
        from ..contract.function import add_call_observer

        self._remove = add_call_observer(self.observe)

    def stop(self) -> None:
        """Stop observing calls (what was counted stays)."""
        if self._remove is not None:
            self._remove()
            self._remove = None

    def observe(
        self,
        function: CheckedFunction[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        state: CallState,
    ) -> None:
        """Count one call whose arguments passed the check, with the dims they bound."""
        from ..cost.engine.probes import call_dims, call_probe

        key = (function.__module__, function.name, _first_line(function))
        entry = self.entries.get(key)
        if entry is None:
            entry = self.entries[key] = _Entry(function)
        dims = call_dims(function, args, kwargs, state.sizes)
        binding = tuple(dims.items())
        count = entry.calls.get(binding, 0)
        entry.calls[binding] = count + 1
        if not count:
            entry.pending[binding] = call_probe(function, args, kwargs, state.sizes)

    def settle(self) -> None:
        """Cost the bindings seen since the last call (dry runs), then let go."""
        from ..cost.engine.dryrun import measure

        observing = self._remove is not None
        self.stop()
        try:
            for entry in self.entries.values():
                for binding, probe in entry.pending.items():
                    try:
                        entry.costs[binding] = measure(probe)
                    except Exception as exc:  # a body that cannot dry-run: "?", and why
                        reason = str(exc).splitlines()[0] if str(exc) else ""
                        entry.costs[binding] = f"{type(exc).__name__}: {reason}"[:160]
                entry.pending.clear()
        finally:
            if observing:
                self.start()

    def rows(self) -> tuple[list[list[str]], list[str]]:
        """One row per function and binding (functions sorted by name): name, calls, dims,
        formula, FLOPs per call, FLOPs over the calls; and the notes under the table."""
        from ..text import format_count

        self.settle()
        entries = sorted(self.entries.values(), key=lambda entry: entry.name)
        names = [entry.name for entry in entries]
        qualified = [_qualified_name(entry) for entry in entries]
        rows: list[list[str]] = []
        notes: list[str] = []
        uncounted: list[str] = []
        inexact = False
        for entry in entries:
            name = entry.name
            if names.count(name) > 1:  # same name, other modules (or other definitions)
                name = _qualified_name(entry)
                if qualified.count(name) > 1:
                    name += f":{_first_line(entry.function)}"
            bindings = list(entry.calls)
            shown = bindings[:_MAX_DIMS_SHOWN]
            for index, binding in enumerate(shown):
                cost = entry.costs.get(binding, "not costed")
                calls = entry.calls[binding]
                label = name if index == 0 else ""
                dims = _shortened(_binding_text(binding), _MAX_DIMS_WIDTH)
                if isinstance(cost, str):
                    rows.append([label, str(calls), dims, "?", "?", "?"])
                    notes.append(f"? {entry.name}({_binding_text(binding)}): {cost}")
                    continue
                mark = "" if cost.exact else "~ "
                inexact |= not cost.exact
                uncounted.extend(cost.uncounted)
                rows.append(
                    [
                        label,
                        str(calls),
                        dims,
                        mark + str(cost.formula),
                        format_count(cost.flops),
                        format_count(calls * cost.flops),
                    ]
                )
            if len(bindings) > len(shown):
                more = bindings[len(shown) :]
                count = sum(entry.calls[b] for b in more)
                rows.append(["", str(count), f"+{len(more)} more dims", "", "", ""])
        if uncounted:
            ops = ", ".join(dict.fromkeys(uncounted))
            notes.append(f"uncounted ops (ran, no FLOP rule): {ops}")
        if inexact:
            notes.append("~ formula holds at these sizes only (not checked at other sizes)")
        return rows, notes

    def table(self) -> list[str]:
        """The report as lines of text."""
        rows, notes = self.rows()
        if not rows:
            return ["no @typed_flops function ran with checks on"]
        header = ["function", "calls", "dims", "formula", "FLOPs/call", "FLOPs"]
        return [*text_table(header, rows, right={1, 4, 5}).splitlines(), *notes]


def _qualified_name(entry: _Entry) -> str:
    return f"{entry.function.__module__}.{entry.name}"


def _first_line(function: CheckedFunction[..., Any]) -> int:
    code = getattr(function.__wrapped__, "__code__", None)
    return code.co_firstlineno if code is not None else 0


def _shortened(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, with ``...`` saying so.

    >>> _shortened("batch=8, d_in=4, d_out=3", 16)
    'batch=8, d_in...'
    """
    return text if len(text) <= width else text[: width - 3] + "..."


def _binding_text(binding: Binding) -> str:
    from ..contract.scope import size_text  # here, not at import: the plugin must not import torch

    return ", ".join(f"{n}={size_text(s)}" for n, s in binding) or "-"


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
