"""The ops that cost 0 FLOPs whatever their inputs (creation, copies, movement, indexing) and
the rule :func:`.rules.find_rule` gives them, :data:`FREE`."""

from __future__ import annotations

from typing import Final

from .pointwise_rules import words

__all__ = ["FREE", "FREE_OPS", "Free"]

# Ops that cost 0 FLOPs whatever their inputs: creation, copies, movement, indexing.
FREE_OPS = words(
    """
    select_backward slice_backward diagonal_backward as_strided_backward expand_copy
    permute_copy view_copy transpose_copy unsqueeze_copy squeeze_copy t_copy empty empty_like
    empty_strided new_empty new_empty_strided zeros zeros_like ones ones_like full full_like
    new_zeros new_ones new_full scalar_tensor arange linspace logspace eye rand rand_like randn
    randn_like randint randint_like randperm bernoulli uniform normal tril triu clone copy
    _to_copy to contiguous _copy_from _copy_from_and_resize cat stack split split_with_sizes
    unsafe_split unsafe_split_with_sizes unsafe_chunk unbind chunk channel_shuffle
    native_channel_shuffle narrow_copy slice_scatter select_scatter diagonal_scatter
    as_strided_scatter index index_select gather masked_fill where masked_scatter masked_select
    take embedding flip roll repeat constant_pad_nd reflection_pad1d reflection_pad2d
    replication_pad1d replication_pad2d tril_indices triu_indices nonzero sort argsort topk
    msort kthvalue median nanmedian mode unique _unique2 one_hot fill zero detach alias
    lift_fresh lift_fresh_copy _local_scalar_dense item set_ resize_ record_stream
    native_dropout_backward_mask _assert_async _assert_tensor_metadata sym_constrain_range
    _fused_sdp_choice _has_compatible_shallow_copy_type is_same_size _pin_memory _make_dep_token
    bucketize searchsorted _unsafe_index index_fill masked_fill_ upsample_nearest1d
    upsample_nearest2d pixel_shuffle pixel_unshuffle im2col lu_unpack diag_embed _unsafe_view
    _nested_tensor_from_tensor_list to_padded_tensor _nested_from_padded _efficientzerotensor
    _has_same_storage_numel _nested_tensor_from_mask_left_aligned max_unpool2d max_unpool3d
    _sparse_coo_tensor_with_dims_and_tensors hann_window hamming_window blackman_window
    bartlett_window kaiser_window reflection_pad3d replication_pad3d upsample_nearest3d
    _upsample_nearest_exact1d _upsample_nearest_exact2d _upsample_nearest_exact3d _foreach_copy
    _foreach_zero _foreach_clone _foreach_copy_ _foreach_zero_ _to_dense to_dense _to_sparse
    _to_sparse_csr _to_sparse_csc _to_sparse_bsr _to_sparse_bsc sparse_mask rot90
    _pack_padded_sequence block_diag sparse_compressed_tensor _sparse_compressed_tensor_unsafe
    """
)


class Free:
    """The rule of an op that costs 0 FLOPs whatever its inputs: a view, a copy, creation,
    movement, indexing (:data:`FREE`, the one instance)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "FREE"


#: What :func:`find_rule` gives for an op that costs 0 FLOPs.
FREE: Final = Free()
