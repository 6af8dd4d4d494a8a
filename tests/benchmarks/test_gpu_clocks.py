"""benchmarks/gpu_clocks.py: the sampler around a timed call, and NVML where the machine has a GPU."""

import itertools
import threading
import time

import pytest
import torch


def test_sampled_returns_the_calls_result_and_the_median_of_its_readings(clocks):
    counter = itertools.count()

    def read():  # a card whose clock climbs 10 MHz a reading, power 600 W and up
        n = next(counter)
        return 1500 + 10 * n, 600.0 + n

    result, readings = clocks.sampled(lambda: time.sleep(0.2) or "done", read, interval=0.005)
    assert result == "done"
    n = readings["samples"]
    assert n >= 5  # 200 ms at a 5 ms interval, on a busy CI core
    assert readings["sm_mhz"] == 1500 + 10 * (n // 2)
    assert readings["power_w"] == 600.0 + n // 2


def test_sampled_gives_no_readings_without_a_reader_or_a_reading(clocks):
    assert clocks.sampled(lambda: 7, None) == (7, None)
    assert clocks.sampled(lambda: time.sleep(0.05) or 8, lambda: None, interval=0.005) == (8, None)


def test_sampled_stops_its_thread_when_the_call_raises(clocks):
    before = {thread.ident for thread in threading.enumerate()}
    with pytest.raises(ZeroDivisionError):
        clocks.sampled(lambda: 1 / 0, lambda: (1980, 100.0), interval=0.005)
    assert {thread.ident for thread in threading.enumerate()} <= before


def test_nvml_reader_is_none_for_a_bus_id_nvml_does_not_know(clocks):
    assert clocks.nvml_reader("0000ffff:ff:1f.0") is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_current_cuda_device_reads_a_plausible_clock_and_power(clocks):
    read = clocks.torch_device_reader()
    assert read is not None
    mhz, watts = read()
    assert 100 <= mhz <= 3000 and 1 <= watts <= 1500
