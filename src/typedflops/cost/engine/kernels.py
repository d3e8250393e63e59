"""The kernels a target device runs, in dry runs on ``meta``.

Dry runs use ``meta`` tensors, on which two calls run otherwise than on the device they
cost:

- ``F.scaled_dot_product_attention`` always takes its math path on ``meta``. A CPU or a GPU
  picks a fused kernel (flash, memory-efficient, cuDNN) with its own FLOPs and saved
  tensors, forward and backward. A dry run asks torch which kernel the target picks
  (``torch._fused_sdp_choice`` on small tensors of the same dtype, head sizes, heads,
  mask and flags, honouring ``torch.nn.attention.sdpa_kernel``) and calls that kernel on
  the meta tensors; every fused kernel has a meta implementation, backward included.
  Where the target is CUDA and no GPU of the target's compute capability is present
  (planning for an H100 on a laptop), the choice is torch's rule for that capability
  (:mod:`.attention_choice`), torch's priority order there: cuDNN first on sm90 and sm100
  (H100, H200, B200) for 16-bit inputs whose head sizes are multiples of 8 up to 256 (128
  on sm100), else flash, memory-efficient, math, as on every other GPU. A GPU whose
  capability is not known (``kernels_of("cuda")``) is taken as an A100 (sm80): flash for
  16-bit inputs with no mask and equal head sizes up to 256, else memory-efficient for
  float32 and 16-bit inputs whose head sizes it aligns, else math. On a machine with a GPU
  of the target's capability (or of any, the capability unknown), torch is asked.
- ``F.rms_norm`` on CUDA is one fused kernel (``_fused_rms_norm``: it keeps the input and a
  float32 ``rstd``); on ``meta`` and on a CPU it is a decomposition that keeps float32
  copies. For a CUDA target the dry run calls a stand-in with the kernel's outputs and
  autograd (:mod:`.stand_ins`).
- ``F.dropout`` on CUDA, training, is one fused kernel (``native_dropout``: it keeps a
  boolean mask); on ``meta`` and on a CPU it draws a mask, scales it and multiplies (a float
  mask kept). For a CUDA target the dry run calls the fused kernel.
- Torch's recurrent layers run otherwise on a CPU (a GRU's and RNN's input products for
  the whole sequence at once, an LSTM's oneDNN kernel, :mod:`.rnn_cpu`) and on a GPU (one
  cuDNN kernel, :mod:`.cudnn_rnn`) than step by step on ``meta``: the dry run runs the
  target's. So do LSTM and GRU cells on CUDA (two products, then a fused cell kernel:
  :mod:`.cuda_cells`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import re
import types
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import _disable_current_modes

from ...devices import DeviceSpec, resolve
from . import stand_ins  # noqa: F401  (defines torch.ops.typedflops._fused_rms_norm)
from .attention_choice import CUDNN, EFFICIENT, FLASH, MATH, AttentionCall, reduced_lengths
from .attention_choice import gpu_choice as _gpu_choice
from .cuda_cells import cell_as_cuda, is_cell
from .cudnn_rnn import is_cudnn_target, rnn_as_cudnn
from .frames import no_frame
from .rnn_cpu import is_rnn, rnn_as_cpu
from .standing import META_TARGET
from .value_checks import checked_on_meta, checks_values

__all__ = [
    "SDPA",
    "TargetKernels",
    "attention_on_meta",
    "describe_kernels",
    "kernels_of",
    "meta_capability",
    "meta_target",
    "on_target",
    "runs_otherwise",
]

SDPA = F.scaled_dot_product_attention
RMS_NORM = F.rms_norm
DROPOUT = F.dropout

aten = torch.ops.aten

_MATH, _FLASH, _EFFICIENT, _CUDNN = MATH, FLASH, EFFICIENT, CUDNN
_DEVICE_TYPE = re.compile(r"(cpu|cuda|mps|xpu|meta)(:\d+)?")

# The device type whose kernels a dry run of a call made on `meta` stands for (a model
# built on meta to be costed): None keeps meta's own (math) attention. For a GPU, its
# compute capability when known (the attention kernel torch picks depends on it).
_meta_target = META_TARGET
_meta_capability: ContextVar[tuple[int, int] | None] = ContextVar(
    "typedflops_meta_capability", default=None
)


def meta_target() -> str | None:
    """The device type a dry run of a call on ``meta`` costs the kernels of, if any."""
    return _meta_target.get()


def meta_capability() -> tuple[int, int] | None:
    """The compute capability of the GPU a dry run on ``meta`` costs, if known."""
    return _meta_capability.get()


def device_type_of(device: DeviceSpec) -> str:
    """The device type whose kernels a dry run for ``device`` costs (a CPU's or a GPU's)."""
    return "cpu" if device.kind == "cpu" else "cuda"


@contextlib.contextmanager
def kernels_of(
    device: str | DeviceSpec | None, capability: tuple[int, int] | None = None
) -> Iterator[None]:
    """Inside the block, dry runs of calls whose tensors are on ``meta`` (a model built on
    meta) cost attention as the kernel ``device`` would run: a device type (``"cpu"``,
    ``"cuda"``, with the GPU's compute ``capability`` such as ``(9, 0)`` when known) or a
    device of the table (``"H100 SXM"``, a :class:`~typedflops.devices.DeviceSpec`), which
    carries both. A GPU of unknown capability is costed as an A100 (sm80).

    >>> with kernels_of("H100 SXM"):
    ...     meta_target(), meta_capability()
    ('cuda', (9, 0))
    """
    if isinstance(device, str) and _DEVICE_TYPE.fullmatch(device):
        device = torch.device(device).type
    elif isinstance(device, str):  # a device of the table, "H100 SXM"
        device = resolve(device)
    target = device_type_of(device) if isinstance(device, DeviceSpec) else device
    if isinstance(device, DeviceSpec):
        capability = capability or device.capability
    token = _meta_target.set(target)
    held = _meta_capability.set(capability if target == "cuda" else None)
    try:
        yield
    finally:
        _meta_capability.reset(held)
        _meta_target.reset(token)


def describe_kernels(device_type: str | None, capability: tuple[int, int] | None = None) -> str:
    """In words, the kernels a dry run costs for ``device_type`` (a GPU's of compute
    ``capability`` when known), as reports name them.

    >>> describe_kernels("cuda", (9, 0))  # doctest: +NORMALIZE_WHITESPACE
    "a GPU's, sm90 (attention as torch picks it there: cuDNN first on sm90 and sm100, for
    16-bit inputs with head sizes multiples of 8 up to 256, then flash, memory-efficient,
    math; CUDA's fused RMS norm and dropout, cuDNN's recurrent layers)"
    """
    if device_type == "cuda":
        fused = "CUDA's fused RMS norm and dropout, cuDNN's recurrent layers"
        return f"a GPU's{_gpu_words(capability)}; {fused})"
    if device_type == "cpu":
        return (
            "a CPU's (attention as torch picks it there: its fused flash kernel; recurrent "
            "layers as a CPU runs them)"
        )
    return "meta's own (math attention, which keeps the s x s scores)"


def _gpu_words(capability: tuple[int, int] | None) -> str:
    if capability is None:
        return (
            " of unknown compute capability, taken as an A100's (attention as torch picks it "
            "on sm80: flash for 16-bit inputs, then memory-efficient, math"
        )
    name = f", sm{capability[0]}{capability[1]} (attention as torch picks it there: "
    if capability[0] in (9, 10):
        most = "256" if capability == (9, 0) else "128"
        return (
            name + "cuDNN first on sm90 and sm100, for 16-bit inputs with head sizes "
            f"multiples of 8 up to {most}, then flash, memory-efficient, math"
        )
    if capability >= (8, 0):
        return name + "flash for 16-bit inputs, then memory-efficient, math"
    return name + "memory-efficient (flash and cuDNN need sm80), then math"


def _arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
    found = dict(zip(names, args, strict=False))
    found.update(kwargs)
    found.setdefault("attn_mask", None)
    found.setdefault("dropout_p", 0.0)
    found.setdefault("is_causal", False)
    found.setdefault("scale", None)
    found.setdefault("enable_gqa", False)
    return found


def _summary(call: dict[str, Any]) -> AttentionCall | None:
    """What the filters of torch's fused kernels read of ``call``; None where none of them
    can take it (not 4-D, inputs of several dtypes or batch sizes, key/value heads that do
    not group the query's)."""
    query, key, value, mask = call["query"], call["key"], call["value"], call["attn_mask"]
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        return None
    if not query.dtype == key.dtype == value.dtype:
        return None
    batch, heads, length, _ = query.shape
    if not batch == key.shape[0] == value.shape[0] or key.shape[1] != value.shape[1]:
        return None
    grouped = heads != key.shape[1]
    if grouped and not (call["enable_gqa"] and heads % key.shape[1] == 0):
        return None
    fits = True
    if mask is not None:
        shape = tuple(mask.shape)
        fits = (
            not mask.requires_grad
            and mask.dim() in (2, 4)
            and shape[-2] in (1, length)
            and shape[-1] in (1, key.shape[2])
            and (mask.dim() == 2 or (shape[0] in (1, batch) and shape[1] in (1, heads)))
        )
    return AttentionCall(
        query.dtype,
        (int(query.shape[-1]), int(key.shape[-1]), int(value.shape[-1])),
        None if mask is None else mask.dtype,
        fits,
        grouped,
        bool(call["is_causal"]),
        float(call["dropout_p"]),
        torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value)),
        reduced_lengths(int(length), int(key.shape[2])),
    )


