"""Where an attention call's GPU time goes: its kernels (the attention kernel, the tail split's `merge_segments`, any
other) and the GPU's idle time between them and before the next call, from a CUDA trace (torch.profiler) of calls run
back to back, beside the peer of its dtype (SDPA's cuDNN backend for BF16, cuDNN's FP8 attention for FP8).

    python benchmarks/call_anatomy.py [--cases fp8:128:4096,fp8:128:16384] [--causal] [--calls 40] [--out DIR]

A case is dtype:d:S at the bench's shape (16K tokens per batch, hidden 2048; FP8 on a bundle quantized beforehand).
Per implementation and case: `period_us`, the first kernel's start to the last one's end divided by the calls;
`kernels_us`, each kernel's mean time per call by name; `idle_us`, the period less the kernels' time (launch gaps, and
the host's pace where `host_us`, the loop's host time per call, reaches the period); TFLOPS over the period and over
the longest kernel alone. So a call's fixed cost (its launches, the merge) shows apart from the attention kernel's own
time, which holds its per-work-tile cost and its last round. `--out DIR` writes call-anatomy-<gpu>-<date>.json.
"""

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernels"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import attention as bench  # noqa: E402
import fa3fp8  # noqa: E402
from fa3fp8.testing import random_qkv  # noqa: E402

DEFAULT_CASES = "fp8:128:4096,fp8:128:16384,bf16:128:4096,bf16:256:4096"
WARMUP = 10


def parse_cases(text):
    """[(dtype, d, seqlen)] of a comma-separated list of dtype:d:S (dtype bf16 or fp8, d one of the bench's)."""
    cases = []
    for item in text.split(","):
        parts = item.split(":")
        if len(parts) != 3 or parts[0] not in ("bf16", "fp8") or not all(p.isdigit() for p in parts[1:]):
            raise ValueError(f"cases: {item!r} is not dtype:d:S with dtype bf16 or fp8")
        dtype, d, seqlen = parts[0], int(parts[1]), int(parts[2])
        if d not in bench.HEAD_DIMS or seqlen < 1:
            raise ValueError(f"cases: {item!r} needs d in {bench.HEAD_DIMS} and S >= 1")
        cases.append((dtype, d, seqlen))
    return cases


def short_name(name):
    """A kernel's name without its return type, namespaces, template arguments and parameters."""
    name = name.removeprefix("void ")
    return name.split("<")[0].split("(")[0].split("::")[-1]


def kernel_events(trace):
    """[(name, start_us, duration_us)] of the GPU kernels in a Chrome trace (torch.profiler's export), by start."""
    events = [(short_name(e["name"]), float(e["ts"]), float(e["dur"]))
              for e in trace.get("traceEvents", []) if e.get("cat") == "kernel"]
    return sorted(events, key=lambda e: e[1])


def anatomy(events, calls):
    """The time per call of `calls` calls' kernels `events` (kernel_events' form): period_us, kernels_us (mean time
    per call by name), idle_us and launches (kernels per call)."""
    if calls < 1 or not events:
        raise ValueError("anatomy needs at least one call and one kernel")
    start = events[0][1]
    end = max(ts + dur for _, ts, dur in events)
    period = (end - start) / calls
    kernels = {}
    for name, _, dur in events:
        kernels[name] = kernels.get(name, 0.0) + dur / calls
    return {"period_us": period, "kernels_us": kernels, "idle_us": period - sum(kernels.values()),
            "launches": len(events) / calls}


def traced(fn, calls):
    """(kernel_events of `calls` back-to-back calls of fn under torch.profiler, the loop's host time per call in us)."""
    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        begin = time.perf_counter()
        for _ in range(calls):
            fn()
        host_us = (time.perf_counter() - begin) * 1e6 / calls
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            return kernel_events(json.load(f)), host_us


def runners(dtype, d, seqlen, causal, peers=True):
    """{impl: closure} of one case: fa3fp8 and (with `peers`) its dtype's peer (None where the cuDNN frontend is
    missing)."""
    batch, heads = bench.shape_for(seqlen, d)
    q, k, v = random_qkv(batch, seqlen, seqlen, heads, heads, d, torch.bfloat16, "cuda", seed=seqlen + d)
    if dtype == "fp8":
        bundle = fa3fp8.quantize_qkv(q, k, v)
        found = {"fa3fp8": lambda: fa3fp8.flash_attn_fp8_func(bundle, causal=causal)}
        if peers:
            found["cudnn-fp8"] = bench.cudnn_fp8_peer(q, k, v, causal, f"d{d} S{seqlen}")
        return found
    found = {"fa3fp8": lambda: fa3fp8.flash_attn_func(q, k, v, causal=causal)}
    if peers:
        found["sdpa-cudnn"] = bench.sdpa_runner("sdpa-cudnn", q, k, v, causal)
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=parse_cases, default=parse_cases(DEFAULT_CASES),
                        help=f"dtype:d:S, comma-separated (default {DEFAULT_CASES})")
    parser.add_argument("--causal", action="store_true", help="causal attention (default: without a mask)")
    parser.add_argument("--calls", type=int, default=40, help="calls traced back to back per implementation")
    parser.add_argument("--out", default=os.environ.get("OUT"))
    args = parser.parse_args()
    if args.calls < 1:
        parser.error("--calls must be at least 1")
    rows = []
    for dtype, d, seqlen in args.cases:
        batch, heads = bench.shape_for(seqlen, d)
        work = bench.flops(batch, heads, seqlen, d, args.causal)
        for impl, fn in runners(dtype, d, seqlen, args.causal).items():
            if fn is None:
                continue
            events, host_us = traced(fn, args.calls)
            row = {"impl": impl, "dtype": dtype, "d": d, "S": seqlen, "causal": args.causal, "host_us": host_us,
                   **anatomy(events, args.calls)}
            longest = max(row["kernels_us"].values())
            row["tflops"], row["tflops_longest_kernel"] = work / row["period_us"] / 1e6, work / longest / 1e6
            rows.append(row)
            kernels = ", ".join(f"{name} {us:.1f}" for name, us in sorted(row["kernels_us"].items(),
                                                                           key=lambda item: -item[1]))
            print(f"{impl:10s} {dtype:4s} d{d:<3d} S{seqlen:<6d} period {row['period_us']:8.1f} us  idle "
                  f"{row['idle_us']:6.1f}  host {host_us:6.1f}  {row['launches']:.0f} launches  "
                  f"{row['tflops']:6.1f} TFLOPS ({row['tflops_longest_kernel']:6.1f} longest kernel)  [{kernels}]")
    if args.out:
        gpu = torch.cuda.get_device_name()
        path = Path(args.out) / f"call-anatomy-{gpu.replace(' ', '-').lower()}-{datetime.date.today().isoformat()}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"gpu": gpu, "calls": args.calls, "rows": rows}, indent=1))
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
