"""Attention forward benchmark: fa3fp8 (bf16, fp8 kernel-only, fp8 + quantization) beside SDPA's cuDNN and flash
backends (and cuDNN's own FP8 attention when the `cudnn` frontend is importable), on one GPU.

    python benchmarks/attention.py bench [--quick | --seqlens 4096,16384] [--out DIR]   # table, JSON and PNG
    python benchmarks/attention.py sweep [--out DIR]             # every kept config: checked, timed, SASS facts
    python benchmarks/attention.py kernels [--seqlens 4096,16384] [--prefill-shape] [--out DIR]
                                          # the forward kernels side by side, S=16K by default
                                          # (and the 128K prefill's FP8 attention)

16K tokens per batch, hidden 2048 (heads = 2048 / d); TFLOPS = 4·B·H·S²·d / t, halved when causal.
Peers are timed interleaved, shape by shape, median of triton.testing.do_bench; bench rows carry the median SM clock
and board power while each was timed (gpu_clocks.py: the cards run attention at their power limit).
"""

import argparse
import datetime
import json
import os
import re
import sys
from pathlib import Path

import torch
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernels"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import fa3fp8  # noqa: E402
from fa3fp8 import configs  # noqa: E402
from fa3fp8.attention import attention_fwd  # noqa: E402
from fa3fp8.reference import attention_fp8_reference, attention_reference, quantize_qkv_reference  # noqa: E402
from fa3fp8.testing import host_ms, random_qkv, rmse  # noqa: E402
from gpu_clocks import sampled, torch_device_reader  # noqa: E402

TOKENS, HIDDEN = 16384, 2048
HEAD_DIMS = (64, 128, 256)
SEQLENS = (1024, 4096, 16384, 65536)


def flops(batch, heads, seqlen, d, causal):
    """Forward FLOPs of attention over a square (seqlen x seqlen) score matrix."""
    return 4 * batch * heads * seqlen * seqlen * d / (2 if causal else 1)


def shape_for(seqlen, d, tokens=TOKENS):
    """(batch, heads) of the benchmark shape at this length and head dim: `tokens` per batch, hidden HIDDEN."""
    return max(1, tokens // seqlen), HIDDEN // d


MIN_RUNS = 25  # do_bench's rep is a time: a 35 ms call (S64K) would otherwise be timed ~4 times


def timed(fn):
    """Median milliseconds of `fn` over at least 150 ms and MIN_RUNS calls."""
    estimate = do_bench(fn, warmup=1, rep=1, return_mode="median")
    return do_bench(fn, warmup=25, rep=max(150.0, MIN_RUNS * estimate), return_mode="median")


def interleaved_tflops(named, rounds, flops_of):
    """{name: [TFLOPS per round]} of the closures in `named`, each timed once per round, rounds interleaved so that
    clock and power drift fall on all of them alike; flops_of(name) is the FLOPs of one call."""
    runs = {name: [] for name in named}
    for _ in range(rounds):
        for name, fn in named.items():
            runs[name].append(flops_of(name) / timed(fn) / 1e9)
    return runs


def median(values):
    """The middle value (the upper one of an even count)."""
    return sorted(values)[len(values) // 2]


def save_results(out, prefix, gpu, meta, rows, plot) -> Path:
    """Write {"gpu", **meta, "rows"} as <prefix>-<gpu>-<date>.json under `out` and plot(rows, <same>.png) beside it;
    returns the JSON's path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{prefix}-{gpu.replace(' ', '-').lower()}-{datetime.date.today().isoformat()}"
    stem.with_suffix(".json").write_text(json.dumps({"gpu": gpu, **meta, "rows": rows}, indent=1))
    plot(rows, stem.with_suffix(".png"))
    return stem.with_suffix(".json")


def plot_panels(rows, path, panel, x, xlabel, title):
    """TFLOPS against row[x] (log scale), a line per impl, a panel per value of panel(row), titled title(value)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({panel(r) for r in rows})
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, value in zip(axes[0], panels):
        chosen = [r for r in rows if panel(r) == value]
        for impl in dict.fromkeys(r["impl"] for r in chosen):
            ax.plot(*zip(*sorted((r[x], r["tflops"]) for r in chosen if r["impl"] == impl)), marker="o", label=impl)
        ax.set(xscale="log", xlabel=xlabel, ylabel="TFLOPS", title=title(value))
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def sdpa_runner(backend, q, k, v, causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
    chosen = {"sdpa-cudnn": SDPBackend.CUDNN_ATTENTION, "sdpa-flash": SDPBackend.FLASH_ATTENTION}[backend]

    def run():
        with sdpa_kernel(chosen):
            return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)

    return run


def cudnn_fp8_runner(q, k, v, causal):
    """cuDNN's FP8 attention through the cudnn frontend (e4m3 in and out), or None when it is not installed."""
    try:
        import cudnn
    except ImportError:
        return None
    batch, seqlen, heads, d = q.shape
    qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
    amax = [x.abs().amax().float() for x in (qt, kt, vt)]
    q8, k8, v8 = ((x.float() * (448.0 / a)).to(torch.float8_e4m3fn) for x, a in zip((qt, kt, vt), amax))
    o8 = torch.empty_like(q8)
    one = torch.ones(1, 1, 1, 1, device="cuda", dtype=torch.float32)
    descale = [(a / 448.0).reshape(1, 1, 1, 1) for a in amax]
    handle = cudnn.create_handle()
    cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
    graph = cudnn.pygraph(io_data_type=cudnn.data_type.FP8_E4M3, intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT, handle=handle)
    tensors = {name: graph.tensor_like(t) for name, t in
               dict(q=q8, k=k8, v=v8, dq=descale[0], dk=descale[1], dv=descale[2], ds=one, sp=one, so=one).items()}
    o, _, amax_s, amax_o = graph.sdpa_fp8(
        q=tensors["q"], k=tensors["k"], v=tensors["v"], descale_q=tensors["dq"], descale_k=tensors["dk"],
        descale_v=tensors["dv"], descale_s=tensors["ds"], scale_s=tensors["sp"], scale_o=tensors["so"],
        is_inference=True, attn_scale=d**-0.5, use_causal_mask=causal,
    )
    o.set_output(True).set_dim(o8.shape).set_stride(o8.stride())
    for t in (amax_s, amax_o):
        t.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(cudnn.data_type.FLOAT)
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A])
    graph.check_support()
    graph.build_plans()
    amax_buf = [torch.empty(1, 1, 1, 1, device="cuda") for _ in range(2)]
    pack = {tensors["q"]: q8, tensors["k"]: k8, tensors["v"]: v8, tensors["dq"]: descale[0],
            tensors["dk"]: descale[1], tensors["dv"]: descale[2], tensors["ds"]: one, tensors["sp"]: one,
            tensors["so"]: one, o: o8, amax_s: amax_buf[0], amax_o: amax_buf[1]}
    workspace = torch.empty(graph.get_workspace_size(), device="cuda", dtype=torch.uint8)
    return lambda: graph.execute(pack, workspace, handle=handle)