def _choice(target: str, call: dict[str, Any]) -> int:
    """The backend the target device would pick for this call (math when unsure)."""
    if target not in ("cpu", "cuda"):
        return _MATH
    if _strided(call, ignore_single=target == "cuda"):
        return _MATH
    summary = _summary(call)
    if summary is None:
        return _MATH
    if target == "cuda" and not _present(meta_capability()):
        return _gpu_choice(summary, _flags(), meta_capability())
    with no_frame():  # asking torch is not part of the call
        return _cached_choice(target, summary, _flags(), _settings())


def _strided(call: dict[str, Any], ignore_single: bool) -> bool:
    """Whether a query, key or value steps over its last dim (a head split out of a
    channel dim, ``"b (h d) x y -> b h (x y) d"``): every fused kernel of a CPU and a GPU
    needs that dim's stride to be 1 (a GPU's pass over a dim of size 1), so torch runs math."""
    return any(
        t.dim() > 0 and t.stride(-1) != 1 and not (ignore_single and t.shape[-1] == 1)
        for t in (call["query"], call["key"], call["value"])
        if isinstance(t, torch.Tensor) and t.layout == torch.strided and not t.is_nested
    )


def _present(capability: tuple[int, int] | None) -> bool:
    """Whether the GPU a dry run costs is this machine's (torch can be asked)."""
    if not torch.cuda.is_available():
        return False
    return capability is None or tuple(torch.cuda.get_device_capability()) == capability


