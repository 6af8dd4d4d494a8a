"""The S3 drop: objects under watch_uri become jobs once each; odd keys and objects without a task are refused."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from core.jobs import JobStatus
from core.logging import configure_logging
from core.service import JobService
from core.settings import Settings
from worker.watch import DropWatcher, RefusedObject, check_relative_key

TEXT = "Dropped documents become jobs. Each object version is claimed once. Results land under the tenant."


@pytest.fixture
def drop(offline_service: JobService, test_bucket: str) -> tuple[DropWatcher, str]:
    """A watcher over a fresh drop prefix (submitting to a queue nothing consumes), and that prefix's URI."""
    prefix = f"s3://{test_bucket}/drop-{uuid.uuid4().hex[:8]}"
    offline_service.settings = offline_service.settings.model_copy(update={"watch_uri": prefix + "/"})
    return DropWatcher(offline_service.settings, offline_service), prefix


@pytest.fixture
def stdlib_logging():
    """Route structlog through the standard library (as the services do), restoring the root logger after."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    configure_logging(Settings(_env_file=None, log_json=True))
    yield
    root.handlers[:], root.level = handlers, level


def claim_values(watcher: DropWatcher) -> list[str]:
    redis = watcher.redis
    return sorted(redis.get(key).decode() for key in redis.scan_iter(f"{watcher.settings.redis_prefix}watch:*"))


def test_new_objects_become_jobs_with_task_from_folder_or_job_json(drop, offline_service: JobService) -> None:
    watcher, prefix = drop
    offline_service.storage.put_many({
        f"{prefix}/stats/a.txt": TEXT.encode(),
        f"{prefix}/team-x/job.json": json.dumps({"task": "summarize", "options": {"sentences": 2},
                                                  "metadata": {"team": "x"}}).encode(),
        f"{prefix}/team-x/report.md": TEXT.encode(),
        f"{prefix}/team-x/batch.jsonl": b'{"id": "l1", "text": "First."}\n{"id": "l2", "text": "Second."}\n',
    })
    job_ids = watcher.poll()
    submitted = [offline_service.get("dropbox", job_id) for job_id in job_ids]
    jobs = {job.metadata["source"].rpartition("/")[2]: job for job in submitted}
    assert set(jobs) == {"a.txt", "report.md", "batch.jsonl"}
    assert (jobs["a.txt"].task, jobs["a.txt"].counts.total) == ("stats", 1)
    assert jobs["report.md"].task == "summarize" and jobs["report.md"].options["sentences"] == 2
    assert jobs["report.md"].metadata["team"] == "x"
    assert jobs["batch.jsonl"].counts.total == 2
    assert all(job.status == JobStatus.queued for job in jobs.values())
    assert watcher.poll() == []
    assert DropWatcher(watcher.settings, offline_service).poll() == []


def test_a_changed_object_is_a_new_version_and_a_new_job(drop, offline_service: JobService) -> None:
    watcher, prefix = drop
    offline_service.storage.put(f"{prefix}/noop/a.txt", b"first version")
    assert len(watcher.poll()) == 1
    offline_service.storage.put(f"{prefix}/noop/a.txt", b"second version, longer")
    assert len(watcher.poll()) == 1
    assert watcher.poll() == []


def test_concurrent_watchers_submit_each_object_once(drop, offline_service: JobService) -> None:
    watcher, prefix = drop
    offline_service.storage.put_many({f"{prefix}/noop/d{i}.txt": TEXT.encode() for i in range(12)})
    results: list[list[str]] = []
    threads = [threading.Thread(target=lambda: results.append(DropWatcher(watcher.settings, offline_service).poll()))
               for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    submitted = [job_id for ids in results for job_id in ids]
    assert len(submitted) == len(set(submitted)) == 12


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("stats/../evil.txt", "'..'"),
        ("stats/bad\x01name.txt", "control characters"),
        ("/root.txt", "absolute"),
        ("stats//double.txt", "empty path segments"),
        ("stats/back\\slash.txt", "backslashes"),
        ("stats/image.png", "unsupported document type"),
        ("misc/notes.txt", "is not a task"),
        ("loose.txt", "no job.json"),
    ],
    ids=["dotdot", "control-char", "absolute", "empty-segment", "backslash", "unsupported", "unknown-folder",
         "top-level"],
)
def test_odd_keys_are_refused_once_with_a_logged_reason(stdlib_logging, drop, offline_service: JobService, key: str,
                                                        reason: str, caplog: pytest.LogCaptureFixture) -> None:
    watcher, prefix = drop
    offline_service.storage.put(f"{prefix}/{key}", TEXT.encode())
    assert watcher.poll() == []
    [claim] = claim_values(watcher)
    assert claim.startswith("refused: ") and reason in claim
    [logged] = [r.msg for r in caplog.records if "dropped object refused" in str(r.msg)]
    assert logged["key"] == repr(key) and reason in logged["reason"]
    assert watcher.poll() == []


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        (b"{not json", "not valid JSON"),
        (json.dumps({"task": "summarize", "colour": 1}).encode(), "must be an object with"),
        (json.dumps({"task": "summarize", "options": {"sentences": -1}}).encode(), "options.sentences"),
        (json.dumps({"task": "translate"}).encode(), "unknown task"),
    ],
    ids=["invalid-json", "unknown-key", "bad-option", "unknown-task"],
)
def test_a_bad_job_json_refuses_its_documents(drop, offline_service: JobService, spec: bytes, reason: str) -> None:
    watcher, prefix = drop
    offline_service.storage.put_many({f"{prefix}/in/job.json": spec, f"{prefix}/in/doc.txt": TEXT.encode()})
    assert watcher.poll() == []
    [claim] = claim_values(watcher)
    assert reason in claim


def test_relative_keys_that_are_fine_pass() -> None:
    assert check_relative_key("stats/2026/report v2.pdf") == "stats/2026/report v2.pdf"
    with pytest.raises(RefusedObject):
        check_relative_key("stats/./a.txt")


def test_dropped_document_is_processed_end_to_end(service_settings, celery_worker: str, test_bucket: str,
                                                  wait_for) -> None:
    prefix = f"s3://{test_bucket}/drop-e2e-{uuid.uuid4().hex[:8]}"
    settings = service_settings.model_copy(update={"watch_uri": prefix})
    service = JobService.from_settings(settings)
    service.storage.put(f"{prefix}/stats/memo.txt", TEXT.encode())
    [job_id] = DropWatcher(settings, service).poll()
    job = wait_for(lambda: (j := service.get("dropbox", job_id)).status.is_final and j, 60, "the dropped job")
    assert job.status == JobStatus.succeeded
    [line] = b"".join(service.open_output(job, "results")).splitlines()
    assert json.loads(line) == {"id": "memo.txt", "result": json.loads(line)["result"]}
    assert json.loads(line)["result"]["sentences"] == 3
    assert job.output_uri.startswith(f"{settings.output_uri}/dropbox/")


def test_celery_beat_schedules_the_watcher(service_env: dict[str, str], service_settings, celery_worker: str,
                                           test_bucket: str, tmp_path, wait_for) -> None:
    prefix = f"s3://{test_bucket}/drop-beat-{uuid.uuid4().hex[:8]}"
    service = JobService.from_settings(service_settings)
    service.storage.put(f"{prefix}/noop/scheduled.txt", TEXT.encode())
    env = {**os.environ, **service_env, "DOCFLASH_WATCH_URI": prefix, "DOCFLASH_WATCH_INTERVAL_S": "1"}
    beat = subprocess.Popen(
        [str(Path(sys.executable).parent / "celery"), "-A", "worker.celery_app", "beat",
         "--schedule", str(tmp_path / "beat-schedule"), "--loglevel", "WARNING"],
        env=env, cwd=Path(__file__).resolve().parents[2], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        def dropped_job():
            jobs = [j for j in service.list("dropbox", limit=100)[0] if j.metadata.get("source", "").startswith(prefix)]
            return jobs[0] if jobs and jobs[0].status.is_final else None

        job = wait_for(dropped_job, 60, "the scheduled poll's job")
    finally:
        beat.terminate()
        beat.wait(10)
    assert job.status == JobStatus.succeeded and job.metadata["source"] == f"{prefix}/noop/scheduled.txt"
