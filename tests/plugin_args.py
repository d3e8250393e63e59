"""How pytester runs load the typedflops pytest plugin: from its entry point where the
checkout is installed, else with ``-p`` (both at once would register one module twice)."""

from __future__ import annotations

import importlib.metadata
import os


def autoloaded() -> bool:
    """Whether pytest will load the plugin from its entry point (an installed checkout)."""
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return False
    return any(
        ep.value == "typedflops.tools.pytest_plugin"
        for ep in importlib.metadata.entry_points(group="pytest11")
    )


PLUGIN_ARGS = [] if autoloaded() else ["-p", "typedflops.tools.pytest_plugin"]
