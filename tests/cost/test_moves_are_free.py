"""Ops that move values and compute none cost 0 FLOPs and are never listed as uncounted:
a rotation by quarter turns (``torch.rot90``: a flip and a transpose, and so its backward)
and the packing of a padded batch of sequences (``pack_padded_sequence``: the steps' values
gathered in order of the lengths)."""

from __future__ import annotations

import torch
from torch.nn.utils.rnn import pack_padded_sequence

from typedflops import record


def test_a_rotation_by_quarter_turns_is_free() -> None:
    x = torch.randn(2, 3, 4, 5, requires_grad=True)
    with record() as rec:
        (x.rot90(1, (2, 3)) * 2).sum().backward()
    # 120 multiplies and 120 adds of the sum forward, 120 multiplies of the gradient by 2
    # backward (the sum's backward and rot90's, a rotation back, are free)
    assert (rec.total.flops, rec.total.backward_flops, rec.total.uncounted) == (240, 120, ())


def test_packing_a_padded_batch_is_free() -> None:
    x = torch.randn(3, 5, 4, requires_grad=True)
    lengths = torch.tensor([5, 3, 2])
    with record() as rec:
        packed = pack_padded_sequence(x, lengths, batch_first=True)
        (packed.data * 2).sum().backward()
    # 5 + 3 + 2 = 10 steps of 4 values: 40 multiplies and 40 adds forward, 40 multiplies
    # backward (the gradient scattered back into the padded batch is free)
    assert (rec.total.flops, rec.total.backward_flops, rec.total.uncounted) == (80, 40, ())
