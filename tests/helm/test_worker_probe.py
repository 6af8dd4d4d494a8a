"""The worker probes the chart renders, run against a real `docflash worker` process: they pass while the worker
answers Celery pings and fail once it hangs."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

VENV_BIN = Path(sys.executable).parent


@pytest.fixture
def probe_command(default_manifests, chart) -> list[str]:
    worker = chart.one(default_manifests, "Deployment", "worker")["spec"]["template"]["spec"]["containers"][0]
    assert worker["startupProbe"]["exec"]["command"] == worker["livenessProbe"]["exec"]["command"]
    return worker["livenessProbe"]["exec"]["command"]


@pytest.fixture
def worker_env(redis_url) -> dict[str, str]:
    return {**os.environ, "DOCFLASH_ENV": "test", "DOCFLASH_REDIS_URL": redis_url,
            "DOCFLASH_GPU_QUEUE": f"docflash.probe.{uuid.uuid4().hex[:8]}",
            "DOCFLASH_WARMUP_TASKS": "", "DOCFLASH_EXTRA_TASK_MODULES": ""}


def run_probe(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([str(VENV_BIN / command[0]), *command[1:]], env=env, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.slow
def test_probe_passes_for_a_live_worker_and_fails_for_a_hung_one(probe_command, worker_env, tmp_path):
    # The chart's worker arguments, with the same node name gpu0@<host> the probe asks for.
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen([str(VENV_BIN / "docflash"), "worker", "--gpu", "0"], env=worker_env, stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while (answer := run_probe(probe_command, worker_env)).returncode != 0:
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "worker never answered the probe"
        assert answer.stdout.strip().startswith("gpu0@")

        os.killpg(worker.pid, signal.SIGSTOP)
        hung = run_probe(probe_command, worker_env)
        assert hung.returncode == 1 and "no worker of this host answered" in hung.stderr
    finally:
        os.killpg(worker.pid, signal.SIGCONT)
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(10)
