"""Timed execution: warm-up and repeat logic on a fake clock, statistics, MFU, the roofline."""

from __future__ import annotations

import contextlib
import io
import json
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from jaxtyping import Float
from torch import Tensor

from typedflops import devices
from typedflops.errors import ContractError, SpecError
from typedflops.roofline import Roofline, attainable, bound, ridge_point
from typedflops.timing import bench
from typedflops.timing.bench import CudaClock, FakeClock, HostClock, collect_times, measurement_from


@dataclass(frozen=True)
class FakeCost:
    flops: int
    bytes_read: int = 0
    bytes_written: int = 0


class Counter:
    """A body that counts its runs."""

    def __init__(self) -> None:
        self.runs = 0

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self.runs += 1


def test_warmup_by_count_then_repeat() -> None:
    clock, body = FakeClock([1.0]), Counter()
    times = collect_times(clock, body, warmup=3, warmup_time=0.0, repeat=5, min_time=0.0)
    assert body.runs == 8 and len(times) == 5


def test_warmup_by_time() -> None:
    clock, body = FakeClock([0.25]), Counter()
    collect_times(clock, body, warmup=1, warmup_time=1.0, repeat=2, min_time=0.0)
    assert body.runs == 4 + 2


def test_min_time_sets_the_number_of_runs_from_the_fastest_warmup() -> None:
    clock, body = FakeClock([0.5, 0.01]), Counter()
    times = collect_times(clock, body, warmup=2, warmup_time=0.0, repeat=3, min_time=0.5)
    assert len(times) == 50 and body.runs == 52


def test_runs_are_capped() -> None:
    clock = FakeClock([0.0])
    times = collect_times(clock, Counter(), warmup=0, warmup_time=1.0, repeat=1, min_time=1.0)
    assert len(times) == bench.MAX_RUNS
    assert clock.runs == 2 * bench.MAX_RUNS  # warm-up by time stops at the cap too


def test_statistics_match_torch_quantiles() -> None:
    times = [3e-3, 1e-3, 2e-3, 4e-3, 10e-3, 2.5e-3]
    m = measurement_from(times, flops=1000, bytes_moved=0, device="cpu")
    t = torch.tensor(times, dtype=torch.float64)
    assert m.median == pytest.approx(float(t.quantile(0.5)))
    assert m.iqr == pytest.approx(float(t.quantile(0.75) - t.quantile(0.25)))
    assert m.min == 1e-3 and m.times == tuple(times)
    assert m.flop_per_sec == pytest.approx(1000 / m.median)


def test_noisy_flag() -> None:
    quiet = measurement_from([1.0, 1.0, 1.01, 1.02, 5.0], flops=1, bytes_moved=1, device="cpu")
    noisy = measurement_from([1.0, 1.3, 1.0, 1.4, 0.9], flops=1, bytes_moved=1, device="cpu")
    assert not quiet.noisy and noisy.noisy
    assert quiet.noise == "" and noisy.noise == "IQR 300 ms is 30.0% of the median (over 10.0%)"
    assert noisy.table().splitlines()[-1] == (
        "noisy   IQR 300 ms is 30.0% of the median (over 10.0%)"
    )
    assert "(noisy)" in str(noisy)
    assert "noisy" not in str(quiet) and "noisy" not in quiet.table()


def test_a_median_far_above_the_minimum_is_noise() -> None:
    # one fast run and a tight cluster of slow ones: the IQR alone sees nothing
    times = [2.74e-3, *[0.748] * 9]
    m = measurement_from(times, flops=1, bytes_moved=1, device="cpu")
    assert m.iqr == 0.0 and m.noisy
    assert m.noise == "median 748 ms is 273x the minimum 2.74 ms"


def test_both_reasons_are_given() -> None:
    m = measurement_from([1.0, 2.0, 2.0, 3.0, 4.0], flops=1, bytes_moved=1, device="cpu")
    assert m.noise == (
        "IQR 1.00 s is 50.0% of the median (over 10.0%); median 2.00 s is 2x the minimum 1.00 s"
    )


