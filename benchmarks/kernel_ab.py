"""Two builds of the CUDA kernel library side by side on one GPU: the default settings of each kernels-mode shape
(`attention_sm90.best_settings`, the public API's choice), timed in alternating order in one process, outputs
compared bit for bit. For a change that should not alter results (a schedule, a barrier), this is the measurement.

    python benchmarks/kernel_ab.py OLD_LIBRARY [--seqlens 4096,8192,16384] [--dtypes bf16,fp8] [--dims 128,256]
                                   [--ragged 200,1000,...] [--windows 1024,4096 [--no-plain]]
                                   [--causal-settings JSON] [--rounds 5] [--out DIR]

"new" is the library fa3fp8 loads (beside the source or in FA3FP8_CACHE_DIR); OLD_LIBRARY is one built from
another revision of csrc/ with the same C entry points (`python -m fa3fp8.cuda_build DIR` with that
revision's fa3fp8 on PYTHONPATH); where the entries' arguments have changed since, give the older source's entries
the new signatures (ignoring what they do not use) before building it: its kernels stay as they were. An
experiment built from the same source with FA3FP8_NVCC_FLAGS set is "new" under that setting (its library has a
name of its own); where it changes rounding, the rows' max_abs_diff says by how much. `--ragged` adds packed
batches of sequences of these lengths (a service's documents, most of them ending inside a row block), each dtype,
head dim and mask through the public API (flash_attn_varlen_func; FP8: flash_attn_fp8_func on its packed bundle), as
`S` 0 rows with their `lengths`. `--windows` adds causal attention in sliding windows of these many keys (query i
sees keys i - window + 1 .. i) on the same shapes, each on the window's settings (WINDOW_SETTINGS), as rows with
their `window` and TFLOPS of the pairs the window keeps; `--no-plain` leaves out the rows without a window.
`--causal-settings` times the causal shapes only, on the launcher settings given instead of the API's (a switch that
changes a kernel the API does not choose there). Writes kernel-ab-<gpu>-<date>.json and a PNG of new / old per shape.
"""

import argparse
import datetime
import functools
import itertools
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import attention as bench  # noqa: E402
import window as window_bench  # noqa: E402
import fa3fp8  # noqa: E402
import torch  # noqa: E402
from fa3fp8 import attention_sm90, cuda_build  # noqa: E402
from fa3fp8.gpu import sm_count  # noqa: E402
from fa3fp8.testing import random_qkv  # noqa: E402

TARGET_HEAD_DIMS = (128, 256)  # the head dims the speed targets name: a build switch is timed there unless asked


def cases(seqlens, dtypes=("bf16", "fp8"), dims=TARGET_HEAD_DIMS, causal_settings=None):
    """(fp8, d, causal, seqlen, batch, heads, settings) for each of `dtypes` and the head dims among `dims` that the
    CUDA kernel is built for (CUDA_HEAD_DIMS), both masks, on the API's settings there (best_settings); with
    `causal_settings` (launcher settings), the causal shapes only, on those."""
    dims = [d for d in dims if d in bench.CUDA_HEAD_DIMS]
    args = argparse.Namespace(dtypes=list(dtypes), dims=dims, seqlens=seqlens, causal_only=causal_settings is not None,
                              full_only=False, prefill_shape=False, tokens=bench.TOKENS)
    def settings(d, fp8, causal, seqlen):
        if causal_settings is not None:
            return causal_settings
        return attention_sm90.best_settings(d, fp8, causal, seqlen, True)

    return [(fp8, d, causal, seqlen, batch, heads, settings(d, fp8, causal, seqlen))
            for fp8, d, causal, seqlen, batch, heads, _ in bench.kernel_cases(args)]


