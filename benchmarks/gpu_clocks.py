"""The SM clock and board power of a GPU while a benchmark times something on it, read through NVML.

Hopper cards run attention at their power limit, where the SM clock falls from 1980 MHz to 1600-1860 (NOTES,
session 8): two runs on two cards, or two kernels with different energy per FLOP, can differ by their clocks
alone. A benchmark row that carries the clock it ran at tells a kernel's change from the card's.

NVML is the driver's own library (libnvidia-ml.so.1), loaded with ctypes, so no Python package is needed; where it
is missing (a CPU machine) the readings are None and the benchmark goes on.
"""

import ctypes
import threading

NVML_CLOCK_SM = 1


def nvml_reader(pci_bus_id):
    """A function returning (SM clock in MHz, board power in W) of the GPU at `pci_bus_id` (NVML's form,
    "00000000:1B:00.0"), or None where NVML cannot be loaded or does not know it."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    handle = ctypes.c_void_p()
    if nvml.nvmlInit_v2() != 0:
        return None
    if nvml.nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id.encode(), ctypes.byref(handle)) != 0:
        return None
    mhz, milliwatts = ctypes.c_uint(), ctypes.c_uint()

    def read():
        if nvml.nvmlDeviceGetClockInfo(handle, NVML_CLOCK_SM, ctypes.byref(mhz)) != 0:
            return None
        if nvml.nvmlDeviceGetPowerUsage(handle, ctypes.byref(milliwatts)) != 0:
            return None
        return mhz.value, milliwatts.value / 1000

    return read


def torch_device_reader(device=None):
    """nvml_reader for a torch CUDA device (the current one when None), found by its PCI address."""
    import torch

    props = torch.cuda.get_device_properties(device)
    bus_id = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    return nvml_reader(bus_id)


def sampled(fn, read, interval=0.01):
    """Run fn() while a thread calls read() every `interval` seconds; returns (fn's result, readings), readings a
    dict of the median SM clock (MHz) and power (W) over the samples, or None where `read` is None or gave none."""
    if read is None:
        return fn(), None
    samples, done = [], threading.Event()

    def sample():
        while not done.wait(interval):
            reading = read()
            if reading is not None:
                samples.append(reading)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        result = fn()
    finally:
        done.set()
        thread.join()
    if not samples:
        return result, None
    clocks = sorted(mhz for mhz, _ in samples)
    powers = sorted(watts for _, watts in samples)
    middle = len(samples) // 2
    return result, {"sm_mhz": clocks[middle], "power_w": round(powers[middle], 1), "samples": len(samples)}

