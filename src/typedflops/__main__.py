"""``python -m typedflops demo``: the same as the ``typedflops`` command."""

from .tools.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
