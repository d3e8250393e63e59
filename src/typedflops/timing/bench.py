"""Timed execution: ``benchmark(fn, *args, **kwargs) -> Measurement``.

The call's contract is checked (on metadata, by the cost engine's ``call_cost``)
before anything runs. Then the function is warmed up (by count, since first calls pay for
allocation and dispatch caches, and by time, so that clocks ramp up) and timed per run: CUDA
events around each run with an L2 flush before it (outside the timed region), or
``time.perf_counter`` on the host. The statistics and the warm-up logic only see a ``Clock``,
so they are tested with a fake one.

>>> clock = FakeClock([1.0, 1.0, 2.0, 2.0, 2.0, 3.0])
>>> collect_times(clock, lambda: None, warmup=1, warmup_time=0.0, repeat=5, min_time=0.0)
[1.0, 2.0, 2.0, 2.0, 3.0]
"""

from __future__ import annotations

import contextlib
import gc
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol

import torch

from .. import devices
from ..config import disabled
from ..contract.scope import display_name
from ..contract.walk import tensors_in
from ..cost.engine.counter import suspended
from ..cost.engine.frames import no_frame
from ..cost.engine.probes import call_cost
from ..cost.engine.recorded_calls import note_measured
from ..cost.engine.recording import current_mode
from ..devices.cpu import last_level_cache_bytes
from ..errors import SpecError
from ..roofline import Bound, attainable, bound, ridge_point
from ..text import dtype_name, format_percent, format_si

__all__ = [
    "Clock",
    "CudaClock",
    "FakeClock",
    "HostClock",
    "Measurement",
    "benchmark",
    "collect_times",
    "measurement_from",
]

#: Runs are never more than this many, however short the function.
MAX_RUNS = 10_000
#: IQR / median above which a measurement is flagged noisy (as torch.utils.benchmark warns).
NOISY_IQR_RATIO = 0.1
#: median / min above which a measurement is flagged noisy: the typical run was much slower
#: than the machine can run it (preemption, a neighbour, a clock that ramped down).
NOISY_MEDIAN_OVER_MIN = 1.5
#: Timed runs whose expected total exceeds this many seconds show a progress bar.
PROGRESS_AFTER = 1.0


class Progress(Protocol):
    """The part of a ``tqdm`` bar that ``collect_times`` drives: its total, set once the
    number of runs is known, and ``update``."""

    total: float | None

    def update(self, n: float | None = 1) -> bool | None: ...


class Clock(Protocol):
    """Runs ``run`` ``count`` times and returns the seconds each run took."""

    def time(self, run: Callable[[], object], count: int) -> list[float]: ...


class EventLike(Protocol):
    """The part of ``torch.cuda.Event`` a ``CudaClock`` uses."""

    def record(self) -> None: ...
    def elapsed_time(self, end_event: Any, /) -> float: ...


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class HostClock:
    """``time.perf_counter`` around each run; ``flush`` and ``synchronize`` are untimed hooks.

    ``synchronize`` (e.g. ``torch.mps.synchronize``) runs before the clock starts and before it
    stops, for devices whose work is asynchronous; ``flush`` runs before each run, untimed.
    """

    def __init__(
        self,
        *,
        timer: Callable[[], float] = time.perf_counter,
        flush: Callable[[], object] | None = None,
        synchronize: Callable[[], object] | None = None,
    ) -> None:
        self._timer = timer
        self._flush = flush
        self._synchronize = synchronize

    def time(self, run: Callable[[], object], count: int) -> list[float]:
        seconds = []
        with _gc_paused():
            for _ in range(count):
                if self._flush is not None:
                    self._flush()
                if self._synchronize is not None:
                    self._synchronize()
                start = self._timer()
                run()
                if self._synchronize is not None:
                    self._synchronize()
                seconds.append(self._timer() - start)
        return seconds