@pytest.mark.parametrize("slowest_over_min", [1.49, 1.5])
def test_the_median_threshold_is_1_5(slowest_over_min: float) -> None:
    times = [1.0, slowest_over_min, slowest_over_min]
    m = measurement_from(times, flops=1, bytes_moved=1, device="cpu")
    assert m.noise.startswith("IQR")  # the IQR flags it, the ratio does not reach 1.5x
    assert "minimum" not in m.noise


def test_mfu_and_roofline_fields() -> None:
    m = measurement_from(
        [2.0],
        flops=100,
        bytes_moved=50,
        device="cuda:0",
        dtype=torch.bfloat16,
        peak=100.0,
        bandwidth=10.0,
    )
    assert m.mfu == pytest.approx(0.5)
    assert (m.intensity, m.ridge, m.bound) == (2.0, 10.0, "memory")
    assert m.bytes_per_sec == 25.0
    assert m.attainable_flop_per_sec == 20.0
    compute = measurement_from([1.0], flops=10, bytes_moved=1, device="cpu", peak=20.0, bandwidth=4)
    assert compute.bound == "compute"


def test_unknown_roofline_gives_none() -> None:
    m = measurement_from([1.0], flops=10, bytes_moved=0, device="cpu", peak=20.0)
    assert (m.mfu, m.intensity, m.ridge, m.bound) == (0.5, None, None, None)
    m = measurement_from([1.0], flops=10, bytes_moved=5, device="cpu")
    assert (m.peak_flop_per_sec, m.mfu, m.intensity, m.ridge) == (None, None, 2.0, None)


def test_mfu_above_one_is_an_error() -> None:
    with pytest.raises(SpecError, match=r"MFU 2.00 > 1.*peak=") as info:
        measurement_from([1.0], flops=200, bytes_moved=0, device="cpu", peak=100.0)
    assert isinstance(info.value, ValueError)


def test_str_is_one_line_table_is_labelled_lines_and_to_dict_is_json() -> None:
    m = measurement_from(
        [1e-3, 1.1e-3, 1.2e-3],
        flops=2_000_000_000,
        bytes_moved=1_000_000,
        device="cpu",
        dtype=torch.float32,
        threads=2,
        peak=1e13,
        bandwidth=1e11,
    )
    assert str(m) == "1.10 ms (3 runs, IQR 9.09%) on cpu float32: 1.82 TFLOP/s, MFU 18.2%, 909 MB/s"
    assert m.table().splitlines() == [
        "median  1.10 ms (min 1.00 ms, IQR 9.09%, 3 runs) on cpu, float32, 2 threads",
        "work    2.00 GFLOP -> 1.82 TFLOP/s",
        "MFU     18.2% of 10.0 TFLOP/s",
        "memory  1.00 MB -> 909 MB/s, 2e+03 FLOP/B (ridge 100: compute-bound)",
    ]
    unknown = measurement_from([1e-3], flops=2, bytes_moved=1, device="cpu")
    assert "MFU n/a" in str(unknown) and "\n" not in str(unknown)
    assert unknown.table().splitlines()[2] == (
        "MFU     n/a: no peak FLOP/s for this device (pass peak= or set TYPEDFLOPS_PEAK_FLOPS)"
    )
    data = json.loads(json.dumps(m.to_dict()))
    assert data["dtype"] == "float32" and data["times"] == [1e-3, 1.1e-3, 1.2e-3]
    assert set(data) == {
        "times", "median", "min", "iqr", "noisy", "noise", "flops", "flop_per_sec",
        "peak_flop_per_sec", "mfu", "bytes", "bytes_per_sec", "intensity", "ridge", "bound",
        "device", "dtype", "threads",
    }  # fmt: skip


def test_host_clock_flushes_outside_the_timed_region() -> None:
    events: list[str] = []
    ticks = iter(range(100))

    def timer() -> float:
        events.append("tick")
        return float(next(ticks))

    clock = HostClock(timer=timer, flush=lambda: events.append("flush"))
    assert clock.time(lambda: events.append("run"), 2) == [1.0, 1.0]
    assert events == ["flush", "tick", "run", "tick"] * 2


