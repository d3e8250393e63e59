"""Shared fixtures (the SPEC's ``linear`` function, a clean torch.compile cache) and the
``slow`` marker: ``pytest -m "not slow"`` runs the contract and cost core; ``pytest`` runs
everything."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from jaxtyping import Float
from torch import Tensor

from typedflops import TypedFunction, typed_flops


# The first op under FakeTensorMode (dry runs) imports torch._dynamo and friends. Do it
# here, once: pytester's in-process runs drop modules imported inside them, and torch's
# operator libraries cannot be registered twice.
def pytest_configure(config: pytest.Config) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        torch.empty(2, 2) @ torch.empty(2, 2)


#: The contract and cost core, by folder (tests/<folder>, src/typedflops/<folder>): the
#: tests ``pytest -m "not slow"`` runs. Everything else is marked ``slow``.
CORE_FOLDERS = frozenset({"syntax", "contract", "einops", "cost", "devices"})
#: Top-level test files and modules of the core.
CORE_FILES = frozenset(
    {"test_text.py", "test_public_api.py", "test_import_graph.py", "text.py", "errors.py"}
)
#: Files in core folders that are slow all the same: torch.compile, real models, every
#: op of torch compared with FlopCounterMode.
SLOW_FILES = frozenset({"test_compile.py", "test_real_models.py"})
#: Tests in core files that are slow all the same (subprocesses, torch.compile, models on
#: meta, models rebuilt at many sizes, every pattern compared with einops): "file::test"
#: prefixes.
SLOW_TESTS = (
    "test_decorator.py::test_environment_variable_switches_checks_off",
    "test_decorator.py::test_torch_compile",
    "test_pickling.py::test_a_spawned_worker_pool",
    "test_target_kernels.py::test_a_model_on_meta",
    "test_target_kernels.py::test_a_plan_for_a",
    "test_syntax_patterns.py::test_einsum_verdicts_match_einops",
    "test_syntax_patterns.py::test_transform_verdicts_match_einops",
    "test_syntax_patterns.py::test_pack_verdicts_match_einops",
    "test_syntax_patterns.py::test_typedflops_ops_raise_the_core_reason",
    "test_syntax_patterns.py::test_what_the_core_accepts_einops_recipe_accepts",
    "test_syntax_dims.py::test_dim_strings_read_as_jaxtyping_reads_them",
    "test_ops.py::test_compiled_fullgraph",
    "test_size_dependent_flow.py::test_several_loops_predict_other_sizes",
    "test_deep_estimates.py::test_a_stack_of_two_thousand_blocks",
    "test_recurrent_dry_runs.py::test_estimate_of_a_module_holding_a_recurrent_layer",
    "test_size_dependent_flow.py::test_a_branch_on_a_modules_own_size",
    "test_rebuilt_sizes.py::test_kept_arguments_and_a_loop_over_blocks",
    "test_grammar_models.py::test_every_exact_formula_of",
    "test_rebuilt_sizes.py::test_typed_transformer_lm_at_several_configs",
    "test_rebuilt_sizes.py::test_nanogpt_formula_is_exact_in_its_config",
    "test_rebuilt_sizes.py::test_a_count_of_blocks_with_work_around_them",
    "test_size_one.py::test_torch_saving_other_storages_at_batch_one",
)
_ROOT = Path(__file__).resolve().parent.parent


def is_core(path: Path) -> bool:
    """Whether a test file (or a module whose doctests run) belongs to the fast core."""
    if path.name in SLOW_FILES:
        return False
    try:
        parts = path.resolve().relative_to(_ROOT).parts
    except ValueError:  # (a test run by pytester, in a directory of its own)
        return False
    inside = parts[2:] if parts[:2] == ("src", "typedflops") else parts[1:]
    if len(inside) == 1:
        return inside[0] in CORE_FILES
    return inside[0] in CORE_FOLDERS


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test outside the core ``slow``."""
    for item in items:
        if not is_core(item.path) or f"{item.path.name}::{item.name}".startswith(SLOW_TESTS):
            item.add_marker(pytest.mark.slow)


@typed_flops
def linear(
    x: Float[Tensor, "batch d_in"], w: Float[Tensor, "d_in d_out"]
) -> Float[Tensor, "batch d_out"]:
    return x @ w


@pytest.fixture(name="linear")
def linear_fixture() -> TypedFunction[[Tensor, Tensor], Tensor]:
    """``linear(x: "batch d_in", w: "d_in d_out") -> "batch d_out"``, the SPEC's example."""
    return linear


@pytest.fixture
def fresh_dynamo() -> Iterator[None]:
    """Reset torch.compile's caches before and after a test, so graphs never leak between tests."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
