"""A hook that fails never crashes mypy: the call, annotation or signature it was checking
is unknown to the plugin, and mypy goes on as it would without the plugin."""

from __future__ import annotations

from pathlib import Path

import mypy.api
import pytest
from mypy.errors import CompileError
from mypy_runs import PLUGIN, STRICT, write_torch_standin

from typedflops.mypy_plugin import einops_ops
from typedflops.mypy_plugin.guard import guarded

MODULE = """from einops import einsum
from jaxtyping import Float
from torch import Tensor


def linear(x: Float[Tensor, "b i"], w: Float[Tensor, "o i"]) -> Tensor:
    return einsum(x, w, "b i, i o -> b o")


def wrong(x: Tensor) -> int:
    return x
"""


def _fail(*args: object) -> object:
    raise RuntimeError("a hook that fails")


def test_a_failing_hook_gives_the_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TYPEDFLOPS_MYPY_DEBUG", raising=False)
    hook = guarded(_fail, lambda ctx: f"what mypy gives {ctx}")
    assert hook("a call") == "what mypy gives a call"


def test_the_debug_switch_lets_it_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TYPEDFLOPS_MYPY_DEBUG", "1")
    with pytest.raises(RuntimeError, match="a hook that fails"):
        guarded(_fail, lambda ctx: ctx)("a call")


def test_mypy_blocking_errors_go_through(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TYPEDFLOPS_MYPY_DEBUG", raising=False)

    def blocking(ctx: object) -> object:
        raise CompileError(["a blocking error"])

    with pytest.raises(CompileError):
        guarded(blocking, lambda ctx: ctx)("a call")


def test_mypy_runs_on_when_a_check_fails(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("TYPEDFLOPS_MYPY_DEBUG", raising=False)
    monkeypatch.setattr(einops_ops, "contract", _fail)  # every einsum check now fails
    (tmp_path / "check.py").write_text(MODULE)
    stubs = write_torch_standin(tmp_path / "stubs")
    config = tmp_path / "mypy.ini"
    config.write_text(STRICT + PLUGIN + f"mypy_path = {stubs}\n")
    command = ["--config-file", str(config), "--cache-dir", str(tmp_path / "cache")]
    out, err, status = mypy.api.run([*command, str(tmp_path / "check.py")])
    assert "INTERNAL ERROR" not in out + err
    assert status == 1
    lines = [line for line in out.splitlines() if ": error:" in line]
    # The einsum check failed, so nothing is said of the transposed weight; mypy's own
    # error is still there.
    assert len(lines) == 1 and "check.py:11: error: Incompatible return value" in lines[0]
