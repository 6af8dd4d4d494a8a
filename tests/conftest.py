"""Session fixtures shared by all test areas: a Redis database of our own, a real S3 server (moto_server on a
free loopback port), settings pointing at both, and a real Celery worker subprocess (`docflash worker`)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from redis import Redis

from core.service import JobService
from core.settings import Settings

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
TEST_BUCKET = "docflash-test"
TEST_TASKS_DIR = REPO / "tests" / "worker" / "support"
_LOCK_KEY = "docflash-test:lock"


def free_port() -> int:
    """A TCP port that is free on the loopback interface right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(condition, timeout: float, what: str, interval: float = 0.05):
    """Poll `condition()` until it returns a truthy value (returned) or fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A Redis database (1-15) claimed for this test session, flushed before and after. Concurrent test
    sessions each claim another database."""
    base = os.environ.get("DOCFLASH_TEST_REDIS", "redis://127.0.0.1:6379")
    for db in range(15, 0, -1):
        client = Redis.from_url(f"{base}/{db}")
        if client.set(_LOCK_KEY, str(os.getpid()), nx=True, ex=3600):
            break
    else:
        pytest.fail("no free Redis database for the tests (all of 1-15 are locked)")
    client.flushdb()
    client.set(_LOCK_KEY, str(os.getpid()), ex=3600)
    yield f"{base}/{db}"
    client.flushdb()


@pytest.fixture
def redis_client(redis_url: str) -> Redis:
    """A client of the session's test database."""
    return Redis.from_url(redis_url)


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A real S3 server (moto) on a free loopback port, with the bucket `docflash-test`."""
    port = free_port()
    proc = subprocess.Popen(
        [str(VENV_BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            return False

    try:
        wait_until(up, 20, "the S3 server")
        s3_client(endpoint).create_bucket(Bucket=TEST_BUCKET)
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(10)


def s3_client(endpoint: str):
    """A boto3 S3 client of the test server."""
    return boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test"
    )


@pytest.fixture
def s3(s3_endpoint: str):
    """A boto3 S3 client of the test server."""
    return s3_client(s3_endpoint)


@pytest.fixture(scope="session")
def service_env(redis_url: str, s3_endpoint: str) -> dict[str, str]:
    """The DOCFLASH_* environment of the test service (also given to worker subprocesses)."""
    return {
        "DOCFLASH_ENV": "test",
        "DOCFLASH_LOG_LEVEL": "INFO",
        "DOCFLASH_REDIS_URL": redis_url,
        "DOCFLASH_REDIS_PREFIX": "docflash-test:",
        "DOCFLASH_S3_ENDPOINT_URL": s3_endpoint,
        "DOCFLASH_S3_REGION": "us-east-1",
        "DOCFLASH_S3_ACCESS_KEY_ID": "test",
        "DOCFLASH_S3_SECRET_ACCESS_KEY": "test",
        "DOCFLASH_OUTPUT_URI": f"s3://{TEST_BUCKET}/jobs",
        "DOCFLASH_GPU_QUEUE": f"docflash.test.{uuid.uuid4().hex[:8]}",
        "DOCFLASH_WARMUP_TASKS": "noop,stats",
        "DOCFLASH_EXTRA_TASK_MODULES": "docflash_test_tasks",
        "DOCFLASH_WATCH_TENANT": "dropbox",
        "DOCFLASH_BROKER_RESTORE_INTERVAL_S": "1",
    }


def settings_from_env(env: dict[str, str]) -> Settings:
    """Settings built from a DOCFLASH_* dict alone (ignoring the process environment and any .env file)."""
    return Settings(_env_file=None, **{key.removeprefix("DOCFLASH_").lower(): value for key, value in env.items()})


@pytest.fixture(scope="session")
def service_settings(service_env: dict[str, str]) -> Settings:
    """Settings of the test service."""
    return settings_from_env(service_env)


def start_worker(env: dict[str, str], args: tuple[str, ...], log_path: Path) -> subprocess.Popen:
    """Start `docflash worker ARGS` in its own process group with `env` on top of ours; its output goes to
    `log_path`."""
    full_env = {**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(TEST_TASKS_DIR), str(REPO)])}
    log = log_path.open("wb")
    return subprocess.Popen(
        [str(VENV_BIN / "docflash"), "worker", *args],
        env=full_env,
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait_for_worker(env: dict[str, str], proc: subprocess.Popen, node: str, log_path: Path, timeout: float = 90):
    """Wait until the worker `node` answers a Celery ping."""
    from core.broker import TaskSender

    app = TaskSender(settings_from_env(env)).app

    def answered() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"worker exited with {proc.returncode}:\n{log_path.read_text()[-4000:]}")
        return bool(app.control.ping(destination=[node], timeout=0.5))

    wait_until(answered, timeout, f"worker {node}", interval=0.2)


def stop_worker(proc: subprocess.Popen) -> None:
    """Stop a worker started by `start_worker` (warm shutdown, then kill)."""
    if proc.poll() is None:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait(10)


@pytest.fixture(scope="session")
def test_bucket(s3_endpoint: str) -> str:
    """The bucket of the test S3 server."""
    return TEST_BUCKET


@pytest.fixture(scope="session")
def wait_for():
    """`wait_until(condition, timeout, what)`: poll until truthy (returned) or fail the test."""
    return wait_until


@pytest.fixture
def worker_factory(service_env: dict[str, str], tmp_path: Path):
    """Starts extra worker subprocesses: `start(env_overrides, gpu=None, wait=True) -> (proc, node, log_path)`
    (with `gpu`, as `docflash worker --gpu N`); all are stopped after the test."""
    started: list[subprocess.Popen] = []

    def start(overrides: dict[str, str] | None = None, gpu: int | None = None, wait: bool = True):
        env = {**service_env, **(overrides or {})}
        name = f"gpu{gpu}" if gpu is not None else f"extra-{uuid.uuid4().hex[:6]}"
        node = f"{name}@{socket.gethostname()}"
        args = ("--gpu", str(gpu)) if gpu is not None else ("--node-name", node)
        log_path = tmp_path / f"{node.split('@')[0]}.log"
        proc = start_worker(env, args, log_path)
        started.append(proc)
        if wait:
            wait_for_worker(env, proc, node, log_path)
        return proc, node, log_path

    yield start
    for proc in started:
        stop_worker(proc)


@pytest.fixture(scope="session")
def celery_worker(service_env: dict[str, str], tmp_path_factory) -> Iterator[str]:
    """A real Celery worker subprocess serving the test queue; yields its node name."""
    node = f"test-{uuid.uuid4().hex[:6]}@{socket.gethostname()}"
    log_path = tmp_path_factory.mktemp("worker") / "worker.log"
    proc = start_worker(service_env, ("--node-name", node), log_path)
    try:
        wait_for_worker(service_env, proc, node, log_path)
        yield node
    finally:
        stop_worker(proc)


@pytest.fixture
def offline_service(service_settings) -> JobService:
    """A JobService on a queue of its own (nothing consumes it) and its own Redis key prefix."""
    settings = service_settings.model_copy(
        update={"gpu_queue": f"offline-{uuid.uuid4().hex[:8]}", "redis_prefix": f"offline-{uuid.uuid4().hex[:8]}:",
                "pack_token_budget": 64}
    )
    return JobService.from_settings(settings)
