"""One attention forward shape of the benchmark, called a few times inside a profiler range, for Nsight Compute to
capture: fa3fp8's public defaults, a kernels-mode variant (attention.KERNELS) or a peer (sdpa-cudnn, cudnn-fp8).

    ncu --profile-from-start off -k regex:attn_fwd --launch-skip 1 --launch-count 1 --set full \\
        python benchmarks/profile_kernel.py bf16 128 4096
    ncu --profile-from-start off --launch-skip 1 --launch-count 1 --set full \\
        python benchmarks/profile_kernel.py bf16 128 4096 --impl sdpa-cudnn

The shape is the benchmark's (`--tokens` per batch, hidden 2048); the calls before the range warm up the launcher
(library load, tensor maps, autotuning), so the range holds the timed calls only.
"""

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import attention as bench  # noqa: E402
import torch  # noqa: E402
from fa3fp8 import attention_sm90  # noqa: E402
from fa3fp8.testing import random_qkv  # noqa: E402

PEERS = {"sdpa-cudnn": False, "sdpa-flash": False, "cudnn-fp8": True}  # name -> whether it runs fp8 (else bf16)


def check_impl(impl, fp8, d, causal):
    """Raise ValueError naming `impl` unless it runs at this dtype, head dim and mask: "default" (best_settings'
    choice), a PEERS name or a kernels-mode name the kernels mode times there (attention.kernel_names)."""
    if impl == "default" or PEERS.get(impl) == fp8 or impl in bench.kernel_names(fp8, d, causal):
        return
    peers = ", ".join(name for name, runs_fp8 in PEERS.items() if runs_fp8 == fp8)
    raise ValueError(f"impl: {impl!r} does not run {'fp8' if fp8 else 'bf16'} d{d} {'causal' if causal else 'full'}: "
                     f"give default, {peers} or one of the kernels mode's {bench.kernel_names(fp8, d, causal)}")


def runner(impl, fp8, d, seqlen, causal, tokens):
    """A closure running one forward call of `impl` (check_impl) on the benchmark's shape."""
    check_impl(impl, fp8, d, causal)
    batch, heads = bench.shape_for(seqlen, d, tokens)
    q, k, v = random_qkv(batch, seqlen, seqlen, heads, heads, d, torch.bfloat16, "cuda", seed=d)
    if impl == "cudnn-fp8":
        peer = bench.cudnn_fp8_peer(q, k, v, causal, f"d{d} S{seqlen}")
        if peer is None:
            raise SystemExit("cudnn-fp8 cannot run here (see above)")
        return peer
    if impl in PEERS:
        return bench.sdpa_runner(impl, q, k, v, causal)
    os.environ.setdefault("FA3FP8_KERNEL", "auto")  # fp8_bundles restores it after making each kernel's bundle
    bundles = bench.fp8_bundles(q, k, v) if fp8 else None
    if impl == "default":
        settings = attention_sm90.best_settings(d, fp8, causal, seqlen, equal_lengths=True)
        return bench.settings_runner(settings, fp8, q, k, v, bundles, causal)
    return bench.kernel_runner(impl, fp8, q, k, v, bundles, causal)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dtype", choices=("bf16", "fp8"))
    parser.add_argument("d", type=int, choices=bench.CUDA_HEAD_DIMS)
    parser.add_argument("seqlen", type=int)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--impl", default="default")
    parser.add_argument("--tokens", type=int, default=bench.TOKENS)
    parser.add_argument("--calls", type=int, default=3, help="calls inside the profiler range")
    args = parser.parse_args()
    run = runner(args.impl, args.dtype == "fp8", args.d, args.seqlen, args.causal, args.tokens)
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for _ in range(args.calls):
        run()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    main()
