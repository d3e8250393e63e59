"""The pytest plugin, run on small projects with ``pytester``: options, compact errors, report.

Runs are in-process (fast); one run in a subprocess checks that the ``pytest11`` entry point
loads the plugin on its own.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
from plugin_args import PLUGIN_ARGS
from plugin_args import autoloaded as _autoloaded

# Imported here so that in-process runs find them loaded (pytester drops the modules a
# run imports when it ends; importing them again in each run would be slow).

pytest_plugins = ["pytester"]

DEMO_PKG = """
import torch
from jaxtyping import Float
from torch import Tensor

from typedflops import typed_flops


def linear(
    x: Float[Tensor, "batch d_in"], w: Float[Tensor, "d_in d_out"]
) -> Float[Tensor, "batch d_out"]:
    return x @ w


@typed_flops(flops="batch*d")
def relu(x: Float[Tensor, "batch d"]) -> Float[Tensor, "batch d"]:
    return x.clamp(min=0)


def block(x: Float[Tensor, "batch d"], w: Float[Tensor, "d d"]) -> Float[Tensor, "batch d"]:
    return relu(linear(x, w))


def helper(n: int) -> torch.Tensor:
    return torch.ones(n)
"""

TEST_CALLS = """
import torch
import demo_pkg


def test_calls():
    demo_pkg.block(torch.ones(8, 4), torch.ones(4, 4))
    demo_pkg.linear(torch.ones(2, 4), torch.ones(4, 3))
    demo_pkg.linear(torch.ones(2, 4), torch.ones(4, 3))
    demo_pkg.linear.estimate(batch=1000, d_in=10, d_out=10) if hasattr(
        demo_pkg.linear, "estimate") else None
"""

TEST_BAD_CALL = """
import torch
import demo_pkg


def test_bad_call():
    x = torch.ones(8, 784)
    w = torch.ones(600, 10)
    demo_pkg.linear(x, w)
"""

IS_CHECKED = """
import demo_pkg
from typedflops import TypedFunction


def test_is_checked():
    assert isinstance(demo_pkg.linear, TypedFunction)
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.mkpydir("demo_pkg").joinpath("__init__.py").write_text(DEMO_PKG)
    pytester.syspathinsert()
    return pytester


# Other plugins stay out of the inner runs (hypothesis' summary alone costs a second).
QUIET_ARGS = ["-p", "no:cacheprovider", "-p", "no:hypothesispytest"]


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest(*QUIET_ARGS, *PLUGIN_ARGS, *args)


def _section(result: pytest.RunResult, title: str) -> list[str]:
    lines = result.outlines
    start = next(i for i, line in enumerate(lines) if f" {title} " in line and line[0] in "=_")
    end = next((i for i in range(start + 1, len(lines)) if lines[i][:1] in "=_"), len(lines))
    return lines[start + 1 : end]


def test_entry_point_is_declared() -> None:
    # Installed with `pip install -e .`: pytest then loads the plugin without `-p`.
    assert _autoloaded() or os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD")


def test_help_lists_the_options(pytester: pytest.Pytester) -> None:
    result = run(pytester, "--help")
    result.stdout.fnmatch_lines(
        [
            "typedflops: shape contracts and FLOP counts:",
            "  --typedflops=PKG[,PKG...]",
            "  --typedflops-report*",
        ]
    )


def test_without_options_nothing_changes(project: pytest.Pytester) -> None:
    project.makepyfile(test_bad=TEST_BAD_CALL)
    result = run(project)
    result.assert_outcomes(failed=1)
    output = result.stdout.str()
    assert "RuntimeError: mat1 and mat2 shapes cannot be multiplied" in output
    assert "typedflops report" not in output


def test_option_checks_the_package(project: pytest.Pytester) -> None:
    project.makepyfile(test_checked=IS_CHECKED)
    run(project, "--typedflops=demo_pkg").assert_outcomes(passed=1)
    run(project).assert_outcomes(failed=1)


