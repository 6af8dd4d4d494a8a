"""FP8 quantization benchmark: fa3fp8's fused quantizer (Hadamard, per-block scales, V transposed) on the shapes a
prefill hands it, beside a plain device copy of the same input (the memory system's rate), on one GPU.

    python benchmarks/quantize.py [--out DIR] [--layers-only]

One layer's Q (with the Hadamard rotation), K (likewise) and V (transposed, keys permuted, power-of-two scales), as
`quantize_qkv` runs them: Llama-3.1-8B's attention (32 query heads, 8 KV heads, d 128) at a 128K one-pass prefill
and at an 8K chunk, and the attention benchmark's S16K shapes (16 heads of d128, 8 of d256, 32 of d64). Inputs are
(batch, heads, seq, d) tensors seen as (tokens, heads, d), as transformers hands them to attention ("heads-major", read
in place), or contiguous (tokens, heads, d). Whole layers: the default (the three parts in one launch), that launch
at each number of warps, "three launches" (a launch per part, as before session 38), "per-tile" (a launch per part,
one program per tile without a pipeline, as the quantizer first ran), "per-tile+copy" (with the `.contiguous()` copy
the heads-major input needed then) and "no Hadamard" (`hadamard=False`), with two times: `ms`, the median of
triton.testing.do_bench (back-to-back calls on the stream; where the host takes longer to enqueue the launches than
the GPU to run them, this is host time), and `gpu_ms`, the mean over replays of a CUDA graph of the same calls
(GPU time alone), which GB/s and the ratio to the copy's rate are from. Then each part alone under every setting of
its head dim (programs per SM, pipeline stages, warps: quantize.PIPELINE's choices come from here), in GPU time, its
output checked bit for bit against the defaults'. `--out DIR` writes quantize-<gpu>-<date>.json and a PNG there.
"""

import argparse
import datetime
import functools
import json
import sys
from pathlib import Path

import torch
import triton
from triton.runtime.errors import OutOfResources
from triton.testing import do_bench, do_bench_cudagraph

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernels"))

from fa3fp8 import quantize  # noqa: E402
from fa3fp8.configs import fp8_blocks  # noqa: E402
from fa3fp8.testing import same_quantized  # noqa: E402

SHAPES = {  # name -> (tokens, heads, kv_heads, head dim)
    "128K one pass, 32/8 heads": (131072, 32, 8, 128),
    "8K chunk, 32/8 heads": (8192, 32, 8, 128),
    "S16K, 16/16 heads": (16384, 16, 16, 128),
    "S16K d256, 8/8 heads": (16384, 8, 8, 256),
    "S16K d64, 32/32 heads": (16384, 32, 32, 64),
}
PARTS = ("Q", "K", "V")
# head dim -> the settings (programs per SM, pipeline stages, warps) each part is timed with
SETTINGS = {
    64: [(p, s, w) for p in (2, 4, 8) for s in (1, 2, 3) for w in (4, 8)],
    128: [(p, s, w) for p in (2, 4, 8) for s in (1, 2, 3) for w in (4, 8)],
    256: [(p, s, w) for p in (1, 2, 4) for s in (1, 2) for w in (4, 8, 16)],
}
PER_TILE = 1 << 20  # programs per SM past any tile count: one program per tile
ONE_LAUNCH_WARPS = {64: (4, 8), 128: (4, 8), 256: (8, 16)}  # head dim -> warps the one launch of a layer is timed with


def gpu_time(fn) -> float:
    """ms of GPU time of one call of fn: the mean over replays of a CUDA graph of it."""
    fn()  # compiles, and caches what the calls look up (the Hadamard matrix) before the graph is captured
    return do_bench_cudagraph(fn, rep=60)


def timed(fn) -> tuple[float, float]:
    """(ms on the stream, ms of GPU time) of one call of fn: do_bench's median, and gpu_time."""
    gpu_ms = gpu_time(fn)
    return do_bench(fn, warmup=10, rep=60, return_mode="median"), gpu_ms