def cudnn_fp8_peer(q, k, v, causal, where):
    """cudnn_fp8_runner's runner, or None with the reason on stderr (no cudnn frontend, or a plan it cannot build)."""
    try:
        runner = cudnn_fp8_runner(q, k, v, causal)
    except Exception as exc:
        print(f"cudnn-fp8 unavailable at {where}: {exc}", file=sys.stderr)
        return None
    if runner is None:
        print(f"cudnn-fp8 unavailable at {where}: the cudnn frontend is not importable", file=sys.stderr)
    return runner


def bench(args):
    rows, table = [], []
    seqlens = args.seqlens if args.seqlens is not None else (1024, 16384) if args.quick else SEQLENS
    gpu = torch.cuda.get_device_name()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"attention-{gpu.replace(' ', '-').lower()}-{datetime.date.today().isoformat()}"
    result = out / f"{stem}.json"
    read_clocks = torch_device_reader()
    for d in HEAD_DIMS:
        for seqlen in seqlens:
            for causal in (False, True):
                batch, heads = shape_for(seqlen, d)
                q, k, v = random_qkv(batch, seqlen, seqlen, heads, heads, d, torch.bfloat16, "cuda", seed=seqlen + d)
                qkv = fa3fp8.quantize_qkv(q, k, v)
                runners = {
                    ("fa3fp8", "bf16"): lambda: fa3fp8.flash_attn_func(q, k, v, causal=causal),
                    ("fa3fp8", "fp8"): lambda: fa3fp8.flash_attn_fp8_func(qkv, causal=causal),
                    ("fa3fp8", "fp8+quant"): lambda: fa3fp8.flash_attn_func(q, k, v, causal=causal, fp8=True),
                    ("sdpa-cudnn", "bf16"): sdpa_runner("sdpa-cudnn", q, k, v, causal),
                    ("sdpa-flash", "bf16"): sdpa_runner("sdpa-flash", q, k, v, causal),
                }
                runner = cudnn_fp8_peer(q, k, v, causal, f"d{d} S{seqlen}")
                if runner is not None:
                    runners[("cudnn-fp8", "fp8")] = runner
                # correctness spot check against cuDNN before timing
                ours = runners[("fa3fp8", "bf16")]().float()
                theirs = runners[("sdpa-cudnn", "bf16")]().transpose(1, 2).float()
                err = ((ours - theirs).norm() / theirs.norm()).item()
                err8 = ((runners[("fa3fp8", "fp8")]().float() - theirs).norm() / theirs.norm()).item()
                times, clocks = {}, {}
                for key, fn in runners.items():
                    times[key], clocks[key] = sampled(lambda: timed(fn), read_clocks)
                quant_ms = timed(lambda: fa3fp8.quantize_qkv(q, k, v))
                host = {key: host_ms(runners[key]) for key in [("fa3fp8", "bf16"), ("fa3fp8", "fp8+quant")]}
                quant_host = host_ms(lambda: fa3fp8.quantize_qkv(q, k, v))
                cudnn_tflops = flops(batch, heads, seqlen, d, causal) / times[("sdpa-cudnn", "bf16")] / 1e9
                for (impl, dtype), ms in times.items():
                    tflops = flops(batch, heads, seqlen, d, causal) / ms / 1e9
                    row = dict(impl=impl, dtype=dtype, d=d, S=seqlen, causal=causal, tflops=round(tflops, 1),
                               ms=round(ms, 4))
                    readings = clocks[(impl, dtype)]
                    if readings is not None:  # the card's SM clock and power while it was timed
                        row.update(sm_mhz=readings["sm_mhz"], power_w=readings["power_w"])
                    if (impl, dtype) in host:  # host enqueue time: above `ms`, the host is the bottleneck
                        row["host_ms"] = round(host[(impl, dtype)], 4)
                    if dtype == "fp8+quant":
                        row.update(quant_ms=round(quant_ms, 4), quant_host_ms=round(quant_host, 4))
                    rows.append(row)
                    table.append(f"{impl:11s} {dtype:9s} d{d:<4d} S{seqlen:<6d} {'causal' if causal else 'full  '} "
                                 f"{tflops:7.1f} TFLOPS  {tflops / cudnn_tflops:5.2f}x cuDNN"
                                 + (f"  {row['sm_mhz']} MHz {row['power_w']:.0f} W" if "sm_mhz" in row else ""))
                table.append(f"{'':11s} check     d{d:<4d} S{seqlen:<6d} "
                             f"rel err vs cuDNN bf16 {err:.2e}, fp8 {err8:.2e}; "
                             f"quantize_qkv {quant_ms:.3f} ms (host {quant_host:.3f}); "
                             f"bf16 call host {host[('fa3fp8', 'bf16')]:.3f} ms")
                print("\n".join(table[-len(times) - 1 :]), flush=True)
                result.write_text(json.dumps({"gpu": gpu, "rows": rows}, indent=1))  # kept if a later peer crashes
                torch.cuda.empty_cache()
    plot(rows, out / f"{stem}.png")
    print("\n".join(table))


