"""The corpus is mypy input, not tests: pytest must not import it (some files fail on purpose).

This file sits in corpus/, which the project's mypy run excludes, so it does not clash
with tests/conftest.py as a second top-level module named ``conftest``.
"""

collect_ignore_glob = ["*.py"]