class CudaClock:
    """A pair of CUDA events around each run, one synchronisation after the last run.

    ``flush`` (zeroing a buffer of twice the L2 size, so that a hashed, partitioned L2 is
    overwritten) is queued before each start event, so it is not timed. The primitives are
    injected so that tests run without a GPU; ``CudaClock.for_device`` builds the real one.
    """

    def __init__(
        self,
        *,
        event: Callable[[], EventLike],
        synchronize: Callable[[], object],
        flush: Callable[[], object] | None = None,
        guard: Callable[[], contextlib.AbstractContextManager[object]] = contextlib.nullcontext,
    ) -> None:
        self._event = event
        self._synchronize = synchronize
        self._flush = flush
        self._guard = guard

    @classmethod
    def for_device(cls, device: torch.device, *, flush_l2: bool = True) -> CudaClock:
        """The clock of a real CUDA ``device``; allocates the flush buffer when ``flush_l2``."""
        index = torch.cuda.current_device() if device.index is None else device.index
        flush: Callable[[], object] | None = None
        if flush_l2:
            l2_bytes = torch.cuda.get_device_properties(index).L2_cache_size
            buffer = torch.empty(2 * l2_bytes, dtype=torch.int8, device=device)
            flush = buffer.zero_

        def event() -> EventLike:
            return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]

        return cls(
            event=event,
            synchronize=lambda: torch.cuda.synchronize(index),
            flush=flush,
            guard=lambda: torch.cuda.device(index),
        )

    def time(self, run: Callable[[], object], count: int) -> list[float]:
        with self._guard(), _gc_paused():
            pairs = [(self._event(), self._event()) for _ in range(count)]
            self._synchronize()
            for start, end in pairs:
                if self._flush is not None:
                    self._flush()
                start.record()
                run()
                end.record()
            self._synchronize()
            return [start.elapsed_time(end) / 1e3 for start, end in pairs]


class FakeClock:
    """A clock for tests: each run calls ``run`` and takes the next of ``seconds`` (cycled)."""

    def __init__(self, seconds: Sequence[float]) -> None:
        self._seconds = list(seconds)
        self.runs = 0

    def time(self, run: Callable[[], object], count: int) -> list[float]:
        out = []
        for _ in range(count):
            run()
            out.append(self._seconds[self.runs % len(self._seconds)])
            self.runs += 1
        return out


def collect_times(
    clock: Clock,
    run: Callable[[], object],
    *,
    warmup: int,
    warmup_time: float,
    repeat: int,
    min_time: float,
    progress: Progress | None = None,
) -> list[float]:
    """Warm up, then time runs: at least ``repeat``, enough to last ``min_time`` seconds.

    Warm-up runs at least ``warmup`` times and until ``warmup_time`` seconds of runs have
    passed (first calls are slow, clocks ramp up). The number of timed runs comes from the
    fastest warm-up run, capped at ``MAX_RUNS``. With a ``progress`` bar, each run (or chunk
    of runs lasting about 0.1 s) advances it, warm-up included; its total is set when the
    number of runs is known. The clock's own timing is unchanged.
    """
    warm: list[float] = []
    while len(warm) < warmup or (sum(warm) < warmup_time and len(warm) < MAX_RUNS):
        warm += clock.time(run, 1)
        if progress is not None:
            progress.update(1)
    per_run = min(warm, default=0.0)
    wanted = math.ceil(min_time / per_run) if per_run > 0 else MAX_RUNS
    count = max(repeat, min(wanted, MAX_RUNS))
    if progress is None:
        return clock.time(run, count)
    progress.total = len(warm) + count
    chunk = max(1, min(count, math.ceil(0.1 / per_run))) if per_run > 0 else count
    times: list[float] = []
    while len(times) < count:
        batch = min(chunk, count - len(times))
        times += clock.time(run, batch)
        progress.update(batch)
    return times


def _quartiles(sorted_times: Sequence[float]) -> tuple[float, float, float]:
    if len(sorted_times) == 1:
        only = sorted_times[0]
        return only, only, only
    # "inclusive" is linear interpolation, as torch.quantile in torch.utils.benchmark
    q1, q2, q3 = statistics.quantiles(sorted_times, n=4, method="inclusive")
    return q1, q2, q3


