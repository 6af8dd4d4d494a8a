"""FP8 attention's error in FlashAttention-3's accuracy test (its Table 3 method): RMSE against fp64 attention on
entries drawn N(0, 1) + N(0, 100)·Bernoulli(0.001), the mean over fixed draws, for fa3fp8's FP8 (per-block scales and
the Hadamard rotation; on a GPU the kernel the API picks, on the CPU the reference) beside three variants in the
reference's FP8 math (`fa3fp8.reference`, P rounded to e4m3 as the kernels round it):

- `block`: per-block scales without the rotation;
- `per-tensor+rotation`: one scale per tensor and head, rotated;
- `per-tensor`: one scale per tensor and head without the rotation, the plain FP8 that the issue's 2.5x target
  (FlashAttention-3's 2.6x) is measured against;
- `qk-floor`: Q and K quantized as fa3fp8 quantizes them, V and P exact: the error e4m3's Q·Kᵀ leaves on its own,
  so plain FP8's error over it bounds the gain of any FP8 attention whose Q·Kᵀ runs on Q and K rotated so.

The shapes are the GPU tests' (tests/kernels/test_attention_gpu.py): d128 without a mask, d128 causal with GQA 4:1,
d256 without a mask, d64 causal.

    python benchmarks/fp8_accuracy.py [--draws 8] [--device cuda|cpu] [--out DIR]

Prints RMSE per shape and variant, the plain FP8's error over fa3fp8's (the gain) and over the floor (the bound); writes
fp8-accuracy-<gpu>-<date>.json and a PNG.
"""

import argparse
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import attention as bench  # noqa: E402
import fa3fp8  # noqa: E402
from fa3fp8.reference import (  # noqa: E402
    attention_fp8_reference,
    attention_reference,
    dequantize,
    quantize_qkv_reference,
)
from fa3fp8.testing import random_qkv, rmse  # noqa: E402

SHAPE_FIELDS = ("batch", "seqlen", "heads", "kv_heads", "d", "causal")
SHAPES = [
    (2, 2048, 8, 8, 128, False),
    (2, 2048, 8, 2, 128, True),
    (1, 1500, 4, 4, 256, False),
    (2, 700, 8, 8, 64, True),
]
VARIANTS = {
    "block": dict(hadamard=False, per_tensor=False),
    "per-tensor+rotation": dict(hadamard=True, per_tensor=True),
    "per-tensor": dict(hadamard=False, per_tensor=True),
}
COLUMNS = ("fa3fp8", *VARIANTS, "qk-floor")  # each shape's errors, in the order printed and plotted


def shape_errors(shape, draws: int, device: str) -> dict[str, float]:
    """Mean RMSE against fp64 over draws 0 .. draws - 1 of `shape` (SHAPE_FIELDS' values), one per COLUMNS:
    fa3fp8's FP8, each of VARIANTS quantized in the same blocks as fa3fp8's bundle, and the Q·Kᵀ floor (qk_floor)."""
    batch, seqlen, heads, kv_heads, d, causal = shape
    totals = dict.fromkeys(COLUMNS, 0.0)
    for seed in range(draws):
        q, k, v = random_qkv(batch, seqlen, seqlen, heads, kv_heads, d, torch.bfloat16, device, seed=seed,
                             outliers=True)
        ref, _ = attention_reference(q, k, v, causal=causal, compute_dtype=torch.float64)
        qkv = fa3fp8.quantize_qkv(q, k, v)
        totals["fa3fp8"] += rmse(fa3fp8.flash_attn_fp8_func(qkv, causal=causal), ref)
        packed = [x.reshape(-1, *x.shape[2:]) for x in (q, k, v)]
        for name, options in VARIANTS.items():
            bundle = quantize_qkv_reference(*packed, qkv.cu_seqlens_q, qkv.cu_seqlens_k, qkv.block_m, qkv.block_n,
                                            **options)
            out, _ = attention_fp8_reference(bundle, causal=causal)
            totals[name] += rmse(out, ref.reshape(out.shape))
        totals["qk-floor"] += rmse(qk_floor(qkv, v, causal), ref)
    return {name: total / draws for name, total in totals.items()}


def qk_floor(qkv, v, causal):
    """Attention in fp64 on the bundle's dequantized (rotated) Q and K with v as it is: Q·Kᵀ's e4m3 error alone.
    The rotation is the same orthogonal map for Q and K, so their products need no undoing."""
    q = dequantize(qkv.q8, qkv.q_scale, qkv.cu_seqlens_q, qkv.block_m).reshape(v.shape[0], -1, *qkv.q8.shape[1:])
    k = dequantize(qkv.k8, qkv.k_scale, qkv.cu_seqlens_k, qkv.block_n).reshape(v.shape)
    out, _ = attention_reference(q, k, v, causal=causal, compute_dtype=torch.float64)
    return out


def shape_label(row) -> str:
    """d128 causal GQA 4:1, and the like."""
    gqa = f" GQA {row['heads'] // row['kv_heads']}:1" if row["heads"] != row["kv_heads"] else ""
    return f"d{row['d']} {'causal' if row['causal'] else 'full'}{gqa}"


def plot(rows, path):
    """RMSE per shape, a bar per variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(COLUMNS)
    for i, name in enumerate(COLUMNS):
        ax.bar([x + i * width for x in range(len(rows))], [r["rmse"][name] for r in rows], width, label=name)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(rows))], [shape_label(r) for r in rows])
    ax.set(ylabel="RMSE against fp64", title="FP8 attention on FlashAttention-3's outlier distribution")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--draws", type=int, default=8)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=("cuda", "cpu"))
    parser.add_argument("--out", default=os.environ.get("OUT", "benchmarks/results"))
    args = parser.parse_args()
    if args.draws < 1:
        parser.error(f"--draws must be at least 1, not {args.draws}")
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"{'shape':24s} {'fa3fp8':>9s}" + "".join(f" {name:>20s}" for name in COLUMNS[1:]) + "   gain  bound")
    rows = []
    for shape in SHAPES:
        errors = shape_errors(shape, args.draws, args.device)
        row = dict(zip(SHAPE_FIELDS, shape), rmse=errors, gain=round(errors["per-tensor"] / errors["fa3fp8"], 3),
                   bound=round(errors["per-tensor"] / errors["qk-floor"], 3))
        rows.append(row)
        print(f"{shape_label(row):24s} {errors['fa3fp8']:9.3e}" + "".join(f" {errors[n]:20.3e}" for n in COLUMNS[1:])
              + f"  {row['gain']:5.2f}x {row['bound']:5.2f}x", flush=True)
    print(f"wrote {bench.save_results(args.out, 'fp8-accuracy', gpu, {'draws': args.draws}, rows, plot)}")


if __name__ == "__main__":
    main()
