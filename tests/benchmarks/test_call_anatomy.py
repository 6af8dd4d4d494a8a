"""benchmarks/call_anatomy.py, the parts that run without a GPU: its cases, the trace's kernels and the time per
call."""

import pytest


def test_cases_parse_and_bad_ones_name_the_argument(anatomy_bench):
    assert anatomy_bench.parse_cases("fp8:128:4096,bf16:256:1000") == [("fp8", 128, 4096), ("bf16", 256, 1000)]
    for bad in ("fp16:128:4096", "fp8:96:4096", "fp8:128", "fp8:128:0", "fp8:x:4096"):
        with pytest.raises(ValueError, match="cases"):
            anatomy_bench.parse_cases(bad)


def test_kernel_names_lose_their_types_namespaces_and_arguments(anatomy_bench):
    name = "void fa3fp8::merge_segments<128, 192, 128, false, 2, false, __nv_bfloat16>(Params, TailSplit)"
    assert anatomy_bench.short_name(name) == "merge_segments"
    assert anatomy_bench.short_name("cudnn_generated_fort_native_sdpa_sm90") == "cudnn_generated_fort_native_sdpa_sm90"


def test_trace_keeps_the_kernels_in_order_of_start(anatomy_bench):
    trace = {"traceEvents": [
        {"cat": "kernel", "name": "void attn_fwd<1>(Params)", "ts": 105.0, "dur": 3.0},
        {"cat": "cuda_runtime", "name": "cudaLaunchKernelExC", "ts": 1.0, "dur": 4.0},
        {"cat": "kernel", "name": "void attn_fwd<1>(Params)", "ts": 2.0, "dur": 100.0},
    ]}
    assert anatomy_bench.kernel_events(trace) == [("attn_fwd", 2.0, 100.0), ("attn_fwd", 105.0, 3.0)]


def test_time_per_call_splits_into_each_kernel_and_the_idle_time(anatomy_bench):
    # three calls of a 100 us kernel, a 2 us gap, a 3 us merge, then a 1 us gap before the next call
    events = []
    for call in range(3):
        start = call * 106.0
        events += [("attn_fwd", start, 100.0), ("merge_segments", start + 102.0, 3.0)]
    result = anatomy_bench.anatomy(events, 3)
    assert result["period_us"] == pytest.approx((2 * 106.0 + 105.0) / 3)
    assert result["kernels_us"] == {"attn_fwd": pytest.approx(100.0), "merge_segments": pytest.approx(3.0)}
    assert result["idle_us"] == pytest.approx(result["period_us"] - 103.0)
    assert result["launches"] == 2
    with pytest.raises(ValueError):
        anatomy_bench.anatomy([], 3)