def plot(rows, path):
    """TFLOPS against sequence length, one panel per (d, causal)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(15, 8), sharey=True)
    for col, d in enumerate(HEAD_DIMS):
        for row, causal in enumerate((False, True)):
            ax = axes[row][col]
            series = sorted({(r["impl"], r["dtype"]) for r in rows})
            for impl, dtype in series:
                pts = sorted((r["S"], r["tflops"]) for r in rows
                             if (r["impl"], r["dtype"], r["d"], r["causal"]) == (impl, dtype, d, causal))
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=f"{impl} {dtype}")
            ax.set_xscale("log", base=2)
            ax.set_title(f"d={d} {'causal' if causal else 'non-causal'}")
            ax.set_xlabel("sequence length")
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel("TFLOPS")
        axes[1][0].set_ylabel("TFLOPS")
    axes[0][2].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def sass_facts(kernel):
    """Registers, spills and tensor-core instruction counts of a compiled kernel."""
    facts = {"regs": getattr(kernel, "n_regs", None), "spills": getattr(kernel, "n_spills", None)}
    try:
        sass = kernel.asm["sass"]
    except Exception as exc:  # no disassembler on this machine
        return {**facts, "sass": f"unavailable: {exc}"}
    for op in ("HGMMA", "QGMMA", "HMMA", "LDL", "STL", "UTMALDG", "MUFU.EX2"):
        facts[op] = len(re.findall(rf"\b{re.escape(op)}\b", sass))
    return facts


def sweep(args):
    """Check and time every tuned config per (d, causal, dtype) at S=16K. To try a config, add it to
    configs.TUNED: FP8 tiles other than configs.FP8_BLOCKS are quantized here with the reference quantizer."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    seqlen = 16384
    for d in args.dims:
        for fp8 in (True,) if args.fp8_only else (False, True):
            for causal in (False, True):
                batch, heads = shape_for(seqlen, d)
                q, k, v = random_qkv(batch, seqlen, seqlen, heads, heads, d, torch.bfloat16, "cuda", seed=d)
                cq, ck, cv = random_qkv(2, 1100, 1100, 4, 2, d, torch.bfloat16, "cuda", seed=d + 1)
                ref, _ = attention_reference(cq, ck, cv, causal=causal, compute_dtype=torch.float64)
                for cfg in configs.TUNED[(d, fp8)]:
                    name = (f"d{d} {'fp8 ' if fp8 else 'bf16'} {'causal' if causal else 'full  '} "
                            f"{cfg.kwargs['BLOCK_M']}x{cfg.kwargs['BLOCK_N']} w{cfg.num_warps} s{cfg.num_stages}")
                    try:
                        check = launch(cq, ck, cv, causal, fp8, cfg)[0].view(ref.shape)
                        finite = bool(torch.isfinite(check).all())
                        if fp8:  # FP8: against the reference's FP8 math, relative to FP8's own error
                            ref8 = attention_fp8_reference(bundle(cq, ck, cv, cfg), causal=causal)[0]
                            err = rmse(check.view(ref8.shape), ref8) / rmse(ref8, ref.view(ref8.shape))
                        else:
                            err = ((check.double() - ref).norm() / ref.norm()).item()
                        fn = launcher(q, k, v, causal, fp8, cfg)
                        kernel = fn()[2]
                        ms = timed(fn)
                        tflops = flops(batch, heads, seqlen, d, causal) / ms / 1e9
                        facts = sass_facts(kernel)
                    except Exception as exc:  # a config that does not compile is a finding, not a stop
                        err, finite, tflops, facts = float("nan"), False, 0.0, {"error": str(exc)[:300]}
                    ok = finite and err < (0.5 if fp8 else 1e-2)
                    results.append(dict(name=name, d=d, fp8=fp8, causal=causal, config=str(cfg), rel_err=err,
                                        ok=ok, tflops=tflops, **facts))
                    print(f"{name}  {tflops:7.1f} TFLOPS  err {err:.1e} {'ok ' if ok else 'BAD'} {facts}", flush=True)
                del q, k, v
                torch.cuda.empty_cache()
    (out / "sweep.json").write_text(json.dumps(results, indent=1))
    if args.asm:
        kernel = launcher(*random_qkv(1, 4096, 4096, 16, 16, 128, torch.bfloat16, "cuda"), False, args.asm == "fp8",
                          configs.CONFIGS[0])()[2]
        for ext in ("ttgir", "ptx", "sass"):
            try:
                (out / f"attn-d128-{args.asm}.{ext}").write_text(kernel.asm[ext])
            except Exception as exc:
                print(f"no {ext}: {exc}")
    print("\nbest kept config per (d, dtype, causal):")
    for key in sorted({(r["d"], r["fp8"], r["causal"]) for r in results}):
        good = [r for r in results if (r["d"], r["fp8"], r["causal"]) == key and r["ok"]]
        best = max(good, key=lambda r: r["tflops"]) if good else None
        print(f"  {key}: {best['name'] if best else 'none'} {best['tflops'] if best else 0:.1f}")