def ragged_cases(lengths, dtypes=("bf16", "fp8"), dims=TARGET_HEAD_DIMS, device="cuda"):
    """(fp8, d, causal, settings, runner, flops) on packed sequences of `lengths` (queries as many as keys, heads as the
    bench's hidden size gives them, as many KV heads): the public API's call, the settings it plans, its FLOPs; the
    tensors are made on `device` as each case is reached. No lengths, no cases."""
    if not lengths:
        return
    cu = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device=device)
    longest, total = max(lengths), sum(lengths)
    for dtype, d, causal in itertools.product(dtypes, [d for d in dims if d in bench.CUDA_HEAD_DIMS], (False, True)):
        fp8, heads = dtype == "fp8", bench.HIDDEN // d
        q, k, v = (x[0] for x in random_qkv(1, total, total, heads, heads, d, torch.bfloat16, device, seed=d))
        if fp8:
            runner = functools.partial(fa3fp8.flash_attn_fp8_func, fa3fp8.quantize_qkv(q, k, v, True, cu, cu, longest,
                                                                                       longest), causal)
        else:
            runner = functools.partial(fa3fp8.flash_attn_varlen_func, q, k, v, cu, cu, longest, longest, causal=causal)
        launch = (len(lengths) * heads, longest, sm_count(q.device)) if q.is_cuda else None
        settings = attention_sm90.best_settings(d, fp8, causal, longest, launch=launch)
        yield fp8, d, causal, settings, runner, sum(bench.flops(1, heads, n, d, causal) for n in lengths)


def window_cases(seqlens, windows, dtypes=("bf16", "fp8"), dims=TARGET_HEAD_DIMS):
    """(fp8, d, seqlen, batch, heads, window, settings) for causal attention in a sliding window of each of `windows`
    keys shorter than the sequence, on the shapes of `cases` and the CUDA kernel's window settings there."""
    return [(fp8, d, seqlen, batch, heads, window, window_bench.cuda_settings(d, fp8, window))
            for fp8, d, causal, seqlen, batch, heads, _ in cases(seqlens, dtypes, dims)
            for window in windows if causal and window < seqlen]


def dense_row(libs, rounds, fp8, d, causal, seqlen, batch, heads, settings, flops, **fields):
    """ab_row of the CUDA launcher on `settings` over `batch` random sequences of `seqlen` tokens and `heads` heads
    (FP8: on their bundles), `flops` a call; its tensors are freed before it returns."""
    q, k, v = random_qkv(batch, seqlen, seqlen, heads, heads, d, torch.bfloat16, "cuda", seed=d)
    bundles = bench.fp8_bundles(q, k, v) if fp8 else None
    kernel = bench.settings_runner(settings, fp8, q, k, v, bundles, causal)
    row = ab_row(kernel, libs, flops, rounds, dtype="fp8" if fp8 else "bf16", d=d, S=seqlen, causal=causal, **fields,
                 settings=settings)
    del q, k, v, bundles, kernel
    torch.cuda.empty_cache()
    return row


