#!/usr/bin/env bash
# Sets up .venv with docflash installed (editable). `--dev` adds the test and chart tooling.
# The CPU build of torch is installed first, so that no multi-GB CUDA build is pulled in by accident.
set -euo pipefail
cd "$(dirname "$0")/.."

extras=""
[[ "${1:-}" == "--dev" ]] && extras="[dev]"

[[ -x .venv/bin/python ]] || python3 -m venv .venv
pip=(.venv/bin/python -m pip -q --disable-pip-version-check)

stamp=".venv/.docflash-installed${extras}"
if [[ ! -f "$stamp" || pyproject.toml -nt "$stamp" ]]; then
    .venv/bin/python -c "import torch" 2>/dev/null || "${pip[@]}" install "torch==2.13.0" "triton==3.9.0"
    "${pip[@]}" install -e ".${extras}"
    touch "$stamp"
fi
if [[ -n "$extras" ]]; then
    bash scripts/fetch_helm.sh
fi