def layer_inputs(tokens, heads, kv_heads, d, heads_major):
    """Random bf16 Q (tokens, heads, d), K and V (tokens, kv_heads, d), heads-major views or contiguous."""
    def make(h):
        if heads_major:
            return torch.randn(h, tokens, d, device="cuda", dtype=torch.bfloat16).transpose(0, 1)
        return torch.randn(tokens, h, d, device="cuda", dtype=torch.bfloat16)

    return make(heads), make(kv_heads), make(kv_heads)


def quantize_part(part, x, cu, setting=None, copy=False, hadamard=True):
    """quantize_qkv's quantizer call for one part ("Q", "K" or "V") of a layer, one sequence (cu its cu_seqlens);
    `setting` (programs per SM, stages, warps) or None for the quantizer's own; `copy` makes x contiguous first."""
    block_m, block_n = fp8_blocks(x.shape[-1])
    grid = {} if setting is None else dict(zip(("programs_per_sm", "stages", "num_warps"), setting))
    if copy:
        x = x.contiguous()
    if part == "V":
        return quantize.quantize_blocks(x, cu, x.shape[0], block_n, False, transpose=True, permute=True,
                                        pow2_scale=True, **grid)
    return quantize.quantize_blocks(x, cu, x.shape[0], block_m if part == "Q" else block_n, hadamard, **grid)


def quantize_apart(q, k, v, cu, setting=None, copy=False, hadamard=True):
    """The three parts of one layer, a launch each: their outputs, Q's, K's and V's."""
    return [quantize_part(part, x, cu, setting, copy, hadamard) for part, x in zip(PARTS, (q, k, v))]


def quantize_layer(q, k, v, cu, num_warps=None, hadamard=True):
    """The three parts of one layer in one launch, as quantize_qkv runs them (`num_warps` None: the quantizer's):
    their outputs, Q's, K's and V's."""
    block_m, block_n = fp8_blocks(q.shape[-1])
    tokens = q.shape[0]
    return quantize.quantize_qkv_blocks(q, k, v, cu, cu, tokens, tokens, block_m, block_n, hadamard, True, num_warps)


def layer_bytes(x, block) -> int:
    """Bytes read (bf16) and written (e4m3, one fp32 scale per block) by quantizing x."""
    return 3 * x.numel() + 4 * x.numel() // (block * x.shape[-1])


def bench_layers(rows, table):
    """Each shape's whole layer, heads-major and contiguous: a copy, one launch (at each warps setting), a launch per
    part, one program per tile, no Hadamard."""
    for shape, (tokens, heads, kv_heads, d) in SHAPES.items():
        cu = torch.tensor([0, tokens], dtype=torch.int32, device="cuda")
        block_m, block_n = fp8_blocks(d)
        for heads_major in (True, False):
            layout = "heads-major" if heads_major else "contiguous"
            q, k, v = layer_inputs(tokens, heads, kv_heads, d, heads_major)
            nbytes = layer_bytes(q, block_m) + layer_bytes(k, block_n) + layer_bytes(v, block_n)
            copy_ms, copy_gpu_ms = timed(lambda: (q.clone(), k.clone(), v.clone()))
            copy_gbps = 4 * (q.numel() + k.numel() + v.numel()) / (copy_gpu_ms * 1e-3) / 1e9
            rows.append({"shape": shape, "layout": layout, "part": "layer", "impl": "copy", "ms": round(copy_ms, 4),
                         "gpu_ms": round(copy_gpu_ms, 4), "gbps": round(copy_gbps, 1)})
            default = quantize_layer(q, k, v, cu)
            per_tile = (PER_TILE, 1, 8)  # 8 warps, as the quantizer had them then
            variants = [("default", lambda: quantize_layer(q, k, v, cu))]
            variants += [(f"one launch, {w} warps", functools.partial(quantize_layer, q, k, v, cu, w))
                         for w in ONE_LAUNCH_WARPS[d]]
            variants += [("three launches", lambda: quantize_apart(q, k, v, cu)),
                         ("per-tile", lambda: quantize_apart(q, k, v, cu, per_tile))]
            if heads_major:
                variants.append(("per-tile+copy", lambda: quantize_apart(q, k, v, cu, per_tile, copy=True)))
            variants.append(("no Hadamard", lambda: quantize_layer(q, k, v, cu, hadamard=False)))
            for name, run in variants:
                hadamard = name != "no Hadamard"
                ms, gpu_ms = timed(run)
                gbps = nbytes / (gpu_ms * 1e-3) / 1e9
                exact = None  # without the rotation: other data
                if hadamard:
                    exact = all(same_quantized(part == "V", a, b) for part, a, b in zip(PARTS, run(), default))
                rows.append({"shape": shape, "layout": layout, "part": "layer", "impl": name, "ms": round(ms, 4),
                             "gpu_ms": round(gpu_ms, 4), "gbps": round(gbps, 1), "vs_copy": round(gbps / copy_gbps, 3),
                             "exact": exact})
                table.append(f"{shape:28s} {layout:11s} {name:20s} {ms:8.3f} ms {gpu_ms:8.3f} ms GPU {gbps:7.0f} GB/s "
                             f"{gbps / copy_gbps:5.2f}x copy{'  MISMATCH' if exact is False else ''}")
            del q, k, v


