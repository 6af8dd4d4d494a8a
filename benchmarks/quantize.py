"""FP8 quantization benchmark: fa3fp8's fused quantizer (Hadamard, per-block scales, V transposed) on the shapes a
prefill hands it, beside a plain device copy of the same input (the memory system's rate), on one GPU.

    python benchmarks/quantize.py [--out DIR]

One layer's Q (with the Hadamard rotation), K (likewise) and V (transposed, keys permuted, power-of-two scales), as
`quantize_qkv` runs them: Llama-3.1-8B's attention (32 query heads, 8 KV heads, d 128) at a 128K one-pass prefill
and at an 8K chunk, and the attention benchmark's S16K shape (16 heads). Inputs are (batch, heads, seq, d) tensors
seen as (tokens, heads, d), as transformers hands them to attention ("heads-major", read in place), or contiguous
(tokens, heads, d). Each setting (programs per SM, pipeline stages, warps) is timed and checked bit for bit against
the default's output; "per-tile" is one program per tile without a pipeline (the quantizer before it walked
tiles), and "per-tile+copy" adds the `.contiguous()` copy the heads-major input needed then. Reports ms (median of
triton.testing.do_bench), GB/s of bytes read and written, and the ratio to the copy's GB/s. `--out DIR` writes
quantize-<gpu>-<date>.json and a PNG there.
"""

import argparse
import datetime
import json
import sys
from pathlib import Path

import torch
import triton
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernels"))

import fa3fp8  # noqa: E402
from fa3fp8 import quantize  # noqa: E402
from fa3fp8.configs import fp8_blocks  # noqa: E402
from fa3fp8.testing import differing_fields  # noqa: E402

D = 128
SHAPES = {  # name -> (tokens, heads, kv_heads)
    "128K one pass, 32/8 heads": (131072, 32, 8),
    "8K chunk, 32/8 heads": (8192, 32, 8),
    "S16K, 16/16 heads": (16384, 16, 16),
}
SETTINGS = [(p, s, w) for p in (2, 4, 8) for s in (1, 2, 3) for w in (4, 8)]  # programs per SM, stages, warps
PER_TILE = 1 << 20  # programs per SM past any tile count: one program per tile


def timed(fn) -> float:
    return do_bench(fn, warmup=10, rep=60, return_mode="median")


def layer_inputs(tokens, heads, kv_heads, heads_major):
    """Random bf16 Q (tokens, heads, D), K and V (tokens, kv_heads, D), heads-major views or contiguous."""
    def make(h):
        if heads_major:
            return torch.randn(h, tokens, D, device="cuda", dtype=torch.bfloat16).transpose(0, 1)
        return torch.randn(tokens, h, D, device="cuda", dtype=torch.bfloat16)

    return make(heads), make(kv_heads), make(kv_heads)


def quantize_layer(q, k, v, programs_per_sm, stages, warps, copy=False):
    """quantize_qkv's three quantizer calls on one layer's Q, K, V, as its QuantizedQ and QuantizedKV; `copy` makes
    each input contiguous first."""
    block_m, block_n = fp8_blocks(D)
    tokens = q.shape[0]
    cu = torch.tensor([0, tokens], dtype=torch.int32, device=q.device)
    grid = {"programs_per_sm": programs_per_sm, "stages": stages, "num_warps": warps}
    if copy:
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    q8, q_scale, cu_blocks_q = quantize.quantize_blocks(q, cu, tokens, block_m, True, **grid)
    k8, k_scale, cu_blocks_k = quantize.quantize_blocks(k, cu, tokens, block_n, True, **grid)
    v8t, v_scale, _ = quantize.quantize_blocks(v, cu, tokens, block_n, False, transpose=True, permute=True,
                                               pow2_scale=True, **grid)
    return (fa3fp8.QuantizedQ(q8, q_scale, cu, cu_blocks_q, tokens, block_m, True, q.dtype, None),
            fa3fp8.QuantizedKV(k8, v8t, k_scale, v_scale, cu, cu_blocks_k, tokens, block_n, True, True))