@pytest.mark.parametrize(
    "args",
    [
        ["--typedflops=demo_pkg,other_pkg"],
        ["--typedflops", "other_pkg", "--typedflops", "demo_pkg"],
    ],
)
def test_several_packages(project: pytest.Pytester, args: list[str]) -> None:
    project.mkpydir("other_pkg").joinpath("__init__.py").write_text(
        "from jaxtyping import Float\nfrom torch import Tensor\n\n"
        "def f(x: Float[Tensor, ' n']) -> Float[Tensor, ' n']:\n    return x\n"
    )
    project.makepyfile(
        test_both=IS_CHECKED
        + (
            "\n\ndef test_other():\n    import other_pkg\n"
            "    assert isinstance(other_pkg.f, TypedFunction)\n"
        )
    )
    run(project, *args).assert_outcomes(passed=2)


def test_conftest_imports_get_the_checked_package(project: pytest.Pytester) -> None:
    """The hook is installed before conftest files are imported."""
    project.makeconftest("import demo_pkg\n\nLINEAR = demo_pkg.linear\n")
    project.makepyfile(
        test_conftest=(
            "from conftest import LINEAR\n"
            "from typedflops import TypedFunction\n\n"
            "def test_it():\n    assert isinstance(LINEAR, TypedFunction)\n"
        )
    )
    run(project, "--typedflops=demo_pkg").assert_outcomes(passed=1)


def test_assertion_rewriting_still_applies_to_tests_inside_the_package(
    project: pytest.Pytester,
) -> None:
    project.path.joinpath("demo_pkg", "test_inside.py").write_text(
        "def test_inside():\n    value = 1\n    assert value == 2\n"
    )
    result = run(project, "--typedflops=demo_pkg", "demo_pkg/test_inside.py")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["E       assert 1 == 2"])


def test_contract_error_is_reported_compactly(project: pytest.Pytester) -> None:
    project.makepyfile(test_bad=TEST_BAD_CALL)
    result = run(project, "--typedflops=demo_pkg")
    result.assert_outcomes(failed=1)
    assert _section(result, "test_bad_call") == [
        "test_bad.py:8: in test_bad_call",
        "    demo_pkg.linear(x, w)",
        "E   typedflops.errors.ShapeError: linear(): argument 'w' has shape (600, 10) but its "
        'annotation "d_in d_out" needs d_in=784',
        "E     d_in=784 was bound by argument 'x' (shape (8, 784), axis 1)",
        "E     bound so far: batch=8, d_in=784",
    ]
    result.stdout.fnmatch_lines(
        ["FAILED test_bad.py::test_bad_call - typedflops.errors.ShapeError: linear(): *"]
    )


def test_compact_report_shows_the_call_inside_the_package(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_deep=(
            "import torch\nimport demo_pkg\n\n\ndef test_deep():\n"
            "    demo_pkg.block(torch.ones(2, 3), torch.ones(4, 4))\n"
        )
    )
    result = run(project, "--typedflops=demo_pkg")
    section = _section(result, "test_deep")
    assert section[:4] == [
        "test_deep.py:6: in test_deep",
        "    demo_pkg.block(torch.ones(2, 3), torch.ones(4, 4))",
        "E   typedflops.errors.ShapeError: block(): argument 'w' has shape (4, 4) but its "
        'annotation "d d" needs d=3',
        "E     d=3 was bound by argument 'x' (shape (2, 3), axis 1)",
    ]
    assert not any("contract/function.py" in line for line in section)


NESTED_MODULES = """
import torch
from jaxtyping import Float
from torch import Tensor


class Inner(torch.nn.Module):
    def forward(self, x: Float[Tensor, "b 4"]) -> Float[Tensor, "b 4"]:
        return x


class Outer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = Inner()

    def forward(self, x: Float[Tensor, "b d"]) -> Float[Tensor, "b d"]:
        return self.inner(x)
"""