def sweep_parts(rows, table):
    """Each part of each shape (heads-major, as transformers hands it) under every setting of its head dim, in GPU
    time, checked bit for bit against the defaults' output; the table gives each part's default and best."""
    for shape, (tokens, heads, kv_heads, d) in SHAPES.items():
        cu = torch.tensor([0, tokens], dtype=torch.int32, device="cuda")
        for part, x in zip(PARTS, layer_inputs(tokens, heads, kv_heads, d, heads_major=True)):
            default = quantize_part(part, x, cu)
            timings = {}
            for setting in [None, *SETTINGS[d]]:
                name = "default" if setting is None else "{}/SM, {} stages, {} warps".format(*setting)
                try:
                    gpu_ms = gpu_time(lambda: quantize_part(part, x, cu, setting))
                except OutOfResources:  # more shared memory than a program may have
                    continue
                exact = same_quantized(part == "V", quantize_part(part, x, cu, setting), default)
                timings[name] = gpu_ms
                rows.append({"shape": shape, "layout": "heads-major", "part": part, "impl": name,
                             "setting": setting, "gpu_ms": round(gpu_ms, 4), "exact": exact})
            best = min(timings, key=timings.get)
            table.append(f"{shape:28s} {part}  default {timings['default'] * 1e3:6.1f} us   best {best:26s} "
                         f"{timings[best] * 1e3:6.1f} us")


def plot(rows, path):
    """GB/s of the copy and of each whole-layer variant, one panel per shape, heads-major input."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(SHAPES), figsize=(6 * len(SHAPES), 5), sharey=True)
    for ax, shape in zip(axes, SHAPES):
        picked = [r for r in rows if r["shape"] == shape and r["layout"] == "heads-major" and r["part"] == "layer"]
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
    parser.add_argument("--layers-only", action="store_true", help="whole layers only, no sweep of the parts")
    args = parser.parse_args()
    rows, table = [], []
    bench_layers(rows, table)
    if not args.layers_only:
        sweep_parts(rows, table)
    gpu = torch.cuda.get_device_name()
    print("\n".join(table))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        stem = f"quantize-{gpu.replace(' ', '-').lower()}-{datetime.date.today().isoformat()}"
        versions = {"torch": torch.__version__, "triton": triton.__version__}
        (out / f"{stem}.json").write_text(json.dumps({"gpu": gpu, **versions, "rows": rows}, indent=1))
        plot(rows, out / f"{stem}.png")
        print(f"wrote {out / stem}.json")


if __name__ == "__main__":
    main()
