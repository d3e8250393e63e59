"""The ``typed_module_calls`` setting: off, a module call keeps mypy's own ``Any`` typing
(the plugin still checks its dims); on, it is typed by ``forward``."""

from __future__ import annotations

from pathlib import Path

import pytest
from mypy_runs import PLUGIN, STRICT, run_mypy, write_torch_standin

PROJECT = """from jaxtyping import Float
from torch import Tensor, nn


class Layer(nn.Module):
    def forward(self, x: Float[Tensor, "b d"]) -> Float[Tensor, "b d"]:
        return x


class Model(nn.Module):
    def __init__(self) -> None:
        self.layer = Layer()

    def run(self, x: Float[Tensor, "b d"], maybe: Tensor | None) -> Float[Tensor, "b d"]:
        self.layer(maybe)
        return self.layer(x)

    def rank(self, x: Float[Tensor, "d"]) -> None:
        self.layer(x)
"""
# line -> error codes, without and with the setting
DEFAULT = {16: ["no-any-return"], 19: ["shape"]}
TYPED = {15: ["arg-type"], 19: ["shape"]}


def _codes(tmp_path: Path, config_name: str, config: str) -> dict[int, list[str]]:
    write_torch_standin(tmp_path / "stubs")
    (tmp_path / "model.py").write_text(PROJECT)
    config_file = tmp_path / config_name
    config_file.write_text(config.replace("STUBS", str(tmp_path / "stubs")))
    run = run_mypy(
        [tmp_path / "model.py"],
        cache_dir=tmp_path / "cache",
        config="",
        cwd=tmp_path,
        config_file=config_file,
    )
    codes: dict[int, list[str]] = {}
    for found in run.diagnostics:
        codes.setdefault(found.line, []).append(found.code)
    return codes


INI = STRICT + PLUGIN + "mypy_path = STUBS\n"
TOML = """[tool.mypy]
strict = true
plugins = ["typedflops.mypy_plugin"]
mypy_path = "STUBS"
"""


@pytest.mark.parametrize(
    ("config_name", "config", "expected"),
    [
        ("mypy.ini", INI, DEFAULT),
        ("mypy.ini", INI + "\n[typedflops-mypy]\ntyped_module_calls = true\n", TYPED),
        ("pyproject.toml", TOML, DEFAULT),
        ("pyproject.toml", TOML + "\n[tool.typedflops-mypy]\ntyped_module_calls = true\n", TYPED),
    ],
)
def test_module_calls(
    tmp_path: Path, config_name: str, config: str, expected: dict[int, list[str]]
) -> None:
    assert _codes(tmp_path, config_name, config) == expected
