# syntax=docker/dockerfile:1
# The API image: the FastAPI front end, also run as Flower and as the S3 watcher. No torch, no CUDA.
# Build from the repository root: docker build -f docker/api.Dockerfile -t docflash-api .
ARG PYTHON_IMAGE=python:3.12.12-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PATH=/opt/venv/bin:$PATH
RUN python -m venv /opt/venv
WORKDIR /src
# Dependencies first, so that a code change does not reinstall them.
COPY pyproject.toml README.md ./
COPY docker/requirements.py docker/constraints.txt docker/
RUN python docker/requirements.py api > /tmp/requirements.txt \
    && python docker/requirements.py api-no-deps > /tmp/requirements-no-deps.txt \
    && pip install --no-cache-dir -c docker/constraints.txt -r /tmp/requirements.txt \
    && pip install --no-cache-dir --no-deps -c docker/constraints.txt -r /tmp/requirements-no-deps.txt
COPY api/ api/
COPY core/ core/
COPY worker/ worker/
COPY docflash/ docflash/
COPY kernels/ kernels/
RUN pip install --no-cache-dir --no-deps . \
    && python -c "import api, core, docflash.cli"

FROM ${PYTHON_IMAGE} AS runtime
ARG APP_UID=10001
RUN groupadd --system --gid "${APP_UID}" docflash \
    && useradd --system --uid "${APP_UID}" --gid docflash --home-dir /nonexistent --no-create-home \
       --shell /usr/sbin/nologin docflash \
    && install -d -o docflash -g docflash /var/lib/flower
COPY --from=builder /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    DOCFLASH_ENV=production
WORKDIR /app
USER ${APP_UID}:${APP_UID}
EXPOSE 8000 5555
ENTRYPOINT ["docflash"]
CMD ["api", "--host", "0.0.0.0", "--port", "8000"]