def test_nested_module_error_skips_torch_module_frames(pytester: pytest.Pytester) -> None:
    pytester.mkpydir("nested_pkg").joinpath("__init__.py").write_text(NESTED_MODULES)
    pytester.syspathinsert()
    pytester.makepyfile(
        test_nested=(
            "import torch\nimport nested_pkg\n\n\ndef test_nested():\n"
            "    model = nested_pkg.Outer()\n"
            "    model(torch.ones(2, 5))\n"
        )
    )
    result = run(pytester, "--typedflops=nested_pkg")
    result.assert_outcomes(failed=1)
    section = _section(result, "test_nested")
    assert len(section) <= 12
    assert [line for line in section if line.strip(" ^")] == [  # (3.11+ marks columns)
        "test_nested.py:7: in test_nested",
        "    model(torch.ones(2, 5))",
        "nested_pkg/__init__.py:18: in forward",
        "    return self.inner(x)",
        "E   typedflops.errors.ShapeError: Inner.forward(): argument 'x' has shape (2, 5) but "
        'its annotation "b 4" needs size 4 at axis 1',
        "E     bound so far: b=2",
    ]
    long = run(pytester, "--typedflops=nested_pkg", "--tb=long").stdout.str()
    assert "_call_impl" in long  # --tb=long brings torch's frames back
    assert "contract/function.py" in long


def test_an_inherited_unittest_method_is_reported_from_its_own_line(
    project: pytest.Pytester,
) -> None:
    # linear_operator's test classes inherit their test methods from a mixin in the package
    cases = project.path / "demo_pkg" / "cases.py"
    cases.write_text(
        "import torch\nimport demo_pkg\n\n\nclass LinearCase:\n"
        "    def test_linear(self):\n"
        "        demo_pkg.linear(torch.ones(2, 3), torch.ones(4, 5))\n"
    )
    project.makepyfile(
        test_case=(
            "import unittest\nfrom demo_pkg.cases import LinearCase\n\n\n"
            "class TestLinear(LinearCase, unittest.TestCase):\n    pass\n"
        )
    )
    result = run(project, "--typedflops=demo_pkg")
    result.assert_outcomes(failed=1)
    assert _section(result, "TestLinear.test_linear")[:2] == [  # (no unittest frames)
        "demo_pkg/cases.py:7: in test_linear",
        "    demo_pkg.linear(torch.ones(2, 3), torch.ones(4, 5))",
    ]


def test_long_tracebacks_on_request(project: pytest.Pytester) -> None:
    project.makepyfile(test_bad=TEST_BAD_CALL)
    result = run(project, "--typedflops=demo_pkg", "--tb=long")
    assert "contract/function.py" in result.stdout.str()  # the frames inside typedflops are back
    assert "    def test_bad_call():" in result.outlines


def test_other_failures_are_untouched(project: pytest.Pytester) -> None:
    project.makepyfile(test_other="def test_other():\n    x = 1\n    assert x == 2\n")
    result = run(project, "--typedflops=demo_pkg")
    result.stdout.fnmatch_lines(["    def test_other():", "E       assert 1 == 2"])


def test_report_lists_every_function_that_ran(project: pytest.Pytester) -> None:
    project.makepyfile(test_calls=TEST_CALLS)
    result = run(project, "--typedflops=demo_pkg", "--typedflops-report")
    result.assert_outcomes(passed=1)
    # block = linear (2*batch*d*d) + relu (batch*d); estimate() calls are not counted.
    assert _section(result, "typedflops report") == [
        "function  calls  dims                      formula             FLOPs/call  FLOPs",
        "--------  -----  ------------------------  ------------------  ----------  -----",
        "block         1  batch=8, d=4              batch*d*(2*d + 1)          288    288",
        "linear        1  batch=8, d_in=4, d_out=4  2*batch*d_in*d_out         256    256",
        "              2  batch=2, d_in=4, d_out=3  2*batch*d_in*d_out          48     96",
        "relu          1  batch=8, d=4              batch*d                     32     32",
    ]


def test_report_without_the_hook_counts_hand_decorated_functions(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_relu=(
            "import torch\nimport demo_pkg\n\n\ndef test_relu():\n"
            "    for n in (1, 2, 3, 4, 5):\n        demo_pkg.relu(torch.ones(n, 2))\n"
        )
    )
    result = run(project, "--typedflops-report")
    assert _section(result, "typedflops report") == [
        "function  calls  dims          formula  FLOPs/call  FLOPs",
        "--------  -----  ------------  -------  ----------  -----",
        "relu          1  batch=1, d=2  batch*d           2      2",
        "              1  batch=2, d=2  batch*d           4      4",
        "              1  batch=3, d=2  batch*d           6      6",
        "              1  batch=4, d=2  batch*d           8      8",
        "              1  batch=5, d=2  batch*d          10     10",
    ]