def bundle(q, k, v, cfg):
    """FP8 bundle of dense q, k, v quantized with cfg's tiles (the reference quantizer: any tile size)."""
    (batch, sq), sk = q.shape[:2], k.shape[1]
    cu_q = torch.arange(0, (batch + 1) * sq, sq, dtype=torch.int32, device=q.device)
    cu_k = torch.arange(0, (batch + 1) * sk, sk, dtype=torch.int32, device=q.device)
    packed = [x.reshape(-1, *x.shape[2:]) for x in (q, k, v)]
    return quantize_qkv_reference(*packed, cu_q, cu_k, cfg.kwargs["BLOCK_M"], cfg.kwargs["BLOCK_N"])


def launch(q, k, v, causal, fp8, cfg):
    return launcher(q, k, v, causal, fp8, cfg)()


def launcher(q, k, v, causal, fp8, cfg):
    """A closure that runs the kernel with one fixed config on dense q, k, v (FP8: pre-quantized)."""
    batch, seqlen_q, heads, d = q.shape
    scale = d**-0.5
    if fp8:
        b = bundle(q, k, v, cfg)
        return lambda: attention_fwd(b.q8, b.k8, b.v8t, b.cu_seqlens_q, b.cu_seqlens_k, b.max_seqlen_q, scale,
                                     causal, b.q_scale, b.k_scale, b.v_scale, b.cu_blocks_q, b.cu_blocks_k,
                                     torch.bfloat16, config=cfg)
    seqlen_k, kv_heads = k.shape[1], k.shape[2]
    cu_q = torch.arange(0, (batch + 1) * seqlen_q, seqlen_q, dtype=torch.int32, device=q.device)
    cu_k = torch.arange(0, (batch + 1) * seqlen_k, seqlen_k, dtype=torch.int32, device=q.device)
    qp, kp, vp = q.reshape(-1, heads, d), k.reshape(-1, kv_heads, d), v.reshape(-1, kv_heads, d)
    return lambda: attention_fwd(qp, kp, vp, cu_q, cu_k, seqlen_q, scale, causal, config=cfg)