def _flags() -> tuple[bool, ...]:
    backends = torch.backends.cuda
    return (
        backends.flash_sdp_enabled(),  # type: ignore[no-untyped-call]
        backends.mem_efficient_sdp_enabled(),  # type: ignore[no-untyped-call]
        backends.math_sdp_enabled(),  # type: ignore[no-untyped-call]
        backends.cudnn_sdp_enabled(),  # type: ignore[no-untyped-call]
    )


def _settings() -> tuple[object, ...]:
    """torch's other settings its choice reads: determinism and the backends' order."""
    order = getattr(torch._C, "_get_sdp_priority_order", lambda: ())
    return (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        tuple(int(b) for b in order()),
    )


@functools.lru_cache(maxsize=256)
def _cached_choice(
    target: str, call: AttentionCall, flags: tuple[bool, ...], settings: tuple[object, ...]
) -> int:
    # Asked of torch's own kernels with every mode set aside: under a FakeTensorMode (a
    # dry run of FSDP) torch would answer for fake tensors (math), and the answer is kept.
    with _disable_current_modes():
        return _ask_torch(target, call)


def _ask_torch(target: str, call: AttentionCall) -> int:
    """torch's choice for a call like ``call``: batch 1, one key/value head (two query
    heads when grouped), the reduced lengths."""
    heads = 2 if call.grouped else 1
    query_length, key_length = call.lengths

    def zeros(*shape: int, dtype: torch.dtype = call.dtype) -> torch.Tensor:
        return torch.zeros(*shape, dtype=dtype, device=target)

    query = zeros(1, heads, query_length, call.heads[0]).requires_grad_(call.grad)
    key = zeros(1, 1, key_length, call.heads[1])
    value = zeros(1, 1, key_length, call.heads[2])
    attn_mask = None
    if call.mask is not None:  # a shape cuDNN takes, or a 3-D one it does not
        shape = (query_length, key_length) if call.mask_fits else (1, query_length, key_length)
        attn_mask = zeros(*shape, dtype=call.mask)
    try:
        with torch.set_grad_enabled(call.grad):
            return int(
                torch._fused_sdp_choice(
                    query,
                    key,
                    value,
                    attn_mask=attn_mask,
                    dropout_p=call.dropout,
                    is_causal=call.causal,
                    enable_gqa=call.grouped,
                )
            )
    except (RuntimeError, TypeError):
        return _MATH