def test_report_with_nothing_run(project: pytest.Pytester) -> None:
    project.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    result = run(project, "--typedflops-report")
    assert _section(result, "typedflops report") == ["no @typed_flops function ran with checks on"]


def test_report_of_a_module_forward(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_module=(
            "import torch\nfrom typedflops.nn import Linear\n\n\ndef test_module():\n"
            "    Linear(4, 3)(torch.ones(2, 4))\n"
        )
    )
    result = run(pytester, "--typedflops-report")
    assert _section(result, "typedflops report")[2] == (
        "Linear.forward      1  d_in=4, d_out=3, batch=(2,)  2*batch*d_in*d_out          48     48"
    )


def test_entry_point_loads_the_plugin_in_a_fresh_process(project: pytest.Pytester) -> None:
    project.makepyfile(test_bad=TEST_BAD_CALL)
    result = project.runpytest_subprocess(
        *QUIET_ARGS, *PLUGIN_ARGS, "--typedflops=demo_pkg", "--typedflops-report"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E   typedflops.errors.ShapeError: linear(): argument 'w' has shape (600, 10)*",
            "*= typedflops report =*",
            "no @typed_flops function ran with checks on",
        ]
    )


def test_plugin_module_does_not_import_torch(pytester: pytest.Pytester) -> None:
    script = textwrap.dedent("""
        import sys
        import typedflops.tools.pytest_plugin
        assert "torch" not in sys.modules, "torch imported"
        print("ok")
    """)
    result = pytester.run(sys_executable(), "-c", script)
    assert result.ret == 0, result.stderr.str()
    assert result.outlines == ["ok"]


def sys_executable() -> str:
    import sys

    return sys.executable


def _docs_project(pytester: pytest.Pytester) -> None:
    """The example project of the "In your tests" page, written out as it shows it."""
    from doc_blocks import DOCS, files

    shown = files(DOCS / "testing.md")
    assert sorted(shown) == ["mypkg/model.py", "pyproject.toml", "tests/test_model.py"]
    pytester.mkpydir("mypkg")
    for path, text in shown.items():
        target = pytester.path / path
        target.parent.mkdir(exist_ok=True)
        target.write_text(text)


def test_the_docs_example_project_runs_with_plain_pytest(pytester: pytest.Pytester) -> None:
    """The "In your tests" page followed literally: its files, its configuration, and
    ``pytest --typedflops=mypkg --typedflops-report`` as a command (not ``python -m``)."""
    from doc_blocks import DOCS, after

    _docs_project(pytester)
    shown = after("Run them with the package checked", DOCS / "testing.md")
    command = shown.text.split()
    assert command == ["pytest", "--typedflops=mypkg", "--typedflops-report"]
    executable = Path(sys_executable()).with_name("pytest")
    result = pytester.run(executable, *command[1:], *QUIET_ARGS, *PLUGIN_ARGS)
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=4)
    assert shown.output is not None
    assert _section(result, "typedflops report") == shown.output.splitlines()[1:]


def test_the_docs_failure_report_is_what_a_failing_test_prints(pytester: pytest.Pytester) -> None:
    from doc_blocks import DOCS, after

    _docs_project(pytester)
    report = after("reported as:", DOCS / "testing.md").text.splitlines()
    where, call = report[0], report[1].strip()
    path, line = where.split(":")[0], int(where.split(":")[1])
    test = pytester.path / path
    lines = test.read_text().splitlines()
    assert len(lines) < line - 2  # the failing test goes after the page's own tests
    padding = [""] * (line - 2 - len(lines))
    body = ["def test_a_bad_call():", f"    {call}"]
    test.write_text("\n".join([*lines, *padding, *body]) + "\n")
    executable = Path(sys_executable()).with_name("pytest")
    result = pytester.run(executable, "--typedflops=mypkg", *QUIET_ARGS, *PLUGIN_ARGS)
    result.assert_outcomes(passed=4, failed=1)
    assert _section(result, "test_a_bad_call") == report