class FakeEvent:
    def __init__(self, log: list[str], clock: list[float]) -> None:
        self.log, self.clock, self.at = log, clock, 0.0

    def record(self) -> None:
        self.log.append("record")
        self.at = self.clock[0]

    def elapsed_time(self, end_event: Any, /) -> float:
        return float((end_event.at - self.at) * 1e3)  # milliseconds, as CUDA events


def test_cuda_clock_sequence_without_a_gpu() -> None:
    log: list[str] = []
    device_time = [0.0]

    def run() -> None:
        log.append("run")
        device_time[0] += 0.002

    def flush() -> None:
        log.append("flush")
        device_time[0] += 1.0  # a flush is slow, and must not be timed

    @contextlib.contextmanager
    def guard() -> Iterator[None]:
        log.append("enter")
        yield
        log.append("exit")

    clock = CudaClock(
        event=lambda: FakeEvent(log, device_time),
        synchronize=lambda: log.append("sync"),
        flush=flush,
        guard=guard,
    )
    assert clock.time(run, 3) == pytest.approx([0.002] * 3)
    body = ["flush", "record", "run", "record"] * 3
    assert log == ["enter", "sync", *body, "sync", "exit"]


def test_roofline_helpers() -> None:
    assert ridge_point(989.4e12, 3.35e12) == pytest.approx(295.3, abs=0.1)
    assert attainable(1.0, 100.0, 10.0) == 10.0 and attainable(100.0, 100.0, 10.0) == 100.0
    assert bound(9.99, 10.0) == "memory" and bound(10.0, 10.0) == "compute"
    assert Roofline(100.0, 10.0).ridge == 10.0
    with pytest.raises(SpecError, match=r"needs a positive peak and bandwidth, got 0\.0 FLOP/s"):
        ridge_point(0.0, 1.0)


# --- benchmark() ----------------------------------------------------------------------------


