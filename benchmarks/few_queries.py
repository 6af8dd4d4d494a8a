"""Causal attention of a few queries over a long context on one GPU: the CUDA kernel with two and three consumer
warpgroups, alone, in pairs of CTAs and in folds, and the public API's choice, beside SDPA with a bottom-right causal
mask; the last lines name the fastest setting of each case and the API's rate against it.

    python benchmarks/few_queries.py [--queries 1,64,128,192,256,512,1024] [--keys 32768,131072] [--out DIR]
                                     [--batch 1] [--heads 32] [--kv-heads 8] [--d 128]

Llama-3.1-8B's attention shape (32 query heads, 8 KV heads, d 128; `--batch`, `--heads`, `--kv-heads` and `--d` set
others, e.g. attention.py's bench shape at 4K: 4 sequences of 16 heads, MHA; d64 times its own settings, D64_SETTINGS),
sequences whose last `queries` tokens attend to all `keys` before them (a chunked prefill's last chunk, a speculative
decoder's draft tokens). Three consumers take 192 query rows per CTA, two take 128: with few queries the launch has few
work tiles (one per 128 or 192 rows and head), which the kernel splits along the keys where they are fewer than the SMs
(and, with `split_rounds`, those of the last round of launches of a few rounds), so the rows that each CTA computes is
what the choice turns on (attention_sm90.few_waves_time). Up to SHORT_CAUSAL_MAX_KEYS keys the API takes persistent
folds instead where the queries are at least FOLDS_MIN_QUERY_SHARE of the keys (`--keys 4096,16384`: the folds' rows
beside the others).
TFLOPS = 4 · B · H · d · (queries · (keys - queries) + queries · (queries + 1) / 2) / t for B sequences of H heads;
rounds interleaved, rows give the median. `--out DIR` writes few-queries-<gpu>-<date>.json and a PNG there.
"""

import argparse
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import attention as bench  # noqa: E402
import fa3fp8  # noqa: E402
from fa3fp8 import attention_sm90  # noqa: E402
from fa3fp8.gpu import sm_count  # noqa: E402
from fa3fp8.reference import attention_reference  # noqa: E402
from fa3fp8.testing import random_qkv, rmse  # noqa: E402

HEADS, KV_HEADS, D = 32, 8, 128
# fp8 -> the CUDA launcher's settings timed: two and three consumers, alone and in pairs of CTAs (causal 16-bit pairs
# of two consumers exist on the default 176-key tiles only; three consumers take 128-key ones), in persistent folds
# (128-key tiles), two consumers on the default tiles without the split along the keys that launches of fewer work
# tiles than SMs make, and the API's two and three consumers ("-auto": the launcher picks pairs or not, and splits
# the last round of launches of up to attention_sm90.CAUSAL_SPLIT_ROUNDS rounds) beside the same with split_rounds 1
# ("-split1": only launches of fewer work tiles than SMs split)
SETTINGS = {
    False: {"two": {"loop": "overlap", "consumers": 2, "block_n": 128, "cluster": 1},
            "two-pairs": {"loop": "overlap", "consumers": 2, "cluster": 2},
            "three": {"loop": "serial", "consumers": 3, "block_n": 128, "cluster": 1},
            "three-pairs": {"loop": "serial", "consumers": 3, "block_n": 128, "cluster": 2},
            "two-folds": {"loop": "overlap", "consumers": 2, "block_n": 128, "fold": True},
            "three-folds": {"loop": "serial", "consumers": 3, "block_n": 128, "fold": True},
            "two-unsplit": {"loop": "overlap", "consumers": 2, "split": False},
            "two-auto": {"loop": "overlap", "consumers": 2},
            "two-split1": {"loop": "overlap", "consumers": 2, "split_rounds": 1},
            "three-auto": {"loop": "serial", "consumers": 3, "block_n": 128},
            "three-split1": {"loop": "serial", "consumers": 3, "block_n": 128, "split_rounds": 1}},
    True: {"two": {"loop": "overlap", "consumers": 2, "cluster": 1},
           "two-pairs": {"loop": "overlap", "consumers": 2, "cluster": 2},
           "three": {"loop": "serial", "consumers": 3, "cluster": 1},
           "three-pairs": {"loop": "serial", "consumers": 3, "cluster": 2},
           "two-folds": {"loop": "overlap", "consumers": 2, "fold": True},
           "three-folds": {"loop": "serial", "consumers": 3, "fold": True},
           "two-unsplit": {"loop": "overlap", "consumers": 2, "split": False},
           "two-auto": {"loop": "overlap", "consumers": 2},
           "two-split1": {"loop": "overlap", "consumers": 2, "split_rounds": 1},
           "three-auto": {"loop": "serial", "consumers": 3},
           "three-split1": {"loop": "serial", "consumers": 3, "split_rounds": 1}},
}
# d64's settings, BF16/FP16 and FP8 alike (csrc/attn_sm90_d64.cu: overlapped, one CTA per work tile or folds, no
# pairs): two and three consumers, split along the keys and not, and in folds
D64_SETTINGS = {f"{name}{variant}": {"loop": "overlap", "consumers": consumers, **extra}
                for name, consumers in (("two", 2), ("three", 3))
                for variant, extra in (("", {}), ("-unsplit", {"split": False}), ("-folds", {"fold": True}))}


