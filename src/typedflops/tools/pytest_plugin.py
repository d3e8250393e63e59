"""The typedflops pytest plugin (entry point ``pytest11``; does nothing unless asked).

``pytest --typedflops=mypkg,other``
    installs :func:`typedflops.tools.import_hook.install_import_hook` for the named packages
    before conftest files and tests are imported, so every annotated function in them is
    checked during the run (``--typedflops-only-tensors``: only those with a jaxtyping array
    annotation). The option can be repeated. Hints that could not be checked are listed
    once at the end, with each function's file:line.
``pytest --typedflops-report``
    prints, at the end of the session, one row per ``@typed_flops`` function with an array
    annotation that ran (with checks on), per set of dims it was called with (``...``
    included): calls, the dims, its FLOP formula, FLOPs per call and over those calls (a
    caller's FLOPs include its nested decorated calls); uncounted ops by name. Where no
    dry run can cost a call (its body reads tensor values), the row gives the FLOPs of
    calls counted as they ran ("as run"), and a line under the table the bytes and why
    there is no formula. Under pytest-xdist (``-n 2``) each worker sends its rows to the
    controller, which prints one report.

With either option a test that fails with a :class:`~typedflops.errors.ContractError`
is reported compactly: the test's line, the line that made the bad call, and the error's
own message (its reason and the bindings), without the frames inside typedflops and
torch (``Module.__call__`` between a model and the module it calls). Pass
``--tb=long`` or ``--full-trace`` to see the full traceback.

Importing this module imports neither torch nor the rest of typedflops: a pytest run that
does not use the options pays nothing.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .call_report import CallTally
    from .import_hook import ImportHook

__all__ = [
    "pytest_addoption",
    "pytest_configure",
    "pytest_load_initial_conftests",
    "pytest_runtest_makereport",
    "pytest_runtest_teardown",
    "pytest_sessionfinish",
    "pytest_terminal_summary",
    "pytest_testnodedown",
    "pytest_unconfigure",
]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("typedflops", "typedflops: shape contracts and FLOP counts")
    group.addoption(
        "--typedflops",
        action="append",
        default=[],
        metavar="PKG[,PKG...]",
        help="check every annotated function of these packages with @typed_flops "
        "(an import hook installed before tests are imported; repeatable)",
    )
    group.addoption(
        "--typedflops-only-tensors",
        action="store_true",
        default=False,
        help="with --typedflops, check only the functions with a jaxtyping array annotation "
        "(by default every annotated function is checked, plain hints with beartype's "
        "semantics)",
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
_unwatch_key: pytest.StashKey[Callable[[], None]] = pytest.StashKey()
# What pytest-xdist workers sent the controller: their records and notes.
_sent_key: pytest.StashKey[list[dict[str, Any]]] = pytest.StashKey()


def _install_hook(config: pytest.Config, values: Sequence[str], only_tensors: bool) -> None:
    packages = packages_from_option(values)
    if packages and _hook_key not in config.stash:
        from ..contract.unchecked import take_notes
        from .import_hook import install_import_hook

        functions = "tensors" if only_tensors else "all"
        config.stash[_hook_key] = install_import_hook(*packages, functions=functions)
        take_notes()  # (what an earlier run in this process noted is not this run's)


def _start_tally(config: pytest.Config) -> None:
    """The report's tally, observing calls; it watches every function the hook decorates
    from its first call (see :mod:`.as_run`)."""
    if _tally_key in config.stash:
        return
    from .call_report import CallTally
    from .import_hook import on_decorated

    tally = CallTally()
    tally.start()
    config.stash[_tally_key] = tally
    config.stash[_unwatch_key] = on_decorated(tally.watch)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    # Before conftest files are imported: a conftest that imports the package must
    # already get the checked version (and the report sees its functions decorated).
    known = early_config.known_args_namespace
    if getattr(known, "typedflops_report", False):
        _start_tally(early_config)
    _install_hook(
        early_config,
        getattr(known, "typedflops", []),
        getattr(known, "typedflops_only_tensors", False),
    )


def pytest_configure(config: pytest.Config) -> None:
    values: list[str] = config.getoption("typedflops")
    report: bool = config.getoption("typedflops_report")
    config.stash[_active_key] = bool(packages_from_option(values)) or report
    # (when the plugin was registered after that hook ran)
    if report:
        _start_tally(config)
    _install_hook(config, values, config.getoption("typedflops_only_tensors"))


def pytest_unconfigure(config: pytest.Config) -> None:
    hook = config.stash.get(_hook_key, None)
    if hook is not None:
        hook.uninstall()
        del config.stash[_hook_key]
    unwatch = config.stash.get(_unwatch_key, None)
    if unwatch is not None:
        unwatch()
        del config.stash[_unwatch_key]
    tally = config.stash.get(_tally_key, None)
    if tally is not None:
        tally.stop()
        del config.stash[_tally_key]


# -- compact contract errors ------------------------------------------------------------


def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> pytest.TestReport | None:
    # In place of pytest's own report (run after unittest's, which puts a TestCase's
    # exception in the call): a ContractError is shown compactly (see .compact_errors).
    excinfo = call.excinfo
    if (
        excinfo is None
        or call.when != "call"
        or not item.config.stash.get(_active_key, False)
        or item.config.getoption("tbstyle") not in ("auto", "short")
        or item.config.getoption("fulltrace")
    ):
        return None
    from ..errors import ContractError

    if not isinstance(excinfo.value, ContractError):
        return None
    from .compact_errors import compact_report

    return compact_report(item, call)


# -- the report -------------------------------------------------------------------------


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    try:
        return (yield)
    finally:
        tally = item.config.stash.get(_tally_key, None)
        if tally is not None:
            tally.settle()


def _is_worker(config: pytest.Config) -> bool:
    """Whether this process is a pytest-xdist worker (its controller prints the summary)."""
    return hasattr(config, "workerinput")


def _unchecked() -> list[str]:
    import sys

    if "typedflops.contract.unchecked" not in sys.modules:
        return []  # nothing was decorated, so nothing was left unchecked
    from ..contract.unchecked import notes

    return notes()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if not _is_worker(config) or not config.stash.get(_active_key, False):
        return
    # A pytest-xdist worker hands what it counted to the controller (plain data).
    tally = config.stash.get(_tally_key, None)
    output: dict[str, Any] = typing.cast(Any, config).workeroutput
    output["typedflops"] = {
        "records": tally.records() if tally is not None else [],
        "unchecked": _unchecked(),
    }


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist's hook on the controller: a worker finished; keep what it sent."""
    sent = getattr(node, "workeroutput", {}).get("typedflops")
    if sent is not None:
        node.config.stash.setdefault(_sent_key, []).append(sent)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if not config.stash.get(_active_key, False):
        return
    from .call_report import merge, table

    sent = config.stash.get(_sent_key, [])
    unchecked = list(dict.fromkeys([*_unchecked(), *(n for s in sent for n in s["unchecked"])]))
    tally = config.stash.get(_tally_key, None)
    if tally is not None:
        records = merge([tally.records(), *(s["records"] for s in sent)])
        terminalreporter.write_sep("=", "typedflops report")
        for line in table(records):
            terminalreporter.write_line(line)
    if unchecked:
        count = len(unchecked)
        terminalreporter.write_sep(
            "-", f"typedflops: {count} hint{'s' if count != 1 else ''} not checked"
        )
        for line in unchecked:
            terminalreporter.write_line(line)
