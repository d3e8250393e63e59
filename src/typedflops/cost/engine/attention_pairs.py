"""The query-key pairs an attention kernel computes, for one batch entry and one query head
(a kernel's products are each 2·P·(a head size), P these pairs).

- Without a causal mask every kernel computes every pair: ``s_q·s_k``.
- A CPU's flash kernel (``FlashAttentionKernel.cpp``, forward and backward alike) splits
  the queries into blocks of 256 (at 768 queries and more), 64 (192 to 767) or 32 (fewer),
  and the keys into blocks of 512 (each split at most the length). With ``is_causal`` the
  query block starting at ``m``, of ``q`` queries, computes the key blocks that start before
  ``num_keys = min(m + q, s_k)``, every one whole (the last capped at ``s_k``, not at
  ``num_keys``): ``min(ceil((m + q)/512)·512, s_k)`` keys. A query block never straddles a
  multiple of 512 (32, 64 and 256 divide it), so query ``i`` computes
  ``min((i // 512 + 1)·512, s_k)`` keys whatever the split. Nothing is skipped up to 512
  keys; at ``s_q = s_k = 2048``, 5/8 of the pairs. An ``attn_mask`` beside ``is_causal`` is
  added to the scores: it does not change which blocks run.
- A GPU's fused kernels (flash, memory-efficient, cuDNN) skip the key blocks past each query
  block's diagonal too, with block sizes that depend on the GPU, the head size and the
  dtype; they are counted over every pair, as FlopCounterMode and the papers' model FLOPs
  count them (an upper bound of what runs), but for FlashAttention-2's local window
  (:func:`window_pairs`).

Sizes may be formulas (sympy) while a formula is fitted: where the count branches on them
(the CPU kernel's blocks) these raise
:class:`~typedflops.errors.BranchOnSizes`: the op's counts are fitted instead, its row is
not exact, and the terms it sums into are exact only where the runs far off agree (on a
CPU, every pair up to 512 keys, so a model of at most 512 positions stays exact).
"""

from __future__ import annotations

from typing import Any

from ...errors import BranchOnSizes

__all__ = [
    "cpu_flash_pairs",
    "cpu_query_block",
    "window_pairs",
]


#: The CPU flash kernel's key block.
CPU_KEY_BLOCK = 512


def cpu_query_block(s_q: int) -> int:
    """The CPU flash kernel's query block at ``s_q`` queries (before capping at ``s_q``).

    >>> cpu_query_block(100), cpu_query_block(192), cpu_query_block(768)
    (32, 64, 256)
    """
    return 256 if s_q >= 768 else 64 if s_q >= 192 else 32


def _int(size: Any, what: str) -> int:
    """``size`` as an int, or :class:`BranchOnSizes` where it is a formula."""
    try:
        return int(size)
    except TypeError:
        raise BranchOnSizes(f"{what}: the pairs computed branch on {size}") from None


def cpu_flash_pairs(s_q: Any, s_k: Any, causal: bool) -> Any:
    """The pairs the CPU flash kernel computes for ``s_q`` queries and ``s_k`` keys.

    >>> cpu_flash_pairs(2048, 2048, True), 5 * 2048 * 2048 // 8
    (2621440, 2621440)
    >>> cpu_flash_pairs(512, 512, True), cpu_flash_pairs(600, 600, False)
    (262144, 360000)
    """
    if not causal:
        return s_q * s_k
    n_q = _int(s_q, "causal attention on a CPU")
    n_k = _int(s_k, "causal attention on a CPU")
    if n_q <= 0 or n_k <= 0:
        return 0
    block = min(cpu_query_block(n_q), n_q)
    keys = min(CPU_KEY_BLOCK, n_k)
    if keys == n_k:  # one key block: every pair
        return n_q * n_k
    if block == n_q:  # one query block: the key blocks up to its last query
        return n_q * min(-(-n_q // keys) * keys, n_k)
    # Full query blocks i = 1..full (ending at i·block) compute min(ceil(i/r)·512, s_k)
    # keys, r = 512/block query blocks to a key block (block divides 512 here).
    full, tail = divmod(n_q, block)
    per_key_block = keys // block
    capped_from = (-(-n_k // keys) - 1) * per_key_block  # blocks up to it read < s_k keys
    below = min(full, capped_from)
    pairs = block * (keys * _ceil_sum(below, per_key_block) + n_k * (full - below))
    if tail:  # the last, shorter block ends at s_q
        pairs += tail * min(-(-n_q // keys) * keys, n_k)
    return pairs


def _ceil_sum(n: int, r: int) -> int:
    """``sum(ceil(i / r) for i in 1..n)``."""
    whole, rest = divmod(n, r)
    return r * whole * (whole + 1) // 2 + rest * (whole + 1)


def window_pairs(s_q: int, s_k: int, left: int | None, right: int | None) -> int:
    """The pairs FlashAttention-2's local (sliding-window) mask keeps: query ``i`` sees keys
    ``i + s_k - s_q - left`` to ``i + s_k - s_q + right`` (bottom-right aligned), a side
    of None or negative unbounded; with ``is_causal`` the kernel takes ``right = 0``.

    >>> window_pairs(2048, 2048, 256, 0), 256 * 257 // 2 + 1792 * 257
    (493440, 493440)
    >>> window_pairs(4, 6, None, 0), window_pairs(3, 3, None, None)
    (18, 9)
    """
    shift = s_k - s_q
    unbounded = s_q + s_k  # (past every key from every query)
    ahead = unbounded if right is None or right < 0 else right
    behind = unbounded if left is None or left < 0 else left
    # query i's keys: from max(0, i + low) to min(s_k - 1, i + high), where that is not empty
    high, low = shift + ahead, shift - behind
    first, last = max(0, -high), min(s_q, s_k - low)  # the queries that see a key
    if last <= first:
        return 0
    return _sum_min(first, last, high, s_k - 1) - _sum_max(first, last, low, 0) + (last - first)


def _sum_min(first: int, last: int, offset: int, cap: int) -> int:
    """``sum(min(cap, i + offset) for i in range(first, last))``."""
    split = min(max(cap - offset, first), last)  # i + offset < cap below it
    return _sum_line(first, split, offset) + cap * (last - split)


def _sum_max(first: int, last: int, offset: int, floor: int) -> int:
    """``sum(max(floor, i + offset) for i in range(first, last))``."""
    split = min(max(floor - offset, first), last)  # i + offset <= floor below it
    return floor * (split - first) + _sum_line(split, last, offset)


def _sum_line(first: int, last: int, offset: int) -> int:
    """``sum(i + offset for i in range(first, last))``."""
    count = last - first
    return (first + last - 1) * count // 2 + offset * count