def causal_flops(queries, keys, heads=HEADS, d=D):
    """Forward FLOPs of bottom-right causal attention: query i of `queries` sees keys - queries + i + 1 keys (none
    where that is not positive: with more queries than keys, the first queries - keys rows see no key)."""
    seeing = min(queries, keys)
    return 4 * heads * d * (seeing * (keys - seeing) + seeing * (seeing + 1) / 2)


def sdpa_lower_right(q, k, v):
    """SDPA with a bottom-right causal mask (torch.nn.attention.bias), K/V heads repeated for GQA."""
    from torch.nn.attention.bias import causal_lower_right

    groups = q.shape[2] // k.shape[2]
    qt = q.transpose(1, 2).contiguous()
    kt, vt = (x.repeat_interleave(groups, dim=2).transpose(1, 2).contiguous() for x in (k, v))
    mask = causal_lower_right(q.shape[1], k.shape[1])
    return lambda: torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask).transpose(1, 2)


def api_settings(fp8, queries, keys, sms, sequences_x_heads=HEADS, d=D):
    """The CUDA launcher's settings that the API takes for sequences of `queries` over `keys` on `sms` SMs
    (attention_sm90.best_settings, as fa3fp8.attention calls it)."""
    return attention_sm90.best_settings(d, fp8, True, keys, equal_lengths=True,
                                        launch=(sequences_x_heads, queries, sms))


def settings_for(d, fp8):
    """The launcher settings timed at head dim d: SETTINGS[fp8] at d128, D64_SETTINGS at d64."""
    return D64_SETTINGS if d == 64 else SETTINGS[fp8]


def runners(fp8, q, k, v):
    """{name: closure} for one dtype: the API's default, each of settings_for's, and (BF16) SDPA; FP8 on
    quantize_qkv's bundle of q, k, v, quantized here (for the CUDA kernel, V key-permuted)."""
    bundles = {"cuda": fa3fp8.quantize_qkv(q, k, v)} if fp8 else None
    if fp8:
        api = lambda: fa3fp8.flash_attn_fp8_func(bundles["cuda"], causal=True)  # noqa: E731
    else:
        api = lambda: fa3fp8.flash_attn_func(q, k, v, causal=True)  # noqa: E731
    named = {"fa3fp8": api}
    for name, extra in settings_for(q.shape[-1], fp8).items():
        named[f"cuda-{name}"] = bench.settings_runner(extra, fp8, q, k, v, bundles, True)
    if not fp8:
        named["sdpa-lower-right"] = sdpa_lower_right(q, k, v)
    return named


