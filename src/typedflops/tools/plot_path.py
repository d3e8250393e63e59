"""``--plot FILE``, checked before any work: matplotlib installed, and able to write it.
Torch-free, so that the command checks it before importing torch."""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["check_plot_path"]


def check_plot_path(path: str) -> None:
    """Raise ``UsageError`` unless matplotlib is installed and can write ``path``."""
    from ..errors import UsageError

    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError(
            "--plot needs matplotlib, which is not installed: pip install 'typedflops[plot]'"
        )
    target = Path(path)
    if not target.parent.is_dir():
        raise UsageError(f"--plot {path}: the directory {str(target.parent)!r} does not exist")
    from matplotlib.figure import Figure

    formats = Figure().canvas.get_supported_filetypes()
    suffix = target.suffix.lstrip(".").lower()
    if suffix not in formats:
        raise UsageError(
            f"--plot {path}: matplotlib cannot write {suffix or 'a file without a suffix'!r}; "
            f"use one of {', '.join(sorted(formats))}"
        )
