"""Decode attention benchmark: fa3fp8's split-KV kernel (`flash_attn_decode_func`) beside SDPA (enable_gqa) and
the worker's "matmul" decode, one query token per sequence over a bf16 KV cache, on one GPU.

    python benchmarks/decode.py [--out DIR] [--sweep]

Llama-3.1-8B's attention shape (32 query heads, 8 KV heads, d 128), contexts 8K/32K/128K, batch 1 and 8. The
caches are sliced from one (batch, 128K, kv_heads, d) buffer per batch size, as the worker's preallocated cache
(worker/llm/kv_cache.py) holds them; every peer reads the same memory (SDPA and matmul through the
(batch, kv_heads, seq, d) view transformers passes them). Reports
ms (median of triton.testing.do_bench, L2 flushed before each call), GB/s of K and V read, fa3fp8's host
enqueue time and its relative error against SDPA. `--sweep` also times the kernel's tile configs and split
counts at 128K (each checked against the default). `--out DIR` writes decode-<gpu>-<date>.json there.
"""

import argparse
import datetime
import itertools
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernels"))

import fa3fp8  # noqa: E402
from fa3fp8.decode import TILES, WAVES, decode_fwd, split_plan  # noqa: E402
from fa3fp8.gpu import sm_count  # noqa: E402
from fa3fp8.testing import host_ms  # noqa: E402

HEADS, KV_HEADS, D = 32, 8, 128
CONTEXTS = (8192, 32768, 131072)
BATCHES = (1, 8)
SWEEP_TILES = list(itertools.product((32, 64, 128), (4, 8), (2, 3, 4)))  # block_n, num_warps, num_stages
SWEEP_SPLIT_FACTORS = (0.5, 2, 4)


def timed(fn) -> float:
    return do_bench(fn, warmup=25, rep=100, return_mode="median")


