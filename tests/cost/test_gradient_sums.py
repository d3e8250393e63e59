"""Where one tensor feeds several differentiated ops, autograd's engine sums its gradients
before it goes on: ``k - 1`` adds of the tensor's size for ``k`` edges (a residual stream,
a weight tied to an embedding and an output layer, one projection sliced three ways, ``x *
x``). A record around a real backward counts these adds as they run; ``estimate()`` and a
record's prediction count them too, so all three agree.

The oracles: the real backward inside ``record()`` (the engine's adds as they ran), and hand
counts (``x * x`` with ``x`` of B·D values: two products of the gradient, B·D each, and one
sum of B·D).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import Float, Int
from nanogpt import GPT, GPTConfig
from torch import Tensor, nn

from typedflops import OpCost, Term, estimate, record, typed_flops
from typedflops.cost.engine.counter import counting
from typedflops.cost.engine.events import Event
from typedflops.nn import TransformerConfig, TransformerLM

B, D, V = 4, 8, 11


class Residual(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.a = nn.Linear(d, d)
        self.b = nn.Linear(d, d)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.a(x)
        out: Tensor = x + self.b(x)
        return out


class Tied(nn.Module):
    def __init__(self, vocab: int, d: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids: Tensor) -> Tensor:
        out: Tensor = self.head(torch.tanh(self.embed(ids)))
        return out


class Sliced(nn.Module):
    """One projection read three times through slices (three edges to it) or once through
    ``chunk`` (one node, three outputs: nothing to sum)."""

    def __init__(self, d: int, chunk: bool) -> None:
        super().__init__()
        self.proj = nn.Linear(d, 3 * d)
        self.chunk = chunk
        self.d = d

    def forward(self, x: Tensor) -> Tensor:
        qkv: Tensor = self.proj(x)
        if self.chunk:
            q, k, v = qkv.chunk(3, dim=-1)
        else:
            d = self.d
            q, k, v = qkv[..., :d], qkv[..., d : 2 * d], qkv[..., 2 * d :]
        return q * k + v


class InPlace(nn.Module):
    """An in-place op gives ``h`` a new history: the later read is its first edge."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, x: Tensor) -> Tensor:
        h: Tensor = self.proj(x)
        h.mul_(2.0)
        return h * 3.0


def _ran(call: Callable[[], Tensor]) -> Term:
    with record() as rec:
        call().float().sum().backward()
    return rec.total.backward


def _predicted(call: Callable[[], Tensor]) -> Term:
    with record() as rec:
        call()
    return rec.total.backward


def _x() -> Tensor:
    return torch.randn(B, D, requires_grad=True)


def test_a_tensor_read_twice_by_one_op_sums_its_two_gradients() -> None:
    x = _x()
    ran = _ran(lambda: x * x)
    assert ran == Term(3 * B * D, 3 * B * D, exact=True)  # two products of the gradient, a sum
    assert _predicted(lambda: x * x).count == 3 * B * D
    square = estimate(lambda x: x * x, Float[Tensor, "b d"], b=B, d=D, grad=("x",))
    assert square.backward_flops == 3 * B * D
    assert str(square.backward.formula) == "3*b*d"


def test_a_residual_stream_sums_the_gradients_of_the_block_and_the_skip() -> None:
    torch.manual_seed(0)
    model = Residual(D)
    x = _x()
    ran = _ran(lambda: model(x))
    predicted = _predicted(lambda: model(x))
    cost = estimate(model, Float[Tensor, "b d"], b=B, d=D, grad=("x",))
    assert ran.exact and ran.count == predicted.count == cost.backward_flops
    # the same blocks without the skips: two sums of B*D fewer
    plain = estimate(lambda x: model.b(model.a(x)), Float[Tensor, "b d"], b=B, d=D, grad=("x",))
    assert cost.backward_flops - plain.backward_flops == 2 * B * D


def test_a_weight_tied_to_the_embedding_sums_its_two_gradients() -> None:
    torch.manual_seed(0)
    model = Tied(V, D)
    ids = torch.randint(0, V, (B, 5))
    ran = _ran(lambda: model(ids))
    cost = estimate(model, Int[Tensor, "b s"], b=B, s=5)
    assert ran.exact and ran.count == _predicted(lambda: model(ids)).count == cost.backward_flops
    untied = Tied(V, D)
    untied.head.weight = nn.Parameter(untied.embed.weight.detach().clone())
    assert cost.backward_flops - estimate(untied, Int[Tensor, "b s"], b=B, s=5).backward_flops == (
        V * D
    )


