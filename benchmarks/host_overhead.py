"""Host time per attention call on one GPU, where the launch is short enough that the host, not the GPU, sets the pace
(a prefill's short last chunk, draft tokens over a short context): the public API (`fa3fp8.flash_attn_func`, BF16, and
`flash_attn_fp8_func` on a bundle quantized beforehand), `flash_attn_varlen_func` on the same tokens as one packed
sequence ("varlen": its offsets' values checked on the first call; "varlen-synced": offsets made in inference mode,
checked with a host sync on every call), `quantize_qkv` alone, the CUDA launcher with the settings the API picks (what
the API adds is the difference), and SDPA's flash backend on the same shape without a mask (its GQA heads expanded
beforehand) as the peer's cost per call.

    python benchmarks/host_overhead.py [--calls 300] [--rounds 5] [--out DIR]

Each runner is called `calls` times back to back after a warm-up: `host_us` is the loop's host time per call, `gpu_us`
the time per call until the last kernel ends, each the median of `rounds` rounds that take the runners in turn (the
host's pace drifts by up to 2x between seconds on the lent machines). Where they are equal the host sets the pace;
where gpu_us is the larger, the kernels do. `--out DIR` writes host-overhead-<gpu>-<date>.json, a PNG, and the API's
cProfile (the functions with the most time of their own) as host-overhead-profile.txt.
"""

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import attention as bench  # noqa: E402
import fa3fp8  # noqa: E402
from fa3fp8 import attention_sm90  # noqa: E402
from fa3fp8.gpu import sm_count  # noqa: E402
from fa3fp8.testing import random_qkv  # noqa: E402

HEADS, KV_HEADS = 32, 8
# (queries, keys, d): causal attention of the last `queries` tokens of a sequence of `keys`
CASES = ((64, 4096, 64), (64, 4096, 128), (512, 4096, 128))
WARMUP = 20


def runners(q, k, v):
    """{name: closure} for BF16 q (1, queries, HEADS, d) and k, v (1, keys, KV_HEADS, d)."""
    queries, keys, d = q.shape[1], k.shape[1], q.shape[-1]
    settings = attention_sm90.best_settings(d, False, True, keys, equal_lengths=True,
                                            launch=(HEADS, queries, sm_count(q.device)))
    bundle = fa3fp8.quantize_qkv(q, k, v)
    groups = HEADS // KV_HEADS
    expanded = [x.repeat_interleave(groups, dim=2) for x in (k, v)]
    packed = (q[0], k[0], v[0])
    offsets = [torch.tensor([0, n], dtype=torch.int32, device=q.device) for n in (queries, keys)]
    with torch.inference_mode():  # no version counter: the offsets' values are checked (a host sync) on every call
        frozen = [x.clone() for x in offsets]
    return {
        "fa3fp8": lambda: fa3fp8.flash_attn_func(q, k, v, causal=True),
        "varlen": lambda: fa3fp8.flash_attn_varlen_func(*packed, *offsets, queries, keys, causal=True),
        "varlen-synced": lambda: fa3fp8.flash_attn_varlen_func(*packed, *frozen, queries, keys, causal=True),
        "launcher": bench.settings_runner(settings, False, q, k, v, None, True),
        "fa3fp8-fp8": lambda: fa3fp8.flash_attn_fp8_func(bundle, causal=True),
        "quantize_qkv": lambda: fa3fp8.quantize_qkv(q, k, v),
        "sdpa-flash": bench.sdpa_runner("sdpa-flash", q, *expanded, causal=False),
    }


def host_and_gpu_us(fn, calls, synchronize=torch.cuda.synchronize):
    """(host, until the last kernel's end) microseconds per call of `calls` calls made back to back; `synchronize`
    waits for the device's work."""
    for _ in range(WARMUP):
        fn()
    synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    issued = time.perf_counter()
    synchronize()
    done = time.perf_counter()
    return (issued - start) / calls * 1e6, (done - start) / calls * 1e6


def median_rounds(named, calls, rounds, synchronize=torch.cuda.synchronize):
    """{name: (host, until done) microseconds per call}, each the median over `rounds` rounds in which every runner of
    `named` ({name: fn}) takes its turn (host_and_gpu_us)."""
    times = {name: [] for name in named}
    for _ in range(rounds):
        for name, fn in named.items():
            times[name].append(host_and_gpu_us(fn, calls, synchronize))
    return {name: tuple(statistics.median(t[i] for t in timed) for i in range(2)) for name, timed in times.items()}


def profile(fn, calls):
    """cProfile's report of `calls` calls of fn, sorted by the functions' own time (the first 25)."""
    profiler = cProfile.Profile()
    profiler.runcall(lambda: [fn() for _ in range(calls)])
    report = io.StringIO()
    pstats.Stats(profiler, stream=report).sort_stats("tottime").print_stats(25)
    return report.getvalue()


def plot(rows, path):
    """Host microseconds per call, a bar per runner, a group per case."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = list(dict.fromkeys(r["case"] for r in rows))
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    fig, ax = plt.subplots(figsize=(2.5 * len(cases) + 2, 4))
    width = 0.8 / len(impls)
    for i, impl in enumerate(impls):
        values = [next(r["host_us"] for r in rows if r["case"] == c and r["impl"] == impl) for c in cases]
        ax.bar([j + i * width for j in range(len(cases))], values, width, label=impl)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cases))], cases)
    ax.set(ylabel="host µs per call", title="host time per attention call")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=os.environ.get("OUT", "benchmarks/results"))
    args = parser.parse_args()
    gpu = torch.cuda.get_device_name()
    rows, reports = [], []
    for queries, keys, d in CASES:
        q, k, v = random_qkv(1, queries, keys, HEADS, KV_HEADS, d, torch.bfloat16, "cuda", seed=1)
        case = f"{queries}q/{keys}k d{d}"
        named = runners(q, k, v)
        for name, (host, until_done) in median_rounds(named, args.calls, args.rounds).items():
            rows.append({"impl": name, "case": case, "queries": queries, "keys": keys, "d": d,
                         "host_us": round(host, 1), "gpu_us": round(until_done, 1)})
            print(f"{case:18s} {name:13s} host {host:7.1f} us  until done {until_done:7.1f} us per call")
        reports.append(f"== {case}: fa3fp8.flash_attn_func, {args.calls} calls\n{profile(named['fa3fp8'], args.calls)}")
    meta = {"torch": torch.__version__, "heads": HEADS, "kv_heads": KV_HEADS, "calls": args.calls, "rounds": args.rounds}
    path = bench.save_results(args.out, "host-overhead", gpu, meta, rows, plot)
    (Path(args.out) / "host-overhead-profile.txt").write_text("\n".join(reports))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