@pytest.fixture
def fake_cost(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``call_cost`` replaced by one that logs and returns the cost of an n x n matmul."""
    log: list[str] = []

    def call_cost(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> FakeCost:
        log.append("call_cost")
        n = args[0].shape[0]
        return FakeCost(flops=2 * n**3, bytes_read=2 * 4 * n * n, bytes_written=4 * n * n)

    monkeypatch.setattr(bench, "_call_cost", call_cost)
    return log


def test_bad_call_raises_before_anything_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    body = Counter()

    def refuse(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> FakeCost:
        raise ContractError("bad call")

    def no_clock(*args: Any) -> None:
        raise AssertionError("a clock (and its flush buffer) was made before the contract check")

    monkeypatch.setattr(bench, "_call_cost", refuse)
    monkeypatch.setattr(bench, "_clock_for", no_clock)
    with pytest.raises(ContractError, match="bad call"):
        bench.benchmark(body, torch.ones(2, 2))
    assert body.runs == 0


def test_bad_options_raise_before_anything_runs(fake_cost: list[str]) -> None:
    body = Counter()
    with pytest.raises(ValueError, match="repeat >= 1"):
        bench.benchmark(body, torch.ones(2, 2), repeat=0)
    with pytest.raises(SpecError, match="peak="):
        bench.benchmark(body, torch.ones(2, 2), peak=-1.0)
    assert body.runs == 0 and fake_cost == []


def test_benchmark_counts_warmup_and_repeat(fake_cost: list[str]) -> None:
    body = Counter()
    x = torch.ones(4, 4)
    m = bench.benchmark(body, x, x, warmup=3, warmup_time=0.0, repeat=7, min_time=0.0, peak=1e20)
    assert fake_cost == ["call_cost"]
    assert body.runs == 3 + 7 and len(m.times) == 7


@pytest.mark.parametrize(
    ("seconds", "noisy"), [([1.0, 1.01, 0.99], False), ([1.0, 1.5, 0.7], True)]
)
def test_benchmark_flags_noise_from_its_clock(
    fake_cost: list[str], monkeypatch: pytest.MonkeyPatch, seconds: list[float], noisy: bool
) -> None:
    monkeypatch.setattr(bench, "_clock_for", lambda device, flush: FakeClock(seconds))
    x = torch.ones(8, 8)
    m = bench.benchmark(
        torch.matmul, x, x, warmup=0, warmup_time=0.0, repeat=30, min_time=0.0, peak=1e20
    )
    assert m.noisy is noisy and m.median == pytest.approx(1.0, abs=0.01)


def test_cpu_matmul_gives_sensible_fields(
    fake_cost: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(devices, "_warned", set())  # each missing peak is said once a process
    x = torch.randn(128, 128)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = bench.benchmark(torch.matmul, x, x, min_time=0.01)
    said = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    if m.peak_flop_per_sec is None:  # no CPU peak here: the benchmark says so once, and why
        assert len(said) == 1 and said[0].startswith("typedflops: no peak FLOP/s: cpu"), said
    else:
        assert said == []
    assert m.device == "cpu" and m.dtype == torch.float32
    assert m.threads == torch.get_num_threads()
    assert m.flops == 2 * 128**3 and m.bytes == 3 * 4 * 128 * 128
    assert 0 < m.min <= m.median and m.iqr >= 0 and len(m.times) >= 10
    assert m.flop_per_sec == pytest.approx(m.flops / m.median)
    assert m.intensity == pytest.approx(128 / 6)
    if m.peak_flop_per_sec is not None:  # the CPU estimate, where the platform has one
        assert m.mfu is not None and 0 < m.mfu <= 1
        assert m.ridge is not None and m.bound in ("memory", "compute")


def test_peak_override_beats_env(fake_cost: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.randn(16, 16)
    monkeypatch.setenv(devices.ENV_PEAK_FLOPS, "float32=1e18")
    assert bench.benchmark(torch.matmul, x, x, min_time=0.0).peak_flop_per_sec == 1e18
    m = bench.benchmark(torch.matmul, x, x, min_time=0.0, peak=2e18)
    assert m.peak_flop_per_sec == 2e18


def test_a_peak_that_is_too_low_is_an_error(fake_cost: list[str]) -> None:
    x = torch.randn(64, 64)
    with pytest.raises(SpecError, match=r"MFU .* > 1"):
        bench.benchmark(torch.matmul, x, x, min_time=0.0, peak=1.0)


def test_meta_tensors_cannot_be_timed(fake_cost: list[str]) -> None:
    x = torch.empty(4, 4, device="meta")
    with pytest.raises(ValueError, match="estimate"):
        bench.benchmark(torch.matmul, x, x)


def test_cuda_path_without_a_gpu(fake_cost: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Device, peak (table, by the name torch reports), roofline and clock on a fake CUDA."""
    clock = FakeClock([1e-3])
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(bench, "_placement", lambda *a: (torch.device("cuda", 0), torch.bfloat16))
    monkeypatch.setattr(bench, "_clock_for", lambda device, flush: clock)
    x = torch.ones(1024, 1024)  # the fake cost reads its shape; nothing runs on a GPU
    m = bench.benchmark(torch.matmul, x, x, warmup=1, warmup_time=0.0, repeat=4, min_time=0.0)
    assert (m.device, m.dtype, m.threads) == ("cuda:0", torch.bfloat16, None)
    assert m.peak_flop_per_sec == pytest.approx(989.4e12)
    assert m.ridge == pytest.approx(989.4 / 3.35)
    assert m.mfu == pytest.approx(2 * 1024**3 / 1e-3 / 989.4e12)
    assert m.bound == "memory"  # intensity 1024/6 < ridge 295
    assert clock.runs == 5


# --- end to end, with a real @typed_flops function ---------------------------------------------


def test_typed_function_end_to_end() -> None:
    from torch._subclasses.fake_tensor import FakeTensor

    from typedflops import typed_flops
    from typedflops.errors import ShapeError

    runs: list[str] = []  # each run: the cost is a dry run on fake tensors

    @typed_flops
    def matmul(x: Float[Tensor, "m k"], w: Float[Tensor, "k n"]) -> Float[Tensor, "m n"]:
        runs.append("fake" if isinstance(x, FakeTensor) else x.device.type)
        return x @ w

    x, w = torch.randn(64, 32), torch.randn(32, 16)
    matmul.estimate(m=64, k=32, n=16)
    runs.clear()
    with pytest.raises(ShapeError):
        matmul.benchmark(x, torch.randn(31, 16))
    assert runs == []  # not even the dry run
    m = matmul.benchmark(x, w, warmup=2, warmup_time=0.0, repeat=5, min_time=0.0, peak=1e15)
    assert m.flops == 2 * 64 * 32 * 16
    assert runs.count("cpu") == 2 + 5 and len(m.times) == 5
    assert m.bytes == 4 * (64 * 32 + 32 * 16 + 64 * 16)


# --- progress and autocast -------------------------------------------------------------------


class FakeBar:
    """Records what ``collect_times`` tells a progress bar."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []
        self._total: float | None = None

    @property
    def total(self) -> float | None:
        return self._total

    @total.setter
    def total(self, value: float | None) -> None:
        self.events.append(("total", value))
        self._total = value

    def update(self, n: float | None = 1) -> bool | None:
        self.events.append(("update", n))
        return None


def test_progress_counts_warmup_then_timed_runs_in_chunks() -> None:
    clock, bar = FakeClock([0.04]), FakeBar()  # 40 ms a run: chunks of 3 runs (~0.1 s)
    times = collect_times(
        clock, Counter(), warmup=2, warmup_time=0.0, repeat=10, min_time=0.0, progress=bar
    )
    assert len(times) == 10 and clock.runs == 12
    assert bar.events == [
        ("update", 1),
        ("update", 1),
        ("total", 12),
        ("update", 3),
        ("update", 3),
        ("update", 3),
        ("update", 1),
    ]


def test_progress_does_not_change_the_times() -> None:
    seconds = [0.01, 0.02, 0.03, 0.05]
    plain = collect_times(FakeClock(seconds), Counter(), warmup=1, warmup_time=0.0, repeat=20,
                          min_time=0.0)  # fmt: skip
    shown = collect_times(FakeClock(seconds), Counter(), warmup=1, warmup_time=0.0, repeat=20,
                          min_time=0.0, progress=FakeBar())  # fmt: skip
    assert shown == plain


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_only_on_a_terminal_and_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    from tqdm import tqdm

    monkeypatch.setattr(sys, "stderr", io.StringIO())
    with bench._progress_bar("f", True) as bar:
        assert bar is None  # not a terminal
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with bench._progress_bar("f", False) as bar:
        assert bar is None  # progress=False
    with bench._progress_bar("f", True) as bar:
        assert isinstance(bar, tqdm)
        assert bar.desc == "f" and bar.delay == bench.PROGRESS_AFTER
    assert terminal.getvalue() == ""  # closed before its delay: nothing was drawn


def test_benchmark_without_progress(fake_cost: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr(bench, "_clock_for", lambda device, flush: FakeClock([2.0]))
    x = torch.ones(8, 8)
    m = bench.benchmark(torch.matmul, x, x, repeat=3, min_time=0.0, peak=1e20, progress=False)
    assert len(m.times) == 3 and terminal.getvalue() == ""


def test_autocast_sets_the_peak_dtype_and_the_bytes(
    fake_cost: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(devices.ENV_PEAK_FLOPS, "float32=1e18,bfloat16=4e18")
    x = torch.randn(16, 16)
    plain = bench.benchmark(torch.matmul, x, x, min_time=0.0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = bench.benchmark(torch.matmul, x, x, min_time=0.0)
    assert (plain.dtype, mixed.dtype) == (torch.float32, torch.bfloat16)
    assert (plain.peak_flop_per_sec, mixed.peak_flop_per_sec) == (1e18, 4e18)
    assert plain.bytes == 3 * 4 * 16 * 16 and mixed.bytes == 3 * 2 * 16 * 16
    assert mixed.flops == plain.flops


def test_a_missing_peak_is_said_at_the_callers_line(
    fake_cost: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(devices, "_warned", set())
    monkeypatch.delenv(devices.ENV_PEAK_FLOPS, raising=False)
    monkeypatch.setattr(devices, "_spec_and_reason", lambda device: (None, "no figures here"))
    x = torch.randn(8, 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        here = sys._getframe().f_lineno + 1
        m = bench.benchmark(torch.matmul, x, x, min_time=0.0)
    assert m.mfu is None
    (warning,) = caught
    assert str(warning.message) == "typedflops: no peak FLOP/s: no figures here"
    assert (warning.filename, warning.lineno) == (__file__, here)
