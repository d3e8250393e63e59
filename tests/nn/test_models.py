"""Typed models and memory accounting."""

from __future__ import annotations

import pytest
import torch

from typedflops import ShapeError, SpecError
from typedflops.memory import model_memory, nbytes, same_storage
from typedflops.nn import Linear, TwoLayerMLP


def test_wrong_input_width_names_the_module_before_any_kernel() -> None:
    model = TwoLayerMLP(256, 256, 64)
    with pytest.raises(ShapeError) as caught:
        model(torch.ones(8, 100))
    lines = str(caught.value).splitlines()
    assert lines[0] == (
        "TwoLayerMLP.forward(): argument 'x' has shape (8, 100) but its annotation "
        '"*batch d_in" needs d_in=256'
    )
    assert lines[1].strip() == "d_in=256 was bound by module TwoLayerMLP"
    assert caught.value.dim == "d_in" and caught.value.expected == 256
    assert caught.value.actual == 100


def test_models_accept_any_batch_shape() -> None:
    model = TwoLayerMLP(8, 6, 4)
    assert model(torch.ones(2, 3, 8)).shape == (2, 3, 4)
    assert model(torch.ones(8)).shape == (4,)
    assert Linear(8, 4, bias=True)(torch.ones(5, 8)).shape == (5, 4)


def test_param_count_and_gpu_size_estimate_on_meta() -> None:
    d, k = 32768, 8192
    model = TwoLayerMLP(d, d, k, device="meta")
    assert model.param_count == d * d + d * k
    cost = model.estimate(batch=16384)
    assert cost.flops == 43_980_465_111_040  # 4.398e13, the lecture's forward
    assert cost.dims == {"d_in": d, "d_hidden": d, "d_out": k, "batch": 16384}


def test_estimate_follows_requires_grad_of_parameters() -> None:
    model = TwoLayerMLP(16, 16, 4)
    model.fc1.weight.requires_grad_(False)
    cost = model.estimate(batch=8)
    # Only w2 needs a gradient, and h1 needs none: one matmul in backward.
    assert cost.backward_flops == 2 * 8 * 16 * 4


def test_estimate_in_another_dtype_changes_bytes_not_flops() -> None:
    model = Linear(64, 32)
    f32, bf16 = model.estimate(batch=8), model.estimate(batch=8, dtype=torch.bfloat16)
    assert f32.flops == bf16.flops
    assert f32.bytes == 2 * bf16.bytes
    assert model.weight.dtype == torch.float32


def test_linear_with_bias_counts_the_add() -> None:
    cost = Linear(16, 4, bias=True).estimate(batch=8)
    assert cost.flops == 2 * 8 * 16 * 4 + 8 * 4


def test_memory_helpers() -> None:
    x = torch.zeros(4, 8, dtype=torch.bfloat16)
    assert nbytes(x) == 64
    assert same_storage(x, x[1:]) and not same_storage(x, x.clone())
    sizes = model_memory(TwoLayerMLP(16, 16, 4), optimizer="adamw")
    params = (16 * 16 + 16 * 4) * 4
    assert sizes == {
        "parameters": params,
        "gradients": params,
        "optimizer": 2 * params,
        "total": 4 * params,
    }
    assert model_memory(Linear(4, 4), optimizer=None)["optimizer"] == 0
    with pytest.raises(SpecError) as info:
        model_memory(Linear(4, 4), optimizer="adamax")
    known = "adagrad, adam, adamw, momentum, rmsprop, sgd"
    assert str(info.value) == f"model_memory(): unknown optimizer 'adamax'; known: {known}"


def test_benchmark_of_a_module_checks_its_contract_and_device_first() -> None:
    from typedflops import DeviceError, benchmark

    with pytest.raises(ShapeError, match="needs d_in=8"):
        benchmark(TwoLayerMLP(8, 8, 4), torch.ones(2, 7))
    with pytest.raises(DeviceError, match="module TwoLayerMLP's parameters are on meta"):
        benchmark(TwoLayerMLP(8, 8, 4, device="meta"), torch.ones(2, 8))
    measured = benchmark(TwoLayerMLP(8, 8, 4), torch.ones(2, 8), repeat=3, min_time=0.0, peak=1e12)
    assert measured.flops == 2 * 2 * 8 * (8 + 4)
