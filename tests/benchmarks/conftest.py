"""The benchmark scripts under test, each loaded once per module as a plain module (benchmarks/ is no package)."""

import importlib.util
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"{name}_benchmark", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    """benchmarks/attention.py"""
    return _load("attention")


@pytest.fixture(scope="module")
def ab():
    """benchmarks/kernel_ab.py"""
    return _load("kernel_ab")


@pytest.fixture(scope="module")
def few():
    """benchmarks/few_queries.py"""
    return _load("few_queries")


@pytest.fixture(scope="module")
def quant():
    """benchmarks/quantize.py"""
    return _load("quantize")


@pytest.fixture(scope="module")
def profile():
    """benchmarks/profile_kernel.py"""
    return _load("profile_kernel")


@pytest.fixture(scope="module")
def window_bench():
    """benchmarks/window.py"""
    return _load("window")


@pytest.fixture(scope="module")
def host():
    """benchmarks/host_overhead.py"""
    return _load("host_overhead")


@pytest.fixture(scope="module")
def stalls():
    """benchmarks/stall_samples.py"""
    return _load("stall_samples")


@pytest.fixture(scope="module")
def sass():
    """benchmarks/sass_diff.py"""
    return _load("sass_diff")


@pytest.fixture(scope="module")
def moves():
    """benchmarks/max_moves.py"""
    return _load("max_moves")


@pytest.fixture(scope="module")
def accuracy():
    """benchmarks/fp8_accuracy.py"""
    return _load("fp8_accuracy")


@pytest.fixture(scope="module")
def clocks():
    """benchmarks/gpu_clocks.py"""
    return _load("gpu_clocks")


@pytest.fixture(scope="module")
def anatomy_bench():
    """benchmarks/call_anatomy.py"""
    return _load("call_anatomy")


@pytest.fixture(scope="module")
def timeline_bench():
    """benchmarks/timeline.py"""
    return _load("timeline")
