# syntax=docker/dockerfile:1
# The GPU worker image: CUDA runtime, torch + Triton + transformers, docflash. One container per GPU.
# Build from the repository root: docker build -f docker/worker.Dockerfile -t docflash-worker .
# For nodes whose driver predates CUDA 13, build with a CUDA 12.8 base and the cu128 torch index:
#   --build-arg CUDA_IMAGE=nvidia/cuda:12.8.1-runtime-ubuntu24.04 \
#   --build-arg CUDA_DEVEL_IMAGE=nvidia/cuda:12.8.1-devel-ubuntu24.04 \
#   --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128
ARG CUDA_IMAGE=nvidia/cuda:13.0.2-runtime-ubuntu24.04
ARG CUDA_DEVEL_IMAGE=nvidia/cuda:13.0.2-devel-ubuntu24.04

# the builder compiles fa3fp8's CUDA kernel library; the runtime image only loads it
FROM ${CUDA_DEVEL_IMAGE} AS builder
ARG TORCH_VERSION=2.11.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu130
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PATH=/opt/venv/bin:$PATH
# Ubuntu's archive keeps only the current build of each package, so apt versions are left to the pinned base.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*
# torch (with its pinned triton and CUDA libraries) from the CUDA index, before anything else can pull a CPU build.
RUN python3 -m venv /opt/venv \
    && pip install --no-cache-dir --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"
WORKDIR /src
COPY pyproject.toml README.md ./
COPY docker/requirements.py docker/constraints.txt docker/
RUN python docker/requirements.py worker > /tmp/requirements.txt \
    && pip install --no-cache-dir -c docker/constraints.txt -r /tmp/requirements.txt
COPY api/ api/
COPY core/ core/
COPY worker/ worker/
COPY docflash/ docflash/
COPY kernels/ kernels/
# fa3fp8's kernel library is compiled by the pinned CUDA compiler (pyproject's cuda-build wheels), which stays in
# /opt/cuda-build, apart from the venv (torch pins its own CUDA runtime) and out of the runtime image.
RUN pip install --no-cache-dir --no-deps . \
    && python docker/requirements.py cuda-build > /tmp/cuda-build.txt \
    && pip install --no-cache-dir --no-deps --target /opt/cuda-build -r /tmp/cuda-build.txt \
    && FA3FP8_NVCC=/opt/cuda-build/nvidia/cu13/bin/nvcc python -m fa3fp8.cuda_build \
    && python -c "import docflash.cli, fa3fp8, torch, triton, transformers"

FROM ${CUDA_IMAGE} AS runtime
ARG APP_UID=10001
ENV DEBIAN_FRONTEND=noninteractive
# Triton builds its launcher stubs with the C compiler at run time, against Python's headers.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-dev gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid "${APP_UID}" docflash \
    && useradd --system --uid "${APP_UID}" --gid docflash --home-dir /nonexistent --no-create-home \
       --shell /usr/sbin/nologin docflash \
    && install -d -o docflash -g docflash /var/cache/docflash/triton /var/cache/docflash/huggingface /models
COPY --from=builder /opt/venv /opt/venv
COPY docker/fetch_model.py /opt/docflash/fetch_model.py
# HOME=/tmp: libraries that write under ~ (torch, Triton) get a writable place; /tmp is a volume in the chart.
ENV PATH=/opt/venv/bin:$PATH \
    HOME=/tmp \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    DOCFLASH_ENV=production \
    TRITON_CACHE_DIR=/var/cache/docflash/triton \
    HF_HOME=/var/cache/docflash/huggingface
WORKDIR /app
USER ${APP_UID}:${APP_UID}
ENTRYPOINT ["docflash"]
CMD ["worker"]
