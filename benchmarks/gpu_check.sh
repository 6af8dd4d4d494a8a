#!/usr/bin/env bash
# One call on the GPU machine: the GPU tests of fa3fp8, then the config sweep and/or the benchmarks.
#   bash benchmarks/gpu_check.sh [tests] [cuda] [kernels] [sweep] [sweep-fp8] [bench] [quick] [asm] [few] [decode]
#                                [e2e] [ab] [window] [host] [anatomy] [timeline] [profile] [pack]
# Writes logs and results under $OUT (default benchmarks/results); `pack` moves what this call wrote there into one
# archive, $OUT/gpu-check.tgz (a device call brings back at most 8 files). Needs python3 with torch + triton; the
# cuDNN FP8 peer and e2e need what scripts/gpu_carry.sh puts in .whl/ and .tools/minilm, carried to the machine.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/kernels:$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-benchmarks/results}"
mkdir -p "$OUT"
started=$(mktemp)  # pack: the files written after this one are this call's
steps=" $* "
if compgen -G ".whl/*.whl" >/dev/null; then  # carried wheels (the cudnn frontend for the cuDNN FP8 peer)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
# the CUDA kernel libraries scripts/gpu_carry.sh built where nvcc is and packed: the default one is used when it
# loads here (else it is built here), switches' builds for `ab` are in .lib/ab
[[ -f .whl/libs.tar.xz ]] && mkdir -p .lib && tar xJf .whl/libs.tar.xz -C .lib
if compgen -G ".lib/fa3fp8/*.so" >/dev/null \
    && FA3FP8_CACHE_DIR="$PWD/.lib/fa3fp8" \
        python3 -c 'from fa3fp8 import cuda_build; print(cuda_build.load()._name)'; then
    export FA3FP8_CACHE_DIR="$PWD/.lib/fa3fp8"
fi
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
status=0
cuda_tests() {  # the CUDA C++ kernels' GPU tests (their build checks run in CI, with nvcc), logged to $1
    timeout 420 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_attention_sm90.py -m gpu -o addopts="" \
        --import-mode=importlib --noconftest -x 2>&1 | tee "$1" | tail -25
}
if [[ "$steps" == *" tests "* ]]; then  # TESTS_K: a pytest -k expression, to run a few (e.g. "fold and pairs")
    FA3FP8_AUTOTUNE=0 timeout 480 python3 -m pytest -q -p no:cacheprovider tests/kernels -m gpu -o addopts="" \
        --import-mode=importlib --noconftest ${TESTS_K:+-k "$TESTS_K"} 2>&1 | tee "$OUT/gpu-tests.log" | tail -25 \
        || status=1
fi
if [[ "$steps" == *" cuda "* ]]; then
    cuda_tests "$OUT/cuda-tests.log" || status=1
fi
if [[ "$steps" == *" kernels "* ]]; then  # KERNELS_ARGS: the kernels mode's options (default --prefill-shape)
    timeout 420 python3 benchmarks/attention.py kernels ${KERNELS_ARGS:---prefill-shape} --out "$OUT" 2>&1 \
        | tee "$OUT/kernels.log" | tail -40 || status=1
fi
if [[ "$steps" == *" sweep "* ]]; then
    asm=""; [[ "$steps" == *" asm "* ]] && asm="--asm bf16"
    python3 benchmarks/attention.py sweep --out "$OUT" $asm 2>&1 | tee "$OUT/sweep.log" | tail -60 || status=1
fi
if [[ "$steps" == *" sweep-fp8 "* ]]; then
    python3 benchmarks/attention.py sweep --out "$OUT" --fp8-only 2>&1 | tee "$OUT/sweep-fp8.log" | tail -30 || status=1
fi
if [[ "$steps" == *" bench "* ]]; then  # BENCH_ARGS: more of the bench's options (e.g. --seqlens 4096,16384)
    quick=""; [[ "$steps" == *" quick "* ]] && quick="--quick"
    python3 benchmarks/attention.py bench --out "$OUT" $quick ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" | tail -90 \
        || status=1
fi
if [[ "$steps" == *" few "* ]]; then  # a few queries over a long context (FEW_ARGS: more of few_queries.py's options)
    python3 benchmarks/few_queries.py --out "$OUT" ${FEW_ARGS:-} 2>&1 | tee "$OUT/few-queries.log" | tail -30 \
        || status=1
fi
if [[ "$steps" == *" e2e "* ]]; then  # the 8B-shaped prefill rows, decode rows and the 128K summarize job
    DOCFLASH_EMBED_MODEL_PATH="$PWD/.tools/minilm" timeout 560 python3 benchmarks/e2e.py --tokenizer .tools/minilm \
        --out "$OUT" 2>&1 | tee "$OUT/e2e.log" | tail -30 || status=1