def test_slices_of_one_projection_sum_where_chunk_does_not() -> None:
    torch.manual_seed(0)
    x = _x()
    counts = {}
    for chunk in (False, True):
        model = Sliced(D, chunk)
        call = functools.partial(model, x)
        ran = _ran(call)
        cost = estimate(model, Float[Tensor, "b d"], b=B, d=D, grad=("x",))
        assert ran.exact and ran.count == _predicted(call).count == cost.backward_flops
        counts[chunk] = cost.backward_flops
    assert counts[False] - counts[True] == 2 * B * 3 * D


def test_an_in_place_op_starts_a_new_history() -> None:
    torch.manual_seed(0)
    model = InPlace(D)
    x = _x()
    ran = _ran(lambda: model(x))
    assert ran.exact and ran.count == _predicted(lambda: model(x)).count
    assert ran.count == estimate(model, Float[Tensor, "b d"], b=B, d=D, grad=("x",)).backward_flops


def _stable_softmax(x: Tensor) -> Tensor:
    shifted = x - x.amax(dim=-1, keepdim=True).detach()
    return shifted.exp() / shifted.exp().sum(dim=-1, keepdim=True)


def _masked(x: Tensor) -> Tensor:
    keep = x.abs() > 0.5
    return torch.where(keep, x * 2.0, torch.zeros_like(x[0]))


def _item(x: Tensor) -> Tensor:
    return x * float(x.max().item())


class _Events:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def add(self, event: Event) -> None:
        self.events.append(event)


def _sums(body: Callable[[Tensor], Tensor], x: Tensor) -> int:
    """The adds of the gradient sums counted for ``body(x)``."""
    sink = _Events()
    with counting(sink) as mode:
        out = body(x)
        mode.sums.settle()
    del out
    return sum(e.flops for s in sink.events if s.op == "gradient sum" for e in s.backward)


@pytest.mark.parametrize(
    ("body", "sums"),
    [(_stable_softmax, B * D), (_masked, 0), (_item, 0)],
    ids=["detached-max", "mask", "item"],
)
def test_a_branch_read_only_off_the_graph_sums_nothing(
    body: Callable[[Tensor], Tensor], sums: int
) -> None:
    # `x.amax().detach()`, `x.abs() > t`, `x[0]` for `zeros_like`, `x.max().item()`: ops
    # whose output no differentiated op reads are off the graph backward walks, and their
    # edges to `x` are none; the softmax's shifted values, read by two `exp`s, sum once
    x = _x()
    assert _sums(body, x) == sums
    # nor does their own backward run: the prediction is what ran
    ran = _ran(lambda: body(x))
    assert ran.exact and ran.count == _predicted(lambda: body(x)).count
    if body is not _item:  # (a dry run reads no values)
        cost = estimate(body, Float[Tensor, "b d"], b=B, d=D, grad=("x",))
        assert cost.backward_flops == ran.count