def ab_row(kernel, libs, flops, rounds, **fields):
    """One row of `fields`: `kernel` run on each of `libs` ({"old": ..., "new": ...}), the outputs compared, its TFLOPS
    (`flops` a call) on each, medians of `rounds` interleaved rounds; printed as it is made."""
    runners = {tag: on_library(lib, kernel) for tag, lib in libs.items()}
    identical, max_abs_diff = compare(runners["old"](), runners["new"]())
    runs = interleaved(runners, rounds, lambda run: flops / bench.timed(run) / 1e9)
    median = {tag: sorted(r)[len(r) // 2] for tag, r in runs.items()}
    row = dict(**fields, identical=identical, max_abs_diff=max_abs_diff,
               old_tflops=round(median["old"], 1), new_tflops=round(median["new"], 1),
               old_runs=[round(x, 1) for x in runs["old"]], new_runs=[round(x, 1) for x in runs["new"]])
    print(f"{label(row).replace(chr(10), ' '):24s} old {median['old']:7.1f} new {median['new']:7.1f} TFLOPS "
          f"({median['new'] / median['old']:.3f}x) "
          f"{'identical' if identical else f'OUTPUTS DIFFER by {max_abs_diff:.2e}'}  {row['settings']}", flush=True)
    return row


def on_library(lib, fn):
    """fn, calling into `lib`: the launchers look the library up through cuda_build.load on every call."""
    def run():
        cuda_build.load = lambda: lib
        return fn()
    return run


def interleaved(runners, rounds, measure):
    """{tag: [measure(runner) for each round]}, the runners taking turns in an order that reverses every round (old,
    new; new, old; ...), so that neither always runs right after the other."""
    runs, tags = {tag: [] for tag in runners}, list(runners)
    for r in range(rounds):
        for tag in tags if r % 2 == 0 else tags[::-1]:
            runs[tag].append(measure(runners[tag]))
    return runs


def compare(old, new):
    """(bit-identical?, the largest absolute difference) of two builds' outputs."""
    return torch.equal(old, new), (old.float() - new.float()).abs().max().item()


def label(row):
    """A row's shape in a few words: dtype, head dim, mask, and S or "ragged"."""
    shape = f"S{row['S'] // 1024}K" if row["S"] else "ragged"
    mask = f"win{row['window']}" if row.get("window") else "causal" if row["causal"] else "full"
    return f"{row['dtype']} d{row['d']}\n{mask} {shape}"


def plot(rows, path):
    """new / old TFLOPS per shape, one bar each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(rows)), 4))
    ax.bar(range(len(rows)), [r["new_tflops"] / r["old_tflops"] for r in rows])
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([label(r) for r in rows], fontsize=7)
    ax.set_ylabel("new / old TFLOPS")
    low = min(r["new_tflops"] / r["old_tflops"] for r in rows)
    high = max(r["new_tflops"] / r["old_tflops"] for r in rows)
    ax.set_ylim(min(0.95, low - 0.01), max(1.05, high + 0.01))
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old", type=Path, help="the other build of the kernel library (.so)")
    parser.add_argument("--seqlens", type=lambda s: [int(x) for x in s.split(",")], default=[4096, 8192, 16384])
    parser.add_argument("--dtypes", type=lambda s: s.split(","), default=["bf16", "fp8"], help="bf16 and/or fp8")
    parser.add_argument("--dims", type=lambda s: [int(x) for x in s.split(",")], default=list(TARGET_HEAD_DIMS),
                        help="head dims (of the CUDA kernel's; default those of the speed targets)")
    parser.add_argument("--ragged", type=lambda s: [int(x) for x in s.split(",")], default=[],
                        help="lengths of packed sequences to time as well, through the public API")
    parser.add_argument("--windows", type=lambda s: [int(x) for x in s.split(",")], default=[],
                        help="sliding windows (keys a query sees, itself included) to time causal attention in too")
    parser.add_argument("--no-plain", action="store_true", help="only the --windows and --ragged rows")
    parser.add_argument("--causal-settings", type=json.loads, default=None,
                        help='time the causal shapes only, on these launcher settings instead of the API\'s (JSON, '
                             'e.g. \'{"loop": "serial", "consumers": 3, "fold": true}\')')
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=os.environ.get("OUT", "benchmarks/results"))
    args = parser.parse_args()
    libs = {"old": cuda_build.open_library(args.old), "new": cuda_build.load()}
    os.environ["FA3FP8_KERNEL"] = "cuda"  # what fp8_bundles restores after making both bundles
    rows = []
    plain = [] if args.no_plain else cases(args.seqlens, args.dtypes, args.dims, args.causal_settings)
    for fp8, d, causal, seqlen, batch, heads, settings in plain:
        rows.append(dense_row(libs, args.rounds, fp8, d, causal, seqlen, batch, heads, settings,
                              bench.flops(batch, heads, seqlen, d, causal)))
    for fp8, d, seqlen, batch, heads, window, settings in window_cases(args.seqlens, args.windows, args.dtypes,
                                                                      args.dims):
        rows.append(dense_row(libs, args.rounds, fp8, d, True, seqlen, batch, heads, settings,
                              batch * window_bench.window_flops(seqlen, window, heads, d), window=window))
    for fp8, d, causal, settings, kernel, flops in ragged_cases(args.ragged, args.dtypes, args.dims):
        rows.append(ab_row(kernel, libs, flops, args.rounds, dtype="fp8" if fp8 else "bf16", d=d, S=0,
                           lengths=args.ragged, causal=causal, settings=settings))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    gpu = torch.cuda.get_device_name()
    stem = f"kernel-ab-{gpu.replace(' ', '-').lower()}-{datetime.date.today().isoformat()}"
    (out / f"{stem}.json").write_text(json.dumps({"gpu": gpu, "rounds": args.rounds, "old": str(args.old),
                                                  "new": libs["new"]._name, "rows": rows}, indent=1))
    plot(rows, out / f"{stem}.png")
    if not all(r["identical"] for r in rows):
        sys.exit("the two builds' outputs differ")


if __name__ == "__main__":
    main()