fi
if [[ "$steps" == *" ab "* ]]; then
    # a build switch against the default library: AB_FLAGS (FA3FP8_NVCC_FLAGS of the build to try, e.g. a -D switch
    # in csrc), built in .lib/ab unless carried there; its CUDA kernels' GPU tests, then kernel_ab.py (AB_ARGS: more
    # of its options) with the default library as "old" (or AB_OLD, another build's library), timed even where a test
    # failed (a switch that changes the rounding may miss a tolerance by a little: both facts decide it)
    (
        old=${AB_OLD:-$(python3 -c 'from fa3fp8 import cuda_build; print(cuda_build.library_path())')} || exit 1
        export FA3FP8_NVCC_FLAGS="${AB_FLAGS:?set AB_FLAGS to the nvcc options of the build to try}"
        export FA3FP8_CACHE_DIR="$PWD/.lib/ab"
        tests=0
        cuda_tests "$OUT/ab-tests.log" || tests=1
        python3 benchmarks/kernel_ab.py "$old" ${AB_ARGS:-} --out "$OUT" 2>&1 | tee "$OUT/ab.log" | tail -30 \
            && exit $tests
    ) || status=1
fi
if [[ "$steps" == *" window "* ]]; then  # sliding-window attention beside FlexAttention (WINDOW_ARGS: more options)
    python3 benchmarks/window.py --out "$OUT" ${WINDOW_ARGS:-} 2>&1 | tee "$OUT/window.log" | tail -20 || status=1
fi
if [[ "$steps" == *" host "* ]]; then  # host time per call: the API against its launcher and SDPA
    # on one core: unpinned, the same code's host time moved by up to 2x between runs on the lent machine
    pin=""; command -v taskset >/dev/null && pin="taskset -c 1"
    $pin python3 benchmarks/host_overhead.py --out "$OUT" 2>&1 | tee "$OUT/host-overhead.log" | tail -17 || status=1
fi
if [[ "$steps" == *" anatomy "* ]]; then  # each call's kernels and idle time (ANATOMY_ARGS: call_anatomy.py's options)
    python3 benchmarks/call_anatomy.py --out "$OUT" ${ANATOMY_ARGS:-} 2>&1 | tee "$OUT/call-anatomy.log" | tail -20 \
        || status=1
fi
if [[ "$steps" == *" timeline "* ]]; then
    # the kernel's clock per work item (TIMELINE_ARGS: timeline.py's options), on the library built with the
    # instrument's switch: in .lib/ab where `scripts/gpu_carry.sh --ab -DFA3FP8_TIMELINE=1` put it, else built there
    FA3FP8_NVCC_FLAGS=-DFA3FP8_TIMELINE=1 FA3FP8_CACHE_DIR="$PWD/.lib/ab" python3 benchmarks/timeline.py --out "$OUT" \
        ${TIMELINE_ARGS:-} 2>&1 | tee "$OUT/timeline.log" | tail -20 || status=1
fi
if [[ "$steps" == *" decode "* ]]; then
    python3 benchmarks/decode.py --out "$OUT" 2>&1 | tee "$OUT/decode.log" | tail -30 || status=1
fi
if [[ "$steps" == *" profile "* ]]; then
    # Nsight Compute on one attn_fwd launch (NCU_KERNEL: another kernel's name, e.g. merge_segments): PROFILE_ARGS
    # (profile_kernel.py's arguments, default FP8 d128 causal at S16K), NCU_ARGS (more ncu options, e.g. "--set
    # full"); the details in $OUT/profile.txt, the SASS with its stall samples in $OUT/profile-sass.csv
    # (stall_samples.py summarizes it, and compares two), headlines printed
    ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
    report="${TMPDIR:-/tmp}/fa3fp8-profile"
    kernel=${NCU_KERNEL:-attn_fwd}
    "$ncu" --profile-from-start off -k "regex:$kernel" --launch-skip 1 --launch-count 1 --section SpeedOfLight \
        --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section LaunchStats \
        --section Occupancy --section SourceCounters \
        --metrics sm__cycles_active.min,sm__cycles_active.max,sm__cycles_active.avg ${NCU_ARGS:-} -f -o "$report" \
        python3 benchmarks/profile_kernel.py ${PROFILE_ARGS:-fp8 128 16384 --causal} > "$OUT/profile-run.log" 2>&1 \
        || status=1
    "$ncu" -i "$report.ncu-rep" --page details > "$OUT/profile.txt" 2>&1 || status=1
    "$ncu" -i "$report.ncu-rep" --page source --csv --print-source sass > "$OUT/profile-sass.csv" 2>&1 || status=1
    headline="$kernel<|Duration|Elapsed Cycles|sm__cycles_active|highest-utilized|Issued Ipc|Eligible Warps"
    grep -E "$headline|Cycles Per Issued" "$OUT/profile.txt" | cut -c1-150
    if [[ "$kernel" == attn_fwd ]]; then  # stall_samples reads the samples of attn_fwd's key-tile loop
        python3 benchmarks/stall_samples.py "$OUT/profile-sass.csv" | cut -c1-150 || status=1
    fi
fi
if [[ "$steps" == *" pack "* ]]; then
    (cd "$OUT" && find . -type f -newer "$started" ! -name gpu-check.tgz -print0 \
        | tar czf gpu-check.tgz --null -T - --remove-files) || status=1
fi
exit $status