class Discards(nn.Module):
    """Values made and never used, as real code makes them: attention weights and a
    recurrent layer's last state thrown away, a statistic computed and not returned."""

    def __init__(self, d: int, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.attention = nn.MultiheadAttention(d, 2, batch_first=True)
        self.rnn = nn.GRU(d, d, batch_first=True)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor
        if self.kind == "attention-weights":
            out, _ = self.attention(x, x, x)  # (the weights averaged over heads)
        elif self.kind == "last-state":
            out, _ = self.rnn(x)
        else:
            h = torch.tanh(x)
            statistic = (h * 3.0).exp().mean()  # noqa: F841 (made, never read)
            out = h * 2.0
        return out


@pytest.mark.parametrize("kind", ["attention-weights", "last-state", "unused-statistic"])
def test_values_made_and_dropped_inside_a_call_cost_no_backward(kind: str) -> None:
    # no gradient reaches a value no op reads: not its ops' backward, not the sums of the
    # edges they made (`out, _ = attention(x, x, x)`: the weights' mean and the second
    # read of the softmax); what runs is the estimate and a typed call's prediction
    torch.manual_seed(0)
    model = Discards(D, kind)

    @typed_flops
    def call(x: Float[Tensor, "b s d"]) -> Float[Tensor, "b s d"]:
        out: Tensor = model(x)
        return out

    x = torch.randn(2, 5, D, requires_grad=True)
    ran = _ran(lambda: call(x))
    cost = call.estimate(b=2, s=5, d=D, grad=("x",))
    assert ran.exact and cost.backward.exact and cost.backward_flops == ran.count
    assert _predicted(lambda: call(x)).count == ran.count
    assert _ran(lambda: model(x)).count == ran.count  # (the same ops ran)


def _two_steps_off(x: Tensor) -> Tensor:
    if bool(x.abs().sum() > 0):  # (|x| and its sum: read only by a comparison)
        return x * 2.0
    return x


def test_a_branch_two_ops_from_an_off_graph_read_costs_no_backward() -> None:
    call = typed_flops(_two_steps_off)
    x = _x()
    ran = _ran(lambda: call(x))
    assert ran == Term(B * D, B * D, exact=True)
    assert _predicted(lambda: call(x)).count == ran.count


def _saved_copy(x: Tensor, w: Tensor) -> Tensor:
    h = x * 2.0
    h.mul_(w)  # autograd copies h first (its backward needs the old values): no edge
    return h


def test_the_copy_autograd_keeps_for_an_in_place_op_is_no_edge() -> None:
    x, w = _x(), _x()
    with record() as rec:
        _saved_copy(x, w).sum().backward()
    ran = rec.total.backward
    assert ran == Term(3 * B * D, 3 * B * D, exact=True)  # x*2's, and the two products
    cost = estimate(
        _saved_copy, Float[Tensor, "b d"], Float[Tensor, "b d"], b=B, d=D, grad=("x", "w")
    )
    assert cost.backward_flops == ran.count
    cell = nn.GRUCell(D, 2 * D)  # torch's GRU cell multiplies in place the same way
    inputs = torch.randn(B, D)
    ran = _ran(lambda: cell(inputs))
    assert ran.exact and ran.count == _predicted(lambda: cell(inputs)).count


def _written_after_a_read(x: Tensor) -> Tensor:
    h = x * 2.0
    a = h * 3.0  # an edge to h as it was
    h.add_(1.0)  # h's next history starts
    return a + h * 4.0


def test_an_edge_counted_after_an_in_place_write_goes_to_the_history_it_read() -> None:
    # h as made by `x * 2` has two edges (`h * 3` and the `add_`): one sum; h after the
    # write has one. However late the first edge is counted, it goes to the first history.
    x = _x()
    ran = _ran(lambda: _written_after_a_read(x))
    assert ran.exact and ran.count == _predicted(lambda: _written_after_a_read(x)).count
    cost = estimate(_written_after_a_read, Float[Tensor, "b d"], b=B, d=D, grad=("x",))
    assert cost.backward_flops == ran.count == 4 * B * D  # three products, one sum


def test_a_calls_row_keeps_its_sums_when_a_backward_runs_in_the_record() -> None:
    # the prediction of each call is decided before the pass that ran: the row's backward
    # is its estimate's, the total the pass's
    torch.manual_seed(0)
    model = Residual(D)

    @typed_flops
    def block(x: Float[Tensor, "b d"]) -> Float[Tensor, "b d"]:
        out: Tensor = model(x)
        return out

    x = _x()
    with record() as rec:
        block(x).sum().backward()
    (row,) = rec.calls
    cost = estimate(model, Float[Tensor, "b d"], b=B, d=D, grad=("x",))
    assert row.cost().backward_flops == cost.backward_flops
    assert rec.total.backward.exact


def test_parameters_read_by_two_forwards_of_one_loss_sum_but_two_steps_do_not() -> None:
    torch.manual_seed(0)
    model = Residual(D)
    x1, x2 = _x(), _x()
    one = _ran(lambda: model(x1)).count
    parameters = sum(p.numel() for p in model.parameters())
    with record() as rec:
        (model(x1).sum() + model(x2).sum()).backward()
    assert rec.total.backward == Term(2 * one + parameters, 2 * one + parameters, exact=True)
    with record() as rec:
        for x in (x1, x2):
            model(x).sum().backward()
    assert rec.total.backward == Term(2 * one, 2 * one, exact=True)


def test_a_language_model_estimate_is_its_backward_as_it_runs() -> None:
    torch.manual_seed(0)
    config = TransformerConfig.gpt2(vocab=97, context=16, d_model=32, n_layers=3, n_heads=4)
    model = TransformerLM(config)
    ids = torch.randint(0, 97, (2, 16))
    cost = model.estimate(batch=2, seq=16)
    ran = _ran(lambda: model(ids))
    assert ran.exact and ran.count == cost.backward_flops == _predicted(lambda: model(ids)).count
    # a residual stream read twice per block (attention's and the MLP's skips): 2*b*s*d each
    assert "26*batch*d_model*n_layers*seq" in str(cost.backward.formula)


@settings(max_examples=15, deadline=None)
@given(uses=st.integers(1, 5), b=st.integers(1, 5), d=st.integers(1, 6))
def test_k_reads_of_a_tensor_sum_k_minus_one_times(uses: int, b: int, d: int) -> None:
    scales = [float(i + 2) for i in range(uses)]

    def reads(x: Tensor) -> Tensor:
        total = x * scales[0]
        for scale in scales[1:]:
            total = total + x * scale
        return total

    x = torch.randn(b, d, requires_grad=True)
    expected = (2 * uses - 1) * b * d  # a product of the gradient per read, uses - 1 sums
    assert _ran(lambda: reads(x)) == Term(expected, expected, exact=True)
    assert _predicted(lambda: reads(x)).count == expected
    cost = estimate(reads, Float[Tensor, "b d"], b=b, d=d, grad=("x",))
    assert cost.backward_flops == expected


def test_a_records_rows_hold_the_sums_their_own_calls_make() -> None:
    # the sums of a block's residual stream fall in the block's row, as in its own dry
    # run: identical blocks share one row, and each row's formula holds
    torch.manual_seed(0)
    config = TransformerConfig.gpt2(vocab=97, context=16, d_model=32, n_layers=3, n_heads=4)
    model = TransformerLM(config)
    with record() as rec:
        out = model(torch.randint(0, 97, (2, 16)))
    rows = rec.calls[0].visible_children()
    assert [(row.function, row.calls) for row in rows if row.function == "Block.forward"] == [
        ("Block.forward", 3)
    ]
    norms = next(row for row in rows if row.function == "Block.forward").visible_children()
    for row in norms:
        if row.function == "LayerNorm.forward":
            assert row.cost().forward.exact and row.cost().backward.exact
    assert rec.total.backward_flops == model.estimate(batch=2, seq=16).backward_flops
    del out


@typed_flops
def _project(x: Float[Tensor, "b d"], w: Float[Tensor, "d d"]) -> Float[Tensor, "b d"]:
    return x @ w


def test_records_in_interleaved_tasks_each_count_their_own_sums() -> None:
    # two asyncio tasks on one thread, each in its own record, reading one model: a sum
    # is counted in the record whose op made the edge, even when another task runs then
    torch.manual_seed(0)
    model = Residual(D)
    w = torch.randn(D, D)

    async def steps(results: list[int]) -> None:
        with record() as rec:
            x = torch.randn(B, D, requires_grad=True)
            for _ in range(3):
                h = model(x)  # its skip's edge waits for a reader
                await asyncio.sleep(0)
                x = _project(h, w)
                await asyncio.sleep(0)
        results.append(rec.total.backward_flops)

    async def both() -> list[int]:
        results: list[int] = []
        await asyncio.gather(steps(results), steps(results))
        await steps(results)  # alone
        return results

    first, second, alone = asyncio.run(both())
    assert first == second == alone


def test_nanogpt_estimate_is_exact_and_its_backward_is_what_runs() -> None:
    # nanoGPT as its author writes it (positions made in forward, a tied head): the formula
    # holds at other sizes and its count is the backward a real run performs
    torch.manual_seed(0)
    config = GPTConfig(
        block_size=32, vocab_size=101, n_layer=2, n_head=2, n_embd=32, dropout=0.0, bias=True
    )
    model = GPT(config)
    cost = estimate(model, Int[Tensor, "batch seq"], batch=3, seq=16)
    ids = torch.randint(0, 101, (3, 16))
    ran = _ran(lambda: model(ids)[0])
    assert cost.backward.exact and ran.exact and cost.backward_flops == ran.count


@typed_flops
def _exp_times(x: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
    return torch.exp(x) * x


@pytest.mark.parametrize("later", [False, True])
def test_a_leaf_read_in_a_records_own_code_around_calls_sums_once(later: bool) -> None:
    """``w`` read by ``exp`` and by ``w * e`` in the record's own code, a decorated call
    between them: one loss over both sums its gradients (4 adds). A call made later, before
    anything decided whether ``w * e`` reaches backward, changes nothing of that (its edge
    to ``w`` was counted in that call's count, no sum): it adds its own backward (16). The
    backward that ran gives 36."""

    def run(backward: bool) -> int:
        with record() as rec:
            w = torch.ones(4, requires_grad=True)
            e = torch.exp(w)
            d = _exp_times(e)
            m = w * e
            if later:
                _exp_times(torch.ones(4, requires_grad=True))
            if backward:
                (d.sum() + m.sum()).backward()
        return rec.total.backward_flops

    ran = run(backward=True)
    # the call (exp 4, mul 8, its x's sum 4), exp 4, w * e 8, w's and e's sums 4 each
    assert ran == 16 + 4 + 8 + 4 + 4
    assert run(backward=False) == ran + (16 if later else 0)


@pytest.mark.parametrize(
    ("body", "backward"),
    [
        # compares of temporaries only: nothing differentiable leaves the call
        (lambda a: torch.isclose(a, torch.ones(5, 5)), 0),
        (lambda a: torch.linalg.matrix_rank(a), 0),
        # a softmax's temporaries inside cross_entropy reach backward through its output:
        # log-softmax's backward 4 per value, the loss's a value per target
        (lambda a: F.cross_entropy(a, torch.arange(5)), 4 * 25 + 5),
    ],
    ids=["isclose", "matrix_rank", "cross_entropy"],
)
def test_a_torch_calls_own_temporaries_start_no_backward_in_a_records_own_code(
    body: Callable[[Tensor], Tensor], backward: int
) -> None:
    # (a temporary torch made and let go inside isclose, |a - b|, was taken for a result
    # the user dropped, from which a backward could start: a backward predicted where none
    # can run)
    a = torch.randn(5, 5, requires_grad=True)
    with record() as predicted:
        body(a)
    assert predicted.total.backward_flops == backward
    out = body(a)
    if out.requires_grad:
        with record() as ran:
            body(a).backward()
        assert ran.total.backward_flops == backward


class _Drops(nn.Module):
    """A plain module whose forward drops what it does not need, as people write it: the
    attention weights and the recurrent layer's last state."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)
        self.rnn = nn.GRU(16, 16, batch_first=True)

    def forward(self, x: Tensor) -> Tensor:
        out, _ = self.attn(x, x, x)
        y: Tensor = self.rnn(out)[0]  # (h_n let go here)
        return y


def _drops_in_a_helper(x: Tensor) -> None:
    torch.var_mean(x, 1)[1].sum()  # (a loss computed and let go: the block's own code)


def test_tensors_let_go_in_a_modules_forward_the_record_block_called_start_no_backward() -> None:
    # what a module's forward drops is a local no backward starts from, as in an estimate
    # of the module (the GRU's h_n, let go in forward, was taken for a result: its last
    # state summed two gradients in the prediction, one where it ran); a plain function
    # the block calls is the block's own code: what it drops may be a loss
    torch.manual_seed(0)
    model = _Drops()
    x = torch.randn(2, 5, 16)
    with record() as predicted:
        model(x)
    with record() as ran:
        model(x).sum().backward()
    cost = estimate(model, Float[Tensor, "batch seq 16"], batch=2, seq=5)
    assert predicted.total.backward_flops == ran.total.backward_flops == cost.backward_flops
    assert ran.total.exact
    a = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    with record() as helper:
        _drops_in_a_helper(a)
    assert helper.total.backward_flops == 20  # (the mean's gradient spread over its rows)


def _backward_by_op(ops: Iterable[OpCost]) -> dict[str, int]:
    """Backward FLOPs by op name, of a cost's or a record's op groups."""
    found: dict[str, int] = {}
    for op in ops:
        found[op.op] = found.get(op.op, 0) + op.backward_flops
    return found


@pytest.mark.parametrize("run_backward", [False, True])
def test_a_records_ops_list_its_gradient_sums_as_an_estimate_does(run_backward: bool) -> None:
    # a residual stream: the sums are B*D adds a block, two blocks; they are listed as
    # "gradient sum", not in the row of the linear or add whose edge made them
    torch.manual_seed(0)
    model = Residual(D)
    x = _x()
    with record() as rec:
        out = model(x)
        if run_backward:
            out.sum().backward()
    cost = estimate(model, Float[Tensor, "b d"], b=B, d=D, grad=("x",))
    recorded, estimated = _backward_by_op(rec.total.ops), _backward_by_op(cost.ops)
    assert recorded.get("gradient sum", 0) == estimated["gradient sum"] == 2 * B * D
    assert recorded["linear"] == estimated["linear"]
