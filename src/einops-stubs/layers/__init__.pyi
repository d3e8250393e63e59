from typing import Any

class RearrangeMixin:
    pattern: str
    axes_lengths: dict[str, Any]
    def __init__(self, pattern: str, **axes_lengths: Any) -> None: ...

class ReduceMixin:
    pattern: str
    reduction: str
    axes_lengths: dict[str, Any]
    def __init__(self, pattern: str, reduction: str, **axes_lengths: Any) -> None: ...