def attention_on_meta(target: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``F.scaled_dot_product_attention(*args, **kwargs)`` on meta tensors, through the
    kernel ``target`` (``"cpu"``, ``"cuda"``) would run. cuDNN's takes a boolean mask as
    torch hands it over: an additive mask in the inputs' dtype (-65504 where masked out),
    which it keeps for backward with its output and a float32 log-sum-exp per query."""
    call = _arguments(args, kwargs)
    q, k, v = call["query"], call["key"], call["value"]
    if any(t.numel() == 0 for t in (q, k, v)):  # (torch's own path for empty inputs, on
        return SDPA(*args, **kwargs)  # every device: zeros plus the inputs' sums times 0)
    choice = _choice(target, call)
    mask, dropout_p, causal, scale = (
        call["attn_mask"],
        call["dropout_p"],
        call["is_causal"],
        call["scale"],
    )
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    if choice in (_FLASH, _EFFICIENT) and mask is not None and mask.dtype == torch.bool:
        mask = _additive(mask, q.dtype)
    if choice == _FLASH and target == "cpu":
        return aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, dropout_p, causal, attn_mask=mask, scale=scale
        )[0]
    if choice == _FLASH and mask is None:
        return aten._scaled_dot_product_flash_attention(q, k, v, dropout_p, causal, scale=scale)[0]
    if choice == _EFFICIENT:
        return aten._scaled_dot_product_efficient_attention(
            q, k, v, mask, grad, dropout_p, causal, scale=scale
        )[0]
    if choice == _CUDNN:
        if mask is not None and mask.dtype == torch.bool:
            zero = torch.scalar_tensor(0.0, dtype=q.dtype, device=mask.device)
            mask = torch.where(mask.logical_not(), -65504.0, zero)
        return aten._scaled_dot_product_cudnn_attention(
            q, k, v, mask, grad, dropout_p, causal, scale=scale
        )[0]
    return SDPA(*args, **kwargs)


def _additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A boolean attention mask as torch hands it to the flash (CPU) and memory-efficient
    kernels: an additive mask in the inputs' dtype, 0 where kept and -inf where masked out
    (``convert_boolean_attn_mask``: two scalars, then ``where``)."""
    neg = torch.scalar_tensor(float("-inf"), dtype=dtype, device=mask.device)
    zero = torch.scalar_tensor(0.0, dtype=dtype, device=mask.device)
    return torch.where(mask, zero, neg)


def _channels_last(x: torch.Tensor) -> bool:
    layout = {4: torch.channels_last, 5: torch.channels_last_3d}.get(x.dim())
    return layout is not None and x.is_contiguous(memory_format=layout) and not x.is_contiguous()


def rms_norm_on_meta(target: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``F.rms_norm(*args, **kwargs)`` on meta tensors as ``target`` runs it: CUDA's fused
    kernel where torch takes it (a real input whose weight, if any, has its dtype)."""
    names = ("input", "normalized_shape", "weight", "eps")
    call = {"weight": None, "eps": None, **dict(zip(names, args, strict=False)), **kwargs}
    x, weight = call["input"], call["weight"]
    fused = target == "cuda" and not x.is_complex() and not _channels_last(x)
    if fused and (weight is None or weight.dtype == x.dtype):
        shape = [int(size) for size in call["normalized_shape"]]
        return torch.ops.typedflops._fused_rms_norm(x, shape, weight, call["eps"])[0]
    return RMS_NORM(*args, **kwargs)


def dropout_on_meta(target: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``F.dropout(*args, **kwargs)`` on meta tensors as ``target`` runs it: CUDA's fused
    kernel (``native_dropout``, a boolean mask kept for backward) where torch takes it, out
    of place while training with ``0 < p < 1``; elsewhere the mask is drawn, scaled and
    multiplied op by op (a float mask kept)."""
    names = ("input", "p", "training", "inplace")
    call = {"p": 0.5, "training": True, "inplace": False, **dict(zip(names, args, strict=False))}
    call.update(kwargs)
    x, p = call["input"], float(call["p"])
    fused = target == "cuda" and call["training"] and not call["inplace"] and 0 < p < 1
    if fused and x.numel() > 0:
        return torch.native_dropout(x, p, True)[0]
    return DROPOUT(*args, **kwargs)


#: torch's recurrent layers and cells, which a CPU and a GPU run otherwise than meta
_RECURRENT = frozenset({"gru", "rnn_tanh", "rnn_relu", "lstm", "gru_cell", "lstm_cell"})


def runs_otherwise(func: Any) -> bool:
    """Whether a device may run ``func`` otherwise than meta (:func:`on_target` knows how):
    attention, RMS norm, dropout, a recurrent layer or cell, or a torch function calling one
    of the first three (:func:`composite`).

    >>> runs_otherwise(torch.gru), runs_otherwise(F.dropout), runs_otherwise(torch.add)
    (True, True, False)
    """
    try:
        return _runs_otherwise(func)
    except TypeError:  # an unhashable callable
        return False


@functools.lru_cache(maxsize=1024)
def _runs_otherwise(func: Any) -> bool:
    if func is SDPA or func is RMS_NORM or func is DROPOUT:
        return True
    name = getattr(func, "__name__", None)
    if name in _RECURRENT and func == getattr(torch._C._VariableFunctions, name):
        return True
    return _calls_target_kernels(func)


def composite(func: Any) -> bool:
    """Whether ``func`` is a torch function written in Python that calls attention, RMS
    norm or dropout inside (``F.multi_head_attention_forward``, which
    ``nn.MultiheadAttention`` and ``nn.TransformerEncoderLayer`` call): torch-function
    modes do not see the calls a call they handle makes, so such a call runs under
    :class:`TargetKernels`.

    >>> composite(F.multi_head_attention_forward), composite(F.layer_norm), composite(SDPA)
    (True, False, False)
    """
    try:
        return _calls_target_kernels(func)
    except TypeError:  # an unhashable callable
        return False


@functools.lru_cache(maxsize=1024)
def _calls_target_kernels(func: Any) -> bool:
    if not inspect.isfunction(func) or func in (SDPA, RMS_NORM, DROPOUT):
        return False
    names = set(func.__code__.co_names)
    return bool(names & {SDPA.__name__, RMS_NORM.__name__, DROPOUT.__name__})


def on_target(target: str, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``func(*args, **kwargs)`` on meta tensors as the ``target`` device would run it,
    the attention, RMS norm and dropout it calls inside included, and recurrent layers."""
    if func is SDPA:
        return attention_on_meta(target, args, kwargs)
    if func is RMS_NORM:
        return rms_norm_on_meta(target, args, kwargs)
    if func is DROPOUT:
        return dropout_on_meta(target, args, kwargs)
    if is_rnn(func, args):
        if target == "cpu":
            return rnn_as_cpu(func, args, kwargs)
        if target == "cuda" and is_cudnn_target(args):
            return rnn_as_cudnn(func, args, kwargs)
    if target == "cuda" and is_cell(func, args):
        return cell_as_cuda(func, args, kwargs)
    if checks_values(func):  # (a check of values answered from shapes)
        return checked_on_meta(func, args, kwargs)
    if composite(func):
        with TargetKernels(target):
            return _body(func)(*args, **kwargs)
    return func(*args, **kwargs)


@functools.lru_cache(maxsize=64)
def _body(func: Any) -> Any:
    """``func`` (a torch function written in Python) without its hand-over to the modes
    around: its ``if has_torch_function(...): return handle_torch_function(...)`` finds
    none. A mode handling ``func`` runs it with that mode off the stack, so the calls inside
    would not see it; this runs it with :class:`TargetKernels` on the stack, handing each
    call inside to it, not ``func`` itself again (which would hand itself over forever)."""
    names = _ModuleNames(func.__globals__)
    for name in ("has_torch_function", "has_torch_function_unary", "has_torch_function_variadic"):
        names[name] = _no_torch_function
    names["__builtins__"] = func.__globals__.get("__builtins__", __builtins__)
    body = types.FunctionType(
        func.__code__, names, func.__name__, func.__defaults__, func.__closure__
    )
    body.__kwdefaults__ = func.__kwdefaults__
    return body


class _ModuleNames(dict[str, Any]):
    """A function's globals with some names of its own: the rest read from its module's
    (as they are when read)."""

    def __init__(self, module: dict[str, Any]) -> None:
        super().__init__()
        self.module = module

    def __missing__(self, name: str) -> Any:
        return self.module[name]


def _no_torch_function(*_: Any) -> bool:
    return False


class TargetKernels(TorchFunctionMode):
    """The target device's kernels while nothing is counted (a block repeated in a dry run
    runs its ops uncounted, but must save for backward what the counted block saved)."""

    def __init__(self, target: str) -> None:
        super().__init__()
        self.target = target

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        return on_target(self.target, func, args, kwargs or {})