def decode_matmul(query, key, value, scaling):
    """worker/llm/attention.py `_decode_matmul`'s math: query (B, H, 1, d), key/value (B, Hkv, S, d)."""
    batch, heads, _, dim = query.shape
    rows = query.reshape(batch, key.shape[1], heads // key.shape[1], dim)
    scores = torch.matmul(rows, key.transpose(2, 3)).float() * scaling
    out = torch.matmul(torch.softmax(scores, dim=-1).to(value.dtype), value)
    return out.reshape(batch, heads, 1, dim).transpose(1, 2)


def kv_gbps(batch, context, ms) -> float:
    return 2 * batch * context * KV_HEADS * D * 2 / (ms * 1e-3) / 1e9


def rel_err(x, ref) -> float:
    return ((x.float() - ref.float()).norm() / ref.float().norm()).item()


def bench(caches, queries, rows, table):
    scale = D**-0.5
    for batch, context in itertools.product(BATCHES, CONTEXTS):
        k_buf, v_buf = caches[batch]
        kt, vt = k_buf[:, :context], v_buf[:, :context]  # (B, S, Hkv, d) for fa3fp8
        k, v = kt.transpose(1, 2), vt.transpose(1, 2)  # (B, Hkv, S, d) views for SDPA and matmul
        q = queries[batch]  # (B, H, d)
        q4 = q[:, :, None]
        runners = {
            "fa3fp8": lambda: fa3fp8.flash_attn_decode_func(q, kt, vt),
            "sdpa": lambda: F.scaled_dot_product_attention(q4, k, v, scale=scale, enable_gqa=True),
            "matmul": lambda: decode_matmul(q4, k, v, scale),
        }
        reference = runners["sdpa"]()[:, :, 0]
        err = rel_err(runners["fa3fp8"](), reference)
        err_matmul = rel_err(runners["matmul"]()[:, 0], reference)
        times = {impl: timed(fn) for impl, fn in runners.items()}
        host = host_ms(runners["fa3fp8"], calls=50)
        splits, chunk = split_plan(batch * KV_HEADS, context, TILES[D][0], sm_count(torch.device("cuda", 0)))
        for impl, ms in times.items():
            row = dict(impl=impl, batch=batch, context=context, ms=round(ms, 4),
                       kv_gbps=round(kv_gbps(batch, context, ms), 1))
            if impl == "fa3fp8":
                row.update(host_ms=round(host, 4), rel_err_vs_sdpa=err, splits=splits, chunk=chunk)
            if impl == "matmul":
                row.update(rel_err_vs_sdpa=err_matmul)
            rows.append(row)
            table.append(f"{impl:7s} B{batch} ctx {context:>6d}  {ms:8.4f} ms  {row['kv_gbps']:7.1f} GB/s"
                         f"  {ms / times['fa3fp8']:5.2f}x fa3fp8's time")
        table.append(f"{'':7s} B{batch} ctx {context:>6d}  fa3fp8: {splits} splits of {chunk} keys, host "
                     f"{host:.4f} ms/call, rel err vs SDPA {err:.1e} (matmul {err_matmul:.1e})")
        print("\n".join(table[-len(times) - 1 :]), flush=True)


def sweep(caches, queries, results, table):
    """Tile configs at the default split count, then split counts around the default for the fastest tile."""
    context = CONTEXTS[-1]
    sms = sm_count(torch.device("cuda", 0))
    for batch in BATCHES:
        k_buf, v_buf = caches[batch]
        kt, vt, q = k_buf[:, :context], v_buf[:, :context], queries[batch]
        reference, _ = decode_fwd(q, kt, vt, None, D**-0.5)
        timings = {}
        for block_n, warps, stages in SWEEP_TILES:
            run = lambda: decode_fwd(q, kt, vt, None, D**-0.5, block_n=block_n, num_warps=warps,  # noqa: E731
                                     num_stages=stages)
            entry = dict(batch=batch, context=context, block_n=block_n, num_warps=warps, num_stages=stages,
                         splits=split_plan(batch * KV_HEADS, context, block_n, sms)[0])
            try:
                entry["rel_err_vs_default"] = rel_err(run()[0], reference)
                entry["ms"] = round(timed(run), 4)
                entry["kv_gbps"] = round(kv_gbps(batch, context, entry["ms"]), 1)
                timings[(block_n, warps, stages)] = entry["ms"]
            except Exception as exc:  # a config over the shared-memory budget: record it and go on
                entry["error"] = f"{type(exc).__name__}: {exc}"[:200]
            results.append(entry)
            table.append(f"sweep B{batch} ctx {context} BLOCK_N {block_n:3d} w{warps} s{stages} "
                         f"{entry.get('splits')} splits: " + (f"{entry['ms']:.4f} ms {entry['kv_gbps']:7.1f} GB/s"
                                                              f" err {entry['rel_err_vs_default']:.1e}"
                                                              if "ms" in entry else entry["error"]))
            print(table[-1], flush=True)
        block_n, warps, stages = min(timings, key=timings.get)
        default_splits = split_plan(batch * KV_HEADS, context, block_n, sms)[0]
        for factor in SWEEP_SPLIT_FACTORS:
            splits = max(1, math.ceil(default_splits * factor))
            run = lambda: decode_fwd(q, kt, vt, None, D**-0.5, num_splits=splits, block_n=block_n,  # noqa: E731
                                     num_warps=warps, num_stages=stages)
            ms = round(timed(run), 4)
            results.append(dict(batch=batch, context=context, block_n=block_n, num_warps=warps, num_stages=stages,
                                splits=splits, rel_err_vs_default=rel_err(run()[0], reference), ms=ms,
                                kv_gbps=round(kv_gbps(batch, context, ms), 1)))
            table.append(f"sweep B{batch} ctx {context} BLOCK_N {block_n:3d} w{warps} s{stages} {splits} splits "
                         f"({factor}x the {WAVES}-wave default): {ms:.4f} ms {results[-1]['kv_gbps']:7.1f} GB/s")
            print(table[-1], flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="folder for decode-<gpu>-<date>.json (not written without it)")
    parser.add_argument("--sweep", action="store_true", help="also sweep tile configs and split counts at 128K")
    args = parser.parse_args()
    started = time.perf_counter()
    gen = torch.Generator(device="cuda").manual_seed(0)
    caches = {b: tuple(torch.randn(b, CONTEXTS[-1], KV_HEADS, D, generator=gen, device="cuda", dtype=torch.bfloat16)
                       for _ in range(2)) for b in BATCHES}
    queries = {b: torch.randn(b, HEADS, D, generator=gen, device="cuda", dtype=torch.bfloat16) for b in BATCHES}
    rows, sweep_rows, table = [], [], []
    bench(caches, queries, rows, table)
    if args.sweep:
        sweep(caches, queries, sweep_rows, table)
    gpu = torch.cuda.get_device_name()
    print("\n".join(table))
    print(f"benchmark took {time.perf_counter() - started:.1f} s")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"decode-{gpu.replace(' ', '-').lower()}-{datetime.date.today().isoformat()}.json"
        versions = {"torch": torch.__version__, "triton": triton.__version__}
        shape = {"heads": HEADS, "kv_heads": KV_HEADS, "d": D, "dtype": "bf16"}
        path.write_text(json.dumps({"gpu": gpu, **versions, "shape": shape, "rows": rows, "sweep": sweep_rows},
                                   indent=1))
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