KERNELS = {  # (name, fp8) -> arguments of the CUDA launcher (None: the Triton kernel); cluster 1 unless named
    ("triton", False): None,
    ("cuda-overlap", False): {"loop": "overlap"},
    ("cuda-serial", False): {"loop": "serial"},
    ("cuda-overlap-128", False): {"loop": "overlap", "block_n": 128},  # d128 only (D128_ONLY)
    ("cuda-overlap-pairs", False): {"loop": "overlap", "cluster": 2},
    ("cuda-overlap-128-pairs", False): {"loop": "overlap", "block_n": 128, "cluster": 2},  # FULL_ONLY
    ("cuda-serial-3wg-128", False): {"loop": "serial", "consumers": 3, "block_n": 128},
    ("cuda-serial-3wg-128-pairs", False): {"loop": "serial", "consumers": 3, "block_n": 128, "cluster": 2},
    ("cuda-overlap-nosplit", False): {"loop": "overlap", "split": False},  # a last round not split (FULL_ONLY)
    ("cuda-overlap-pairs-nosplit", False): {"loop": "overlap", "cluster": 2, "split": False},
    ("cuda-overlap-fold", False): {"loop": "overlap", "fold": True},  # causal only (CAUSAL_ONLY), d256 (D256_ONLY)
    ("cuda-overlap-128-fold", False): {"loop": "overlap", "block_n": 128, "fold": True},
    ("cuda-overlap-128-fold-nosplit", False): {"loop": "overlap", "block_n": 128, "fold": True, "split": False},
    ("cuda-serial-3wg-128-fold", False): {"loop": "serial", "consumers": 3, "block_n": 128, "fold": True},
    ("cuda-serial-3wg", False): {"loop": "serial", "consumers": 3},  # d64 only (D64)
    ("cuda-overlap-3wg", False): {"loop": "overlap", "consumers": 3},
    ("cuda-overlap-3wg-fold", False): {"loop": "overlap", "consumers": 3, "fold": True},  # d64 only (D64)
    ("triton", True): None,
    ("cuda-overlap", True): {"loop": "overlap"},
    ("cuda-serial", True): {"loop": "serial"},
    ("cuda-serial-3wg", True): {"loop": "serial", "consumers": 3},  # d128 only (D128_ONLY)
    ("cuda-serial-256", True): {"loop": "serial", "block_n": 256},
    ("cuda-overlap-pairs", True): {"loop": "overlap", "cluster": 2},
    ("cuda-serial-3wg-pairs", True): {"loop": "serial", "consumers": 3, "cluster": 2},
    ("cuda-overlap-pairs-nosplit", True): {"loop": "overlap", "cluster": 2, "split": False},
    ("cuda-serial-3wg-pairs-nosplit", True): {"loop": "serial", "consumers": 3, "cluster": 2, "split": False},
    ("cuda-overlap-fold", True): {"loop": "overlap", "fold": True},
    ("cuda-serial-3wg-fold", True): {"loop": "serial", "consumers": 3, "fold": True},
    ("cuda-overlap-fold-nosplit", True): {"loop": "overlap", "fold": True, "split": False},
    ("cuda-serial-3wg-fold-nosplit", True): {"loop": "serial", "consumers": 3, "fold": True, "split": False},
    ("cuda-overlap-3wg", True): {"loop": "overlap", "consumers": 3},  # d64 only (D64)
    ("cuda-overlap-3wg-fold", True): {"loop": "overlap", "consumers": 3, "fold": True},
}
D128_ONLY = {("cuda-overlap-128", False), ("cuda-overlap-128-pairs", False), ("cuda-serial-3wg-128", False),
             ("cuda-serial-3wg-128-pairs", False), ("cuda-overlap-128-fold", False),
             ("cuda-overlap-128-fold-nosplit", False), ("cuda-serial-3wg-128-fold", False), ("cuda-serial-3wg", True),
             ("cuda-serial-256", True), ("cuda-serial-3wg-pairs", True), ("cuda-serial-3wg-pairs-nosplit", True),
             ("cuda-serial-3wg-fold", True), ("cuda-serial-3wg-fold-nosplit", True)}
