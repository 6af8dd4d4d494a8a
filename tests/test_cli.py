"""The `docflash` command line, run as real processes."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from core.jobs import JobStatus
from core.service import JobService

REPO = Path(__file__).resolve().parents[1]
DOCFLASH = str(Path(sys.executable).parent / "docflash")
TEXT = "The command line talks to the API. The API queues the job. The worker writes the results."


def docflash(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `docflash ARGS` and return the finished process (text output)."""
    return subprocess.run([DOCFLASH, *args], env={**os.environ, **(env or {})}, cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


def test_run_writes_the_job_files_for_the_examples(tmp_path: Path) -> None:
    done = docflash("run", "examples", "--task", "stats", "--out", str(tmp_path / "out"), "--no-progress")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("succeeded: ")
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["counts"]["succeeded"] == manifest["counts"]["total"] > 5
    first = json.loads((tmp_path / "out" / "results.jsonl").read_text().splitlines()[0])
    assert first["result"]["words"] > 1000


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--task", "stats", "--options", "{not json"], "--options"),
        (["--task", "stats", "--options", "[1]"], "must be a JSON object"),
        (["--task", "translate"], "unknown task 'translate'"),
        (["--task", "summarize", "--options", '{"sentences": 0}'], "sentences"),
    ],
    ids=["options-not-json", "options-not-object", "unknown-task", "bad-option"],
)
def test_run_refuses_bad_arguments_by_name(tmp_path: Path, args: list[str], message: str) -> None:
    done = docflash("run", "examples", "--out", str(tmp_path / "out"), *args)
    assert done.returncode == 2
    assert message in done.stdout + done.stderr


def test_bad_settings_exit_naming_the_variable(tmp_path: Path) -> None:
    done = docflash("run", "examples", "--task", "stats", "--out", str(tmp_path),
                    env={"DOCFLASH_TASK_SOFT_TIME_LIMIT": "9000", "DOCFLASH_TASK_HARD_TIME_LIMIT": "100"})
    assert done.returncode == 2 and "DOCFLASH_TASK_SOFT_TIME_LIMIT" in done.stderr


def test_new_key_prints_a_key_and_its_settings_entry() -> None:
    done = docflash("new-key", "acme")
    assert done.returncode == 0, done.stderr
    key = done.stdout.split("key: ", 1)[1].split()[0]
    assert f"DOCFLASH_API_KEYS entry: acme:{hashlib.sha256(key.encode()).hexdigest()}" in done.stdout
    assert len(key) >= 32 and docflash("new-key", "acme").stdout != done.stdout
    assert docflash("new-key", "../x").returncode == 2


@pytest.fixture
def api_server(service_env: dict[str, str], celery_worker: str, wait_for):
    """`docflash api` on a free port with one API key for tenant `cli`; yields (url, key, process)."""
    from socket import socket

    with socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    key = f"key-{uuid.uuid4().hex}"
    env = {**os.environ, **service_env, "DOCFLASH_API_KEYS": f"cli:{hashlib.sha256(key.encode()).hexdigest()}"}
    proc = subprocess.Popen([DOCFLASH, "api", "--port", str(port)], env=env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert proc.poll() is None, "docflash api exited"
        try:
            return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(healthy, 30, "docflash api")
        yield url, key, proc
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.slow
def test_submit_status_and_results_go_through_the_api(api_server, tmp_path: Path) -> None:
    url, key, proc = api_server
    (tmp_path / "memo.txt").write_text(TEXT)
    (tmp_path / "rows.jsonl").write_text('{"id": "r1", "text": "First row."}\n')
    auth = ["--api-url", url, "--api-key", key]
    submitted = docflash("submit", str(tmp_path / "memo.txt"), str(tmp_path / "rows.jsonl"), "--task", "stats",
                         "--wait", *auth)
    assert submitted.returncode == 0, submitted.stderr
    job = json.loads(submitted.stdout)
    assert job["status"] == JobStatus.succeeded and job["counts"]["succeeded"] == 2
    status = json.loads(docflash("status", job["id"], *auth).stdout)
    assert status["id"] == job["id"] and status["status"] == "succeeded"
    results = docflash("results", job["id"], *auth)
    assert [json.loads(line)["id"] for line in results.stdout.splitlines()] == ["memo.txt", "r1"]
    docflash("results", job["id"], "--errors", "--out", str(tmp_path / "errors.jsonl"), *auth)
    assert (tmp_path / "errors.jsonl").read_text() == ""
    denied = docflash("status", job["id"], "--api-url", url, "--api-key", "wrong")
    assert denied.returncode == 1 and "HTTP 401" in denied.stderr
    maps = Path(f"/proc/{proc.pid}/maps").read_text()
    assert "libtorch" not in maps and "torch/_C" not in maps


@pytest.mark.slow
def test_ping_worker_answers_for_this_hosts_workers(service_env: dict[str, str], worker_factory) -> None:
    env = {**service_env, "DOCFLASH_GPU_QUEUE": f"ping-{uuid.uuid4().hex[:6]}", "DOCFLASH_WARMUP_TASKS": ""}
    _, node, _ = worker_factory(env, gpu=0)
    done = docflash("ping-worker", "--gpu", "0", env=env)
    assert done.returncode == 0 and done.stdout.split() == [node]
    assert node in docflash("ping-worker", "--timeout", "1", env=env).stdout.split()
    missing = docflash("ping-worker", "--gpu", "5", "--timeout", "1", env=env)
    assert missing.returncode == 1 and "no worker" in missing.stderr


@pytest.mark.slow
def test_watch_once_submits_dropped_documents(service_env: dict[str, str], service_settings, celery_worker: str,
                                              test_bucket: str, wait_for) -> None:
    prefix = f"s3://{test_bucket}/cli-drop-{uuid.uuid4().hex[:8]}"
    service = JobService.from_settings(service_settings)
    service.storage.put(f"{prefix}/noop/one.md", TEXT.encode())
    done = docflash("watch", "--once", env={**service_env, "DOCFLASH_WATCH_URI": prefix})
    assert done.returncode == 0, done.stderr
    [job_id] = done.stdout.split()
    job = wait_for(lambda: (j := service.get("dropbox", job_id)).status.is_final and j, 60, "the dropped job")
    assert job.status == JobStatus.succeeded
    assert docflash("watch", "--once", env={**service_env, "DOCFLASH_WATCH_URI": prefix}).stdout == ""
    assert docflash("watch", env={**service_env, "DOCFLASH_WATCH_URI": ""}).returncode == 2


@pytest.mark.slow
def test_flower_serves_behind_basic_auth(service_env: dict[str, str], wait_for) -> None:
    from socket import socket

    with socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, **service_env, "FLOWER_BASIC_AUTH": "ops:s3cret"}
    proc = subprocess.Popen([DOCFLASH, "flower", "--port", str(port), "--address", "127.0.0.1"], env=env,
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def status(auth=None) -> int:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/", auth=auth, timeout=1).status_code
        except httpx.TransportError:
            return 0

    try:
        assert wait_for(lambda: status(), 30, "flower") == 401
        assert status(("ops", "s3cret")) == 200
    finally:
        proc.terminate()
        proc.wait(10)
