"""The plugin's own settings, read from the mypy configuration file.

``typed_module_calls`` (default false): type ``module(x)`` by the module's ``forward``, its
parameters and return type, instead of ``nn.Module.__call__``'s ``(*args, **kwargs) -> Any``.
Dims then travel through module calls, and mypy checks their arguments as it checks any
call: an opt-in, since that reports ordinary mypy errors plain mypy does not (an Optional
passed where ``forward`` takes a Tensor, ``**kwargs`` spread into ``forward``). In
``pyproject.toml``::

    [tool.typedflops-mypy]
    typed_module_calls = true

or in ``mypy.ini``/``setup.cfg``, a ``[typedflops-mypy]`` section.
"""

from __future__ import annotations

import configparser
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SECTION = "typedflops-mypy"

__all__ = ["SECTION", "Settings", "read_settings"]


@dataclass(frozen=True)
class Settings:
    """What the user asked of the plugin."""

    typed_module_calls: bool = False


def _toml(path: Path) -> dict[str, Any]:
    try:
        import tomllib
    except ImportError:  # Python 3.10: no TOML reader in the standard library
        return {}
    table = tomllib.loads(path.read_text()).get("tool", {}).get(SECTION, {})
    return table if isinstance(table, dict) else {}


def read_settings(config_file: str | None) -> Settings:
    """The settings in mypy's configuration file (defaults when there is none).

    >>> read_settings(None)
    Settings(typed_module_calls=False)
    """
    if not config_file or not Path(config_file).is_file():
        return Settings()
    path = Path(config_file)
    if path.suffix == ".toml":
        value = _toml(path).get("typed_module_calls", False)
        if not isinstance(value, bool):
            raise ValueError(f"[tool.{SECTION}] typed_module_calls must be true or false")
        return Settings(typed_module_calls=value)
    parser = configparser.ConfigParser()
    parser.read(path)
    return Settings(
        typed_module_calls=parser.getboolean(SECTION, "typed_module_calls", fallback=False)
    )