D256_ONLY = {("cuda-overlap-fold", False)}  # 16-bit folds at d128 take 128-key tiles
# the kernels at d64 (128-key tiles, one CTA, two or three consumers in either loop, causal folds overlapped;
# csrc/attn_sm90_d64.cu), and those of them built at d64 alone
D64 = {(name, fp8) for name in ("triton", "cuda-overlap", "cuda-serial", "cuda-serial-3wg", "cuda-overlap-3wg",
                                "cuda-overlap-fold", "cuda-overlap-3wg-fold") for fp8 in (False, True)}
D64_ONLY = {("cuda-serial-3wg", False), ("cuda-overlap-3wg", False), ("cuda-overlap-3wg", True),
            ("cuda-overlap-3wg-fold", False), ("cuda-overlap-3wg-fold", True)}
FULL_ONLY = ("cuda-overlap-128-pairs", "cuda-overlap-nosplit", "cuda-overlap-pairs-nosplit",
             "cuda-serial-3wg-pairs-nosplit")
CAUSAL_ONLY = ("cuda-overlap-fold", "cuda-overlap-128-fold", "cuda-overlap-128-fold-nosplit", "cuda-serial-3wg-fold",
               "cuda-serial-3wg-128-fold", "cuda-overlap-fold-nosplit", "cuda-serial-3wg-fold-nosplit",
               "cuda-overlap-3wg-fold")
CUDA_HEAD_DIMS = (64, 128, 256)  # the kernels mode's head dims: those the CUDA kernel is built for
PREFILL_SHAPE = (131072, 32, 8, 128)  # seqlen, heads, kv_heads, d: benchmarks/e2e.py's 128K prefill, per layer
ROUNDS = 3  # every runner is timed once per round, rounds interleaved: rows give the median and the best


def fp8_bundles(q, k, v):
    """quantize_qkv's bundles of q, k, v for each FP8 kernel, {"triton": ..., "cuda": ...}: V's key order differs."""
    chosen, bundles = os.environ["FA3FP8_KERNEL"], {}
    for kernel in ("triton", "cuda"):
        os.environ["FA3FP8_KERNEL"] = kernel
        bundles[kernel] = fa3fp8.quantize_qkv(q, k, v)
    os.environ["FA3FP8_KERNEL"] = chosen
    return bundles


def kernel_runner(name, fp8, q, k, v, bundles, causal):
    """A closure running one forward kernel at one fixed choice (KERNELS) on dense q, k, v, or on the FP8 bundle of
    fp8_bundles for that kernel."""
    extra = KERNELS[(name, fp8)]
    return settings_runner(None if extra is None else {"cluster": 1, **extra}, fp8, q, k, v, bundles, causal)


def settings_runner(extra, fp8, q, k, v, bundles, causal):
    """As kernel_runner, for the CUDA launcher's arguments `extra` (None: the Triton kernel); q may have fewer rows
    than k and v (causal: aligned bottom-right)."""
    from fa3fp8 import attention_sm90

    d = q.shape[-1]
    scale = d**-0.5
    if fp8:
        b = bundles["triton" if extra is None else "cuda"]
        args = (b.q8, b.k8, b.v8t, b.cu_seqlens_q, b.cu_seqlens_k, b.max_seqlen_q, scale, causal,
                b.q_scale, b.k_scale, b.v_scale, b.cu_blocks_q, b.cu_blocks_k)
        if extra is None:
            return lambda: attention_fwd(*args, torch.bfloat16)[0]
        return lambda: attention_sm90.attention_fp8_fwd_sm90(*args, b.block_m, torch.bfloat16,
                                                             max_seqlen_k=b.max_seqlen_k, **extra)[0]
    (batch, seqlen_q), seqlen_k, heads, kv_heads = q.shape[:2], k.shape[1], q.shape[2], k.shape[2]
    cu_q = torch.arange(0, (batch + 1) * seqlen_q, seqlen_q, dtype=torch.int32, device=q.device)
    cu_k = torch.arange(0, (batch + 1) * seqlen_k, seqlen_k, dtype=torch.int32, device=q.device)
    qp, kp, vp = q.reshape(-1, heads, d), k.reshape(-1, kv_heads, d), v.reshape(-1, kv_heads, d)
    if extra is None:
        return lambda: attention_fwd(qp, kp, vp, cu_q, cu_k, seqlen_q, scale, causal, max_seqlen_k=seqlen_k)[0]
    return lambda: attention_sm90.attention_fwd_sm90(qp, kp, vp, cu_q, cu_k, seqlen_q, scale, causal,
                                                     max_seqlen_k=seqlen_k, **extra)[0]


