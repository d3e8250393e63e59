"""``python -m typedflops demo``: the same as the ``typedflops`` command."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