@dataclass(frozen=True)
class Measurement:
    """Timed runs of one call, with FLOP/s, MFU and its place on the roofline.

    Times are seconds per run; ``noisy`` flags a spread-out sample (IQR over 10% of the
    median, or a median over 1.5x the minimum) and ``noise`` says which ("" when quiet);
    ``flops`` and ``bytes`` are per call (forward, from the cost model); ``intensity`` is
    FLOP/byte; ``ridge`` is peak / bandwidth in FLOP/byte; ``bound`` is ``"memory"`` below
    the ridge. Fields that need an unknown peak or bandwidth are None.
    """

    times: tuple[float, ...]
    median: float
    min: float
    iqr: float
    noisy: bool
    noise: str
    flops: int
    flop_per_sec: float
    peak_flop_per_sec: float | None
    mfu: float | None
    bytes: int
    bytes_per_sec: float
    intensity: float | None
    ridge: float | None
    bound: Bound | None
    device: str
    dtype: torch.dtype | None
    threads: int | None

    @property
    def attainable_flop_per_sec(self) -> float | None:
        """The roofline's FLOP/s at this intensity, when the roofline is known."""
        if self.peak_flop_per_sec is None or self.ridge is None or self.intensity is None:
            return None
        bandwidth = self.peak_flop_per_sec / self.ridge
        return attainable(self.intensity, self.peak_flop_per_sec, bandwidth)

    def __str__(self) -> str:
        """One line: the median time, FLOP/s, MFU and bytes/s, where and how it was timed.

        >>> str(measurement_from([2e-3, 2e-3, 2e-3], flops=4 * 10**9, bytes_moved=10**8,
        ...                      device="cuda:0", dtype=torch.bfloat16, peak=1e13))
        '2.00 ms (3 runs, IQR 0.00%) on cuda:0 bfloat16: 2.00 TFLOP/s, MFU 20.0%, 50.0 GB/s'
        """
        dtype = dtype_name(self.dtype) if self.dtype is not None else "-"
        spread = format_percent(self.iqr / self.median) if self.median else "0%"
        mfu = "MFU n/a" if self.mfu is None else f"MFU {format_percent(self.mfu)}"
        noisy = " (noisy)" if self.noisy else ""
        return (
            f"{format_si(self.median, 's')} ({len(self.times)} runs, IQR {spread}{noisy}) on "
            f"{self.device} {dtype}: {format_si(self.flop_per_sec, 'FLOP/s')}, {mfu}, "
            f"{format_si(self.bytes_per_sec, 'B/s')}"
        )

    def table(self) -> str:
        """A few labelled lines: time, work, MFU, memory traffic (and why it is noisy).

        >>> print(measurement_from([2e-3, 2e-3, 2e-3], flops=4 * 10**9, bytes_moved=10**8,
        ...                        device="cuda:0", dtype=torch.bfloat16, peak=1e13).table())
        median  2.00 ms (min 2.00 ms, IQR 0.00%, 3 runs) on cuda:0, bfloat16
        work    4.00 GFLOP -> 2.00 TFLOP/s
        MFU     20.0% of 10.0 TFLOP/s
        memory  100 MB -> 50.0 GB/s, 40 FLOP/B
        """
        spread = format_percent(self.iqr / self.median) if self.median else "0%"
        dtype = dtype_name(self.dtype) if self.dtype is not None else "-"
        threads = f", {self.threads} threads" if self.threads is not None else ""
        lines = [
            f"median  {format_si(self.median, 's')} (min {format_si(self.min, 's')}, IQR "
            f"{spread}, {len(self.times)} runs) on {self.device}, {dtype}{threads}",
            f"work    {format_si(self.flops, 'FLOP')} -> {format_si(self.flop_per_sec, 'FLOP/s')}",
        ]
        if self.mfu is not None and self.peak_flop_per_sec is not None:
            peak = format_si(self.peak_flop_per_sec, "FLOP/s")
            lines.append(f"MFU     {format_percent(self.mfu)} of {peak}")
        else:
            lines.append(
                f"MFU     n/a: no peak FLOP/s for this device (pass peak= or set "
                f"{devices.ENV_PEAK_FLOPS})"
            )
        traffic = f"memory  {format_si(self.bytes, 'B')} -> {format_si(self.bytes_per_sec, 'B/s')}"
        if self.intensity is not None:
            traffic += f", {self.intensity:.3g} FLOP/B"
            if self.ridge is not None:
                traffic += f" (ridge {self.ridge:.3g}: {self.bound}-bound)"
        lines.append(traffic)
        if self.noisy:
            lines.append(f"noisy   {self.noise}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON-ready values (``times`` a list, ``dtype`` e.g. "float32").

        >>> import json
        >>> m = measurement_from([1e-3], flops=2_000_000, bytes_moved=1000, device="cpu")
        >>> json.loads(json.dumps(m.to_dict()))["flop_per_sec"]
        2000000000.0
        """
        out = {item.name: getattr(self, item.name) for item in fields(self)}
        out["times"] = list(self.times)
        out["dtype"] = None if self.dtype is None else dtype_name(self.dtype)
        return out


def noise_of(ordered: Sequence[float], median: float, iqr: float) -> str:
    """Why sorted run times are noisy ("" when they are not): a wide IQR, a median far above
    the minimum, or both.

    >>> noise_of([2.74e-3, 0.7, 0.75, 0.76], 0.748, 0.03)
    'median 748 ms is 273x the minimum 2.74 ms'
    """
    reasons = []
    if median > 0 and iqr / median > NOISY_IQR_RATIO:
        reasons.append(
            f"IQR {format_si(iqr, 's')} is {format_percent(iqr / median)} of the median "
            f"(over {format_percent(NOISY_IQR_RATIO)})"
        )
    if ordered and median > NOISY_MEDIAN_OVER_MIN * ordered[0]:
        reasons.append(
            f"median {format_si(median, 's')} is {median / ordered[0]:.3g}x the minimum "
            f"{format_si(ordered[0], 's')}"
        )
    return "; ".join(reasons)


def measurement_from(
    times: Sequence[float],
    *,
    flops: int,
    bytes_moved: int,
    device: str,
    dtype: torch.dtype | None = None,
    threads: int | None = None,
    peak: float | None = None,
    bandwidth: float | None = None,
    peak_source: str = "",
) -> Measurement:
    """Statistics and roofline of per-run ``times``; raises ``SpecError`` when MFU > 1.

    An MFU above 1 cannot be a result: the peak (or the FLOP count) is wrong.
    """
    if not times:
        raise SpecError.at("measurement_from()", "a measurement needs at least one timed run")
    ordered = sorted(times)
    q1, median, q3 = _quartiles(ordered)
    flop_per_sec = flops / median if median > 0 else math.inf
    mfu = None if peak is None else flop_per_sec / peak
    if mfu is not None and mfu > 1:
        raise SpecError.at(
            None,
            f"MFU {mfu:.2f} > 1 on {device} ({dtype}): {format_si(flop_per_sec, 'FLOP/s')} "
            "measured against a peak of "
            f"{format_si(peak or 0.0, 'FLOP/s')} ({peak_source or 'peak='}). The peak is wrong "
            f"(or the call does less work than its {flops:,} counted FLOPs): pass peak= or "
            f"set {devices.ENV_PEAK_FLOPS}",
        )
    intensity = flops / bytes_moved if bytes_moved > 0 else None
    ridge = None if peak is None or bandwidth is None else ridge_point(peak, bandwidth)
    noise = noise_of(ordered, median, q3 - q1)
    return Measurement(
        times=tuple(times),
        median=median,
        min=ordered[0],
        iqr=q3 - q1,
        noisy=bool(noise),
        noise=noise,
        flops=flops,
        flop_per_sec=flop_per_sec,
        peak_flop_per_sec=peak,
        mfu=mfu,
        bytes=bytes_moved,
        bytes_per_sec=bytes_moved / median if median > 0 else math.inf,
        intensity=intensity,
        ridge=ridge,
        bound=None if intensity is None or ridge is None else bound(intensity, ridge),
        device=device,
        dtype=dtype,
        threads=threads,
    )


def _call_cost(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return call_cost(fn, args, kwargs)


def _placement(
    fn: Callable[..., object], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[torch.device, torch.dtype | None]:
    owners = [fn, getattr(fn, "__self__", None)]
    tensors = tensors_in((args, kwargs, owners), parameters=True)
    placed = [tensor.device for tensor in tensors if tensor.device.type != "cpu"]
    device = placed[0] if placed else torch.device("cpu")
    if device.type == "meta":
        raise SpecError.at(
            "benchmark()",
            "cannot time a call on meta tensors",
            hint="use f.estimate(...) for its cost",
        )
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    floating = [tensor.dtype for tensor in tensors if tensor.is_floating_point()]
    dtypes = floating or [tensor.dtype for tensor in tensors]
    return device, dtypes[0] if dtypes else None


def _autocast_dtype(device: torch.device, dtype: torch.dtype | None) -> torch.dtype | None:
    """The dtype autocast runs a floating ``dtype`` call in on ``device``, or None when off."""
    if dtype is None or not dtype.is_floating_point or device.type not in ("cpu", "cuda"):
        return None
    if not torch.is_autocast_enabled(device.type):
        return None
    return torch.get_autocast_dtype(device.type)


@contextlib.contextmanager
def _progress_bar(label: str, enabled: bool) -> Iterator[Progress | None]:
    """A tqdm bar on stderr, drawn once runs have gone on for ``PROGRESS_AFTER`` seconds."""
    stream = sys.stderr
    if not enabled or stream is None or not stream.isatty():
        yield None
        return
    from tqdm import tqdm

    bar = tqdm(desc=label, unit="run", delay=PROGRESS_AFTER, file=stream, leave=False)
    try:
        yield bar
    finally:
        bar.close()


def _clock_for(device: torch.device, flush_l2: bool | None) -> Clock:
    if device.type == "cuda":
        return CudaClock.for_device(device, flush_l2=flush_l2 is not False)
    flush = None
    if flush_l2:
        cache_bytes = last_level_cache_bytes() or 64 << 20
        buffer = torch.empty(2 * cache_bytes, dtype=torch.int8, device=device)
        flush = buffer.zero_
    sync = torch.mps.synchronize if device.type == "mps" else None
    return HostClock(flush=flush, synchronize=sync)


def benchmark(
    fn: Callable[..., object],
    /,
    *args: Any,
    warmup: int = 2,
    warmup_time: float = 0.05,
    repeat: int = 10,
    min_time: float = 0.2,
    flush_l2: bool | None = None,
    peak: float | None = None,
    progress: bool = True,
    **kwargs: Any,
) -> Measurement:
    """Time ``fn(*args, **kwargs)`` and relate it to its cost and the device's peaks.

    The call's contract (shapes, dtypes, one device) is checked on metadata first, so a bad
    call raises before any warm-up, allocation or kernel. Warm-up: at least ``warmup`` runs
    and ``warmup_time`` seconds. Then at least ``repeat`` timed runs, more to fill
    ``min_time`` seconds. ``flush_l2`` (default: on for CUDA, off for CPU) overwrites a buffer
    of twice the cache size before each run, untimed. ``peak`` (FLOP/s) overrides
    ``TYPEDFLOPS_PEAK_FLOPS`` and the device table. CUDA runs are timed by events, host runs
    by ``time.perf_counter`` at torch's current thread count (recorded as ``threads``). The
    timed call includes the decorator's contract check (a few µs). Under ``torch.autocast``
    the peak is the autocast dtype's and the bytes of floating tensors are counted at its
    size. Runs that last over a second show a progress bar on stderr (a terminal only;
    ``progress=False`` turns it off).
    """
    if warmup < 0 or repeat < 1 or warmup_time < 0 or min_time < 0:
        raise SpecError.at(
            "benchmark()",
            "need warmup >= 0, repeat >= 1, warmup_time >= 0 and min_time >= 0",
            hint=f"got warmup={warmup}, repeat={repeat}, warmup_time={warmup_time}, "
            f"min_time={min_time}",
        )
    if peak is not None and not peak > 0:
        raise SpecError.at(None, f"peak= must be a positive number of FLOP/s, got {peak!r}")
    cost = _call_cost(fn, args, kwargs)  # the contract first: nothing has run yet
    device, dtype = _placement(fn, args, kwargs)
    bytes_moved = int(cost.bytes_read) + int(cost.bytes_written)
    autocast = _autocast_dtype(device, dtype)
    if autocast is not None and dtype is not None:
        # the dry run does not see autocast: its floating bytes are at the tensors' dtype
        bytes_moved = bytes_moved * autocast.itemsize // dtype.itemsize
        dtype = autocast
    spec = devices.device_spec(device)
    source = "peak="
    if peak is None and dtype is not None:
        peak, source = devices.peak_source(dtype, spec if spec is not None else device)
        if peak is None:
            devices.peak_flops(dtype, device)  # None, with a warning saying why
    clock = _clock_for(device, flush_l2)
    # The contract was checked above: the timed runs are the body alone (checks off), and
    # they are not recorded as calls of their own.
    with (
        disabled(),
        suspended(current_mode()),
        no_frame(),
        _progress_bar(display_name(fn), progress) as bar,
    ):
        times = collect_times(
            clock,
            lambda: fn(*args, **kwargs),
            warmup=warmup,
            warmup_time=warmup_time,
            repeat=repeat,
            min_time=min_time,
            progress=bar,
        )
    measurement = measurement_from(
        times,
        flops=int(cost.flops),
        bytes_moved=bytes_moved,
        device=str(device),
        dtype=dtype,
        threads=None if device.type == "cuda" else torch.get_num_threads(),
        peak=peak,
        bandwidth=None if spec is None else spec.bandwidth,
        peak_source=source,
    )
    note_measured(getattr(cost, "function", None) or display_name(fn), cost, measurement)
    return measurement
