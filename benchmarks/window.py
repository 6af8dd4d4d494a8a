"""Sliding-window (local) causal attention on one GPU: fa3fp8 with `window_size` (BF16, and FP8 on a bundle quantized
beforehand; the API, which runs the Triton kernel, and the CUDA kernel's WINDOW_SETTINGS) beside FlexAttention with a
sliding-window block mask (PyTorch's own local attention, compiled), and fa3fp8's full causal attention over the same
sequence for scale.

    python benchmarks/window.py [--seqlens 16384,65536] [--windows 1024,4096] [--heads 32] [--kv-heads 8] [--d 128]
                                [--rounds 3] [--out DIR]

One sequence, Llama-3.1-8B's attention shape by default; query i sees keys i - window + 1 .. i (transformers'
`sliding_window`, fa3fp8's window_size=(window - 1, window - 1) under causal). TFLOPS count the (query, key) pairs
each mask keeps: 4 · H · d · pairs / t, so the windowed and the full rows read alike. Rounds interleaved, rows give the
median. `--out DIR` writes window-<gpu>-<date>.json and a PNG there.
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
from fa3fp8.reference import attention_reference  # noqa: E402
from fa3fp8.testing import random_qkv, rmse  # noqa: E402

IMPLS = ("fa3fp8-bf16", "fa3fp8-fp8", "cuda-bf16", "cuda-fp8", "flex-bf16", "fa3fp8-bf16-full")


def visible_pairs(seqlen: int, window: int | None) -> int:
    """(query, key) pairs that causal attention over `seqlen` tokens keeps, each query seeing at most `window` keys
    (itself included; None: all before it)."""
    if window is None or window >= seqlen:
        return seqlen * (seqlen + 1) // 2
    return window * (window + 1) // 2 + (seqlen - window) * window


def window_flops(seqlen: int, window: int | None, heads: int, d: int) -> int:
    """Forward FLOPs of causal attention whose queries see at most `window` keys (None: all)."""
    return 4 * heads * d * visible_pairs(seqlen, window)


def flex_runner(q, k, v, window: int):
    """FlexAttention (compiled) with a causal sliding-window block mask, on q (1, S, H, d), k/v (1, S, Hkv, d)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def local(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < window)

    seqlen = q.shape[1]
    mask = create_block_mask(local, B=None, H=None, Q_LEN=seqlen, KV_LEN=seqlen, device=q.device)
    qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
    attend = torch.compile(flex_attention, dynamic=False)
    return lambda: attend(qt, kt, vt, block_mask=mask, enable_gqa=q.shape[2] != k.shape[2]).transpose(1, 2)


def cuda_settings(d: int, fp8: bool, window: int) -> dict:
    """The CUDA launcher's arguments for causal attention in a sliding window of `window` keys at head dim d."""
    return {**attention_sm90.WINDOW_SETTINGS[(d, fp8)], "window_left": window - 1}


def runners(q, k, v, window: int) -> dict:
    """{impl: closure} for one shape: the API (the Triton kernel under FA3FP8_KERNEL=auto) and, at its head dims, the
    CUDA kernel's launcher with its window settings; FP8 on quantize_qkv's bundles of q, k, v, V in key order for the
    Triton kernel and key-permuted for the CUDA one."""
    size, d = (window - 1, window - 1), q.shape[-1]
    bundles = {"triton": fa3fp8.quantize_qkv(q, k, v, permute_v=False),
               "cuda": fa3fp8.quantize_qkv(q, k, v, permute_v=True)}

    def cuda(fp8):
        return bench.settings_runner(cuda_settings(d, fp8, window), fp8, q, k, v, bundles, True)

    named = {
        "fa3fp8-bf16": lambda: fa3fp8.flash_attn_func(q, k, v, causal=True, window_size=size),
        "fa3fp8-fp8": lambda: fa3fp8.flash_attn_fp8_func(bundles["triton"], causal=True, window_size=size),
        "cuda-bf16": cuda(False) if d in attention_sm90.HEAD_DIMS else None,
        "cuda-fp8": cuda(True) if d in attention_sm90.HEAD_DIMS else None,
        "flex-bf16": flex_runner(q, k, v, window),
        "fa3fp8-bf16-full": lambda: fa3fp8.flash_attn_func(q, k, v, causal=True),
    }
    return {name: fn for name, fn in named.items() if fn is not None}


def check(heads: int, kv_heads: int, d: int):
    """Every windowed runner against the fp64 reference on a small case (3000 tokens, a 700-key window)."""
    window = 700
    q, k, v = random_qkv(1, 3000, 3000, heads, kv_heads, d, torch.bfloat16, "cuda", seed=3)
    ref = attention_reference(q, k, v, causal=True, compute_dtype=torch.float64, window_size=(window - 1, -1))[0]
    for name, fn in runners(q, k, v, window).items():
        if name.endswith("-full"):
            continue
        err = rmse(fn().view(ref.shape), ref) / ref.float().pow(2).mean().sqrt().item()
        if not err < (0.1 if "fp8" in name else 0.01):
            raise SystemExit(f"{name}: relative RMSE {err:.2e} against fp64")


def plot(rows, path):
    """TFLOPS against the window, one panel per sequence length."""
    bench.plot_panels(rows, path, lambda r: r["seqlen"], "window", "window (keys)",
                      lambda seqlen: f"causal, {seqlen} tokens")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    parser.add_argument("--seqlens", type=ints, default=[16384, 65536])
    parser.add_argument("--windows", type=ints, default=[1024, 4096])
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--d", type=int, default=128, choices=(64, 128, 256))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=os.environ.get("OUT", "benchmarks/results"))
    args = parser.parse_args()
    if args.heads % args.kv_heads:
        parser.error(f"--heads ({args.heads}) must be a multiple of --kv-heads ({args.kv_heads})")
    gpu = torch.cuda.get_device_name()
    check(args.heads, args.kv_heads, args.d)
    rows = []
    for seqlen in args.seqlens:
        for window in args.windows:
            q, k, v = random_qkv(1, seqlen, seqlen, args.heads, args.kv_heads, args.d, torch.bfloat16, "cuda", seed=1)
            named = runners(q, k, v, window)
            runs = bench.interleaved_tflops(named, args.rounds, lambda name: window_flops(
                seqlen, None if name.endswith("-full") else window, args.heads, args.d))
            line = []
            for name, tflops in runs.items():
                median = bench.median(tflops)
                rows.append(dict(impl=name, seqlen=seqlen, window=window, tflops=round(median, 2),
                                 runs=[round(t, 2) for t in tflops]))
                line.append(f"{name} {median:7.2f}")
            print(f"{seqlen:6d} tokens window {window:5d}  " + "  ".join(line), flush=True)
            del q, k, v, named
            torch.cuda.empty_cache()
    meta = {"rounds": args.rounds, "heads": args.heads, "kv_heads": args.kv_heads, "d": args.d}
    print(f"wrote {bench.save_results(args.out, 'window', gpu, meta, rows, plot)}")


if __name__ == "__main__":
    main()