def kernel_names(fp8, d, causal, impls=None):
    """The KERNELS rows that the kernels mode times at (fp8, d, causal): those built for that head dim and mask, of
    `impls` (None: all; the Triton kernel's row always)."""
    def built(key):
        if d == 64:
            return key in D64
        return key not in D64_ONLY and (d == 128 or key not in D128_ONLY) and (d == 256 or key not in D256_ONLY)

    return [n for (n, f) in KERNELS if f == fp8 and built((n, f)) and n not in (FULL_ONLY if causal else CAUSAL_ONLY)
            and (n == "triton" or impls is None or n in impls)]


def kernel_cases(args):
    """(fp8, d, causal, seqlen, batch, heads, kv_heads) of the kernels mode: each of --seqlens (default 16K) at --tokens
    per batch (default 16K), and with --prefill-shape the 128K prefill's FP8 attention (PREFILL_SHAPE, causal) after
    them."""
    cases = []
    for fp8 in [fp8 for fp8 in (False, True) if ("fp8" if fp8 else "bf16") in args.dtypes]:
        for d in [d for d in args.dims if d in CUDA_HEAD_DIMS]:
            for seqlen in [16384] if args.seqlens is None else args.seqlens:
                batch, heads = shape_for(seqlen, d, args.tokens)
                cases += [(fp8, d, causal, seqlen, batch, heads, heads) for causal in (False, True)
                          if not (args.full_only if causal else args.causal_only)]
    if args.prefill_shape:
        seqlen, heads, kv_heads, d = PREFILL_SHAPE
        cases += [(True, d, True, seqlen, 1, heads, kv_heads)] if "fp8" in args.dtypes else []
    return cases


