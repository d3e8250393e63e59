"""The contract: a jaxtyping annotation compiled once into checks that run before the body.

:mod:`.annotation` reads an annotation, :mod:`.checkers` and :mod:`.compiled` turn a
signature into one flat list of checks, :mod:`.scope` holds a call's bound dims and builds
its messages, and :mod:`.function` is the checked callable that ``@typed_flops`` returns.
Internal: the public names are those of :mod:`typedflops`.
"""