def layer_bytes(q, k, v) -> int:
    """Bytes read (bf16) and written (e4m3, one fp32 scale per block) by one layer's quantization."""
    elements = q.numel() + k.numel() + v.numel()
    return 3 * elements + 4 * (q.numel() // (64 * D) + 2 * k.numel() // (128 * D))


def bench(rows, table):
    for shape, (tokens, heads, kv_heads) in SHAPES.items():
        for heads_major in (True, False):
            layout = "heads-major" if heads_major else "contiguous"
            q, k, v = layer_inputs(tokens, heads, kv_heads, heads_major)
            nbytes = layer_bytes(q, k, v)
            copy_ms = timed(lambda: (q.clone(), k.clone(), v.clone()))
            copy_gbps = 4 * (q.numel() + k.numel() + v.numel()) / (copy_ms * 1e-3) / 1e9
            rows.append({"shape": shape, "layout": layout, "impl": "copy", "ms": round(copy_ms, 4),
                         "gbps": round(copy_gbps, 1)})
            defaults = (quantize.PROGRAMS_PER_SM, *quantize.PIPELINE[D])
            default = quantize_layer(q, k, v, *defaults)
            variants = [("per-tile", PER_TILE, 1, 8, False)]  # 8 warps, as the quantizer had them then
            if heads_major:
                variants.append(("per-tile+copy", PER_TILE, 1, 8, True))
            variants += [(f"{p}/SM, {s} stages, {w} warps", p, s, w, False) for p, s, w in SETTINGS]
            for name, programs, stages, warps, copy in variants:
                ms = timed(lambda: quantize_layer(q, k, v, programs, stages, warps, copy))
                gbps = nbytes / (ms * 1e-3) / 1e9
                exact = not any(map(differing_fields, quantize_layer(q, k, v, programs, stages, warps, copy), default))
                rows.append({"shape": shape, "layout": layout, "impl": name, "programs_per_sm": programs,
                             "stages": stages, "warps": warps, "ms": round(ms, 4), "gbps": round(gbps, 1),
                             "vs_copy": round(gbps / copy_gbps, 3), "exact": exact,
                             "default": (programs, stages, warps) == defaults})
                table.append(f"{shape:28s} {layout:11s} {name:26s} {ms:8.3f} ms {gbps:7.0f} GB/s "
                             f"{gbps / copy_gbps:5.2f}x copy {'' if exact else ' MISMATCH'}")
            del q, k, v


def plot(rows, path):
    """GB/s of each setting, one panel per shape, heads-major input."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(SHAPES), figsize=(6 * len(SHAPES), 5), sharey=True)
    for ax, shape in zip(axes, SHAPES):
        picked = [r for r in rows if r["shape"] == shape and r["layout"] == "heads-major"]
        ax.barh([r["impl"] for r in picked], [r["gbps"] for r in picked],
                color=["gray" if r["impl"] == "copy" else "tab:blue" for r in picked])
        ax.set_title(shape)
        ax.set_xlabel("GB/s (read + written)")
        ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="folder for quantize-<gpu>-<date>.json and .png (not written without it)")
    args = parser.parse_args()
    rows, table = [], []
    bench(rows, table)
    gpu = torch.cuda.get_device_name()
    print("\n".join(table))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        stem = f"quantize-{gpu.replace(' ', '-').lower()}-{datetime.date.today().isoformat()}"
        versions = {"torch": torch.__version__, "triton": triton.__version__}
        (out / f"{stem}.json").write_text(json.dumps({"gpu": gpu, **versions, "d": D, "rows": rows}, indent=1))
        plot(rows, out / f"{stem}.png")
        print(f"wrote {out / stem}.json")


if __name__ == "__main__":
    main()