def kernels(args):
    """The forward kernels side by side (FP8: kernel-only, one quantized bundle per shape), beside SDPA's cuDNN and
    flash backends (BF16) and cuDNN's FP8, on `kernel_cases`; each checked against the fp64 reference on a small
    case and against the Triton kernel's output on the timed shape first."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    gpu = torch.cuda.get_device_name()
    rows, table = [], []
    os.environ["FA3FP8_KERNEL"] = "triton"  # what attention_fwd launches for the "triton" rows
    for fp8, d, causal, seqlen, batch, heads, kv_heads in kernel_cases(args):
        dtype = "fp8" if fp8 else "bf16"
        q, k, v = random_qkv(batch, seqlen, seqlen, heads, kv_heads, d, torch.bfloat16, "cuda", seed=d)
        b = fp8_bundles(q, k, v) if fp8 else None
        cq, ck, cv = random_qkv(2, 1100, 1100, 4, 2, d, torch.bfloat16, "cuda", seed=d + 1)
        cb = fp8_bundles(cq, ck, cv) if fp8 else None
        ref = attention_reference(cq, ck, cv, causal=causal, compute_dtype=torch.float64)[0]
        names = kernel_names(fp8, d, causal, args.impls)
        runners = {name: kernel_runner(name, fp8, q, k, v, b, causal) for name in names}
        if fp8:
            peer = cudnn_fp8_peer(q, k, v, causal, f"d{d} S{seqlen}")
            if peer is not None:
                runners["cudnn-fp8"] = peer
        else:
            runners["sdpa-cudnn"] = sdpa_runner("sdpa-cudnn", q, k, v, causal)
            runners["sdpa-flash"] = sdpa_runner("sdpa-flash", q, k, v, causal)
        base = runners["triton"]().float()
        for name in names:
            check = kernel_runner(name, fp8, cq, ck, cv, cb, causal)().view(ref.shape)
            err = ((check.double() - ref).norm() / ref.norm()).item()
            diff = ((runners[name]().float() - base).norm() / base.norm()).item()
            table.append(f"check {dtype} d{d} {'causal' if causal else 'full'} {name}: rel err vs fp64 "
                         f"{err:.2e}, rel diff to triton {diff:.2e}")
        timings = {name: [] for name in runners}
        for _ in range(args.rounds):
            for name, fn in runners.items():
                timings[name].append(flops(batch, heads, seqlen, d, causal) / timed(fn) / 1e9)
        for name, runs in timings.items():
            median, best = sorted(runs)[len(runs) // 2], max(runs)
            rows.append(dict(impl=name, dtype=dtype, d=d, S=seqlen, batch=batch, heads=heads, kv_heads=kv_heads,
                             causal=causal, tflops=round(median, 1), best=round(best, 1),
                             runs=[round(r, 1) for r in runs]))
            table.append(f"{dtype:4s} {name:20s} d{d:<4d} B{batch} S{seqlen} H{heads}/{kv_heads} "
                         f"{'causal' if causal else 'full  '} {median:7.1f} TFLOPS (best {best:6.1f})")
        print("\n".join(table[-len(runners) - len(names):]), flush=True)
        del q, k, v, b
        torch.cuda.empty_cache()
    os.environ.pop("FA3FP8_KERNEL")
    stem = f"attention-kernels-{gpu.replace(' ', '-').lower()}-{datetime.date.today().isoformat()}"
    (out / f"{stem}.json").write_text(json.dumps({"gpu": gpu, "rounds": args.rounds, "rows": rows}, indent=1))
    plot_kernels(rows, out / f"{stem}.png")
    print("\n".join(t for t in table if not t.startswith("check")))


def plot_kernels(rows, path):
    """TFLOPS per kernel, grouped by (dtype, d, causal, S, heads): the `kernels` mode's bar chart."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def group(r):
        return r["dtype"], r["d"], r["causal"], r["S"], r["heads"], r["kv_heads"]

    groups = sorted({group(r) for r in rows})
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    width = 0.8 / len(impls)
    fig, ax = plt.subplots(figsize=(max(14, 1.2 * len(groups)), 5))
    for n, impl in enumerate(impls):
        values = [next((r["tflops"] for r in rows if group(r) == g and r["impl"] == impl), 0) for g in groups]
        ax.bar([x + n * width for x in range(len(groups))], values, width, label=impl, color=plt.cm.tab20(n % 20))
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(groups))])
    labels = [f"{t} d{d} {'causal' if c else 'full'}\nS{s // 1024}K H{h}/{kv}" for t, d, c, s, h, kv in groups]
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("TFLOPS")
    ax.set_ylim(0, 1.3 * max(r["tflops"] for r in rows))
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, ncol=min(len(impls), 6), loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=("bench", "sweep", "kernels"))
    parser.add_argument("--quick", action="store_true", help="bench S in {1K, 16K} only")
    parser.add_argument("--asm", choices=("bf16", "fp8"), help="sweep: also write d128 TTGIR/PTX/SASS")
    parser.add_argument("--dims", type=lambda s: [int(x) for x in s.split(",")], default=list(HEAD_DIMS),
                        help="sweep, kernels: head dims, comma-separated")
    parser.add_argument("--fp8-only", action="store_true", help="sweep: FP8 configs only")
    parser.add_argument("--prefill-shape", action="store_true",
                        help="kernels: also the 128K prefill's causal FP8 attention (one sequence, 32 / 8 heads, d128)")
    parser.add_argument("--dtypes", type=lambda s: s.split(","), default=["bf16", "fp8"],
                        help="kernels: bf16 and/or fp8, comma-separated")
    parser.add_argument("--seqlens", type=lambda s: [int(x) for x in s.split(",")], default=None,
                        help="bench, kernels: sequence lengths, comma-separated (default: bench 1K-64K, kernels 16K)")
    parser.add_argument("--tokens", type=int, default=TOKENS,
                        help="kernels: tokens per batch (default 16K; 32768: batch 2 at S16K, 8 at S4K)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--causal-only", action="store_true", help="kernels: causal cases only")
    group.add_argument("--full-only", action="store_true", help="kernels: cases without a causal mask only")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="kernels: interleaved rounds per shape")
    parser.add_argument("--impls", type=lambda s: s.split(","), default=None,
                        help="kernels: time only these KERNELS rows (and the Triton kernel, the baseline)")
    parser.add_argument("--out", default=os.environ.get("OUT", "benchmarks/results"))
    args = parser.parse_args()
    {"bench": bench, "sweep": sweep, "kernels": kernels}[args.mode](args)


if __name__ == "__main__":
    main()
