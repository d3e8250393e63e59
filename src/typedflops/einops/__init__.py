"""The wrapped einops ops (:mod:`.ops`) and the plans they run, parsed once per pattern
(:mod:`.plans`). Internal: ``typedflops.einsum``, ``reduce``, ``rearrange`` and ``repeat`` are
the public names.
"""
