"""The fixtures are mypy input, not tests: pytest must not import them (some fail on purpose)."""

collect_ignore_glob = ["fixtures/*"]