def check(fp8, d=D):
    """Every runner against the fp64 reference on a small case (12 queries over 3000 keys)."""
    q, k, v = random_qkv(1, 12, 3000, HEADS, KV_HEADS, d, torch.bfloat16, "cuda", seed=5)
    ref = attention_reference(q, k, v, causal=True, compute_dtype=torch.float64)[0]
    bound = 0.1 if fp8 else 0.01
    for name, fn in runners(fp8, q, k, v).items():
        err = rmse(fn().view(ref.shape), ref) / ref.float().pow(2).mean().sqrt().item()
        if not err < bound:
            raise SystemExit(f"{name} ({'fp8' if fp8 else 'bf16'}): relative RMSE {err:.2e} against fp64")


def summary(rows):
    """One line per (dtype, keys, queries): the fastest of the CUDA launcher's settings, and the API's rate as a
    fraction of it (below 1: best_settings chose slower than a setting timed beside it) with the settings it took."""
    lines = []
    for dtype, keys, queries in sorted({(r["dtype"], r["keys"], r["queries"]) for r in rows}):
        case = {r["impl"]: r for r in rows if (r["dtype"], r["keys"], r["queries"]) == (dtype, keys, queries)}
        fastest = max((name for name in case if name.startswith("cuda-")), key=lambda name: case[name]["tflops"])
        best, api = case[fastest]["tflops"], case["fa3fp8"]
        lines.append(f"{dtype:4s} {keys:6d} keys {queries:5d} queries  fastest {fastest:18s} {best:7.2f}  "
                     f"fa3fp8 {api['tflops']:7.2f} ({api['tflops'] / best:.3f} of it) {api.get('settings')}")
    return lines


def plot(rows, path):
    """TFLOPS against the query count, one panel per (dtype, keys)."""
    bench.plot_panels(rows, path, lambda r: (r["dtype"], r["keys"]), "queries", "queries",
                      lambda panel: f"{panel[0]}, {panel[1]} keys")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    parser.add_argument("--queries", type=ints, default=[1, 64, 128, 192, 256, 512, 1024])
    parser.add_argument("--keys", type=ints, default=[32768, 131072])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=1, help="sequences, each of the same lengths")
    parser.add_argument("--heads", type=int, default=HEADS)
    parser.add_argument("--kv-heads", type=int, default=KV_HEADS)
    parser.add_argument("--d", type=int, default=D, choices=(64, 128))
    parser.add_argument("--out", default=os.environ.get("OUT", "benchmarks/results"))
    args = parser.parse_args()
    if args.heads % args.kv_heads:
        parser.error(f"--heads ({args.heads}) must be a multiple of --kv-heads ({args.kv_heads})")
    sequences_x_heads = args.batch * args.heads
    gpu = torch.cuda.get_device_name()
    rows = []
    for fp8 in (False, True):
        dtype = "fp8" if fp8 else "bf16"
        check(fp8, args.d)
        for keys in args.keys:
            for queries in args.queries:
                q, k, v = random_qkv(args.batch, queries, keys, args.heads, args.kv_heads, args.d, torch.bfloat16,
                                     "cuda", seed=queries)
                named = runners(fp8, q, k, v)
                flops = causal_flops(queries, keys, sequences_x_heads, args.d)
                runs = bench.interleaved_tflops(named, args.rounds, lambda name: flops)
                line = []
                for name, tflops in runs.items():
                    median = bench.median(tflops)
                    rows.append(dict(impl=name, dtype=dtype, queries=queries, keys=keys, tflops=round(median, 2),
                                     runs=[round(t, 2) for t in tflops]))
                    if name == "fa3fp8":
                        rows[-1]["settings"] = api_settings(fp8, queries, keys, sm_count(q.device), sequences_x_heads,
                                                            args.d)
                    line.append(f"{name} {median:7.2f}")
                print(f"{dtype:4s} {keys:6d} keys {queries:5d} queries  " + "  ".join(line), flush=True)
                del q, k, v, named
                torch.cuda.empty_cache()
    meta = {"rounds": args.rounds, "batch": args.batch, "heads": args.heads, "kv_heads": args.kv_heads, "d": args.d}
    print(f"wrote {bench.save_results(args.out, 'few-queries', gpu, meta, rows, plot)}")
    print("\n".join(summary(rows)))


if __name__ == "__main__":
    main()
