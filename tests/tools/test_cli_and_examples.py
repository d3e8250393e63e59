"""The console script and the examples run, at CPU sizes, and print what they promise.

The command line is run in subprocesses, as a user runs it: exit statuses, stderr lines and
the width of what it prints.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from typedflops.tools.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("ex*.py"))


def test_demo_prints_formulas_and_mfu(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "ShapeError: linear(): argument 'w' has shape (600, 10)" in out
    assert "2*batch*d_in*d_out" in out
    assert "2*batch*d_hidden*(d_in + d_out)" in out
    assert "MFU" in out


def test_demo_plot_writes_a_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "roofline.png"
    assert main(["demo", "--quick", "--plot", str(target)]) == 0
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_devices_lists_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert "H100 SXM5" in out and "989.4" in out and "MI300X" in out
    assert "this machine's device:" in out


def typedflops(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The console script in a fresh process, stdout and stderr not terminals."""
    return subprocess.run(
        [sys.executable, "-m", "typedflops", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def widest(text: str) -> int:
    return max(map(len, text.splitlines()), default=0)


def test_console_script_runs_and_fits_100_columns() -> None:
    result = typedflops("demo", "--quick")
    assert result.returncode == 0, result.stderr
    assert "TwoLayerMLP(D, D, K)" in result.stdout
    assert widest(result.stdout) <= 100
    assert result.stderr == ""  # no progress lines and no warnings when not on a terminal


def test_peaks_hold_still_across_runs() -> None:
    # Nothing is measured for a peak: two processes print the same figures (or the same
    # reason for having none).
    runs = [typedflops("devices") for _ in range(2)]
    peaks = [[line for line in run.stdout.splitlines() if "peaks:" in line] for run in runs]
    assert len(peaks[0]) == 1 and peaks[0] == peaks[1]


def test_version() -> None:
    result = typedflops("--version")
    assert result.returncode == 0
    assert re.fullmatch(r"typedflops \d+\.\d+\.\d+\S* \(torch \S+\)\n", result.stdout)


@pytest.mark.parametrize("args", [["--help"], ["demo", "--help"], ["devices", "--help"]])
def test_help_is_plain_text(args: list[str]) -> None:
    result = typedflops(*args)
    assert result.returncode == 0 and result.stderr == ""
    assert "``" not in result.stdout and widest(result.stdout) <= 100
    assert "usage: typedflops" in result.stdout


@pytest.mark.parametrize(
    ("device", "message"),
    [
        (
            "foo",
            "typedflops: error: --device 'foo' is not a device torch knows; use cpu, cuda or mps",
        ),
        ("cuda", "typedflops: error: --device cuda: CUDA is not available (torch "),
        ("mps", "typedflops: error: --device mps: MPS is not available (it needs an Apple-silicon"),
        ("meta", "typedflops: error: --device meta: the demo runs on cpu, cuda or mps, not meta"),
    ],
)
def test_a_device_that_is_not_there_is_one_line_and_status_2(device: str, message: str) -> None:
    if device in ("cuda", "mps") and _available(device):
        return  # a machine that has it: the demo would run
    result = typedflops("demo", "--device", device)
    assert result.returncode == 2
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith(message)


def _available(device: str) -> bool:
    import torch

    return bool(
        torch.cuda.is_available() if device == "cuda" else torch.backends.mps.is_available()
    )


def test_plot_without_matplotlib_fails_before_any_work(tmp_path: Path) -> None:
    # matplotlib made unimportable: the error comes before any model is built or timed
    script = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "import typedflops.timing.bench\n"
        "def refuse(*a, **k): raise AssertionError('timed before the check')\n"
        "typedflops.timing.bench.benchmark = refuse\n"
        "from typedflops.tools.cli import main\n"
        f"raise SystemExit(main(['demo', '--plot', {str(tmp_path / 'r.png')!r}]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "typedflops: error: --plot needs matplotlib, which is not installed: "
        "pip install 'typedflops[plot]'"
    ]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("missing/r.png", "the directory "),
        ("r.nope", "matplotlib cannot write 'nope'; use one of "),
    ],
)
def test_a_plot_path_that_cannot_be_written_is_refused_first(
    tmp_path: Path, name: str, message: str
) -> None:
    result = typedflops("demo", "--plot", str(tmp_path / name))
    assert result.returncode == 2 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("typedflops: error: --plot ") and message in line


def test_devices_fits_100_columns_and_wide_shows_the_sources() -> None:
    narrow, wide = typedflops("devices"), typedflops("devices", "--wide")
    assert narrow.returncode == wide.returncode == 0
    assert widest(narrow.stdout) <= 100 and widest(wide.stdout) <= 100
    table, _, this_machine = narrow.stdout.partition("this machine's device")
    assert this_machine, "the narrow listing names this machine's device"
    assert "GPU datasheet" not in table  # this machine's own line may cite one (on a GPU)
    assert "NVIDIA H100 Tensor Core GPU datasheet, SXM5" in wide.stdout
    assert "(--wide adds the source of each row" in narrow.stdout


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if "quick" in module.main.__code__.co_varnames:
        module.main(quick=True)
    else:
        module.main()
    assert capsys.readouterr().out.strip()


def test_there_is_one_example_per_topic() -> None:
    # The lecture's five topics, a transformer LM written with plain modules, and a step
    # planned and recorded across ranks.
    assert len(EXAMPLES) == 7


@pytest.mark.parametrize(
    "args",
    [["--help"], ["--version"], ["plan", "--help"], ["frob"], ["demo", "--bad"]],
)
def test_the_command_answers_without_importing_torch(args: list[str]) -> None:
    """Help, the version, an unknown command and a bad flag are answered by the parser,
    before torch (or jaxtyping) is imported."""
    script = (
        "import sys\n"
        "from typedflops.tools.cli import main\n"
        f"status = main({args!r})\n"
        "print('imported:', [m for m in ('torch', 'jaxtyping', 'sympy') if m in sys.modules])\n"
        "raise SystemExit(status)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert result.stdout.splitlines()[-1] == "imported: []"
    if args[0] in ("frob", "demo"):
        assert result.returncode == 2
        assert len(result.stderr.splitlines()) == 1
        assert result.stderr.startswith("typedflops: error: ")
    else:
        assert result.returncode == 0 and result.stderr == ""


def test_every_flag_has_help_and_no_markup() -> None:
    from typedflops.tools.cli import _parser

    parser = _parser()
    commands = next(
        action for action in parser._actions if isinstance(action, argparse._SubParsersAction)
    )
    for name, command in commands.choices.items():
        for action in command._actions:
            assert action.help, f"{name} {action.option_strings}"
        text = command.format_help()
        assert "``" not in text and ":func:" not in text, name
        assert widest(text) <= 100, name


def test_the_parsers_names_are_the_packages() -> None:
    from typedflops.nn import CONFIGS
    from typedflops.planning.training import OPTIMIZER_STATES
    from typedflops.tools.cli import MODEL_NAMES, OPTIMIZER_NAMES

    assert list(MODEL_NAMES) == list(CONFIGS)
    assert sorted(name for name in OPTIMIZER_NAMES if name != "none") == sorted(
        name for name in OPTIMIZER_STATES if name
    )
