"""S3 drop: poll `watch_uri` and turn each new document object (or `.jsonl` batch) into a job.

The task and options come from a `job.json` in the same folder ({"task": ..., "options": {...}, "priority": n,
"metadata": {...}}), else from the folder convention `<watch_uri>/<task>/...`. Each object version
(bucket/key/etag) is claimed once in Redis (SET NX, all of a pass's objects in one round trip), so several
watchers never submit it twice, and the claim is then marked done with the job id (or with the reason it was
refused) and kept for the job retention period.
"""
from __future__ import annotations

import hashlib
import json
import re
import threading
from pathlib import PurePosixPath
from typing import Any

from pydantic import ValidationError
from redis import Redis

from core.documents import JSONL_SUFFIX
from core.inputs import InvalidJobError, is_document_name
from core.jobs import JobRequest
from core.logging import get_logger
from core.service import JobService
from core.settings import Settings
from core.storage import ObjectInfo, split_s3_uri
from core.task_specs import TASK_OPTIONS

JOB_SPEC_NAME = "job.json"
_BAD_KEY_CHARS = re.compile(r"[\x00-\x1f\x7f\\]")


class RefusedObject(ValueError):
    """A dropped object that cannot become a job; the message says why."""


def check_relative_key(relative_key: str) -> str:
    """Refuse keys that could escape or confuse the layout: '..' or empty segments, absolute paths, control
    characters and backslashes."""
    if relative_key.startswith("/"):
        raise RefusedObject("absolute paths are refused")
    if _BAD_KEY_CHARS.search(relative_key):
        raise RefusedObject("control characters and backslashes are refused")
    if any(part in ("", ".", "..") for part in relative_key.split("/")):
        raise RefusedObject("'.', '..' and empty path segments are refused")
    return relative_key


class DropWatcher:
    """Polls the drop prefix and submits jobs through JobService with the tenant `watch_tenant`."""

    def __init__(self, settings: Settings, service: JobService):
        if not settings.watch_uri:
            raise ValueError("watch_uri is not set (DOCFLASH_WATCH_URI)")
        self.settings = settings
        self.service = service
        self.bucket, prefix = split_s3_uri(settings.watch_uri)
        self.prefix = prefix.rstrip("/") + "/" if prefix else ""
        self.redis: Redis = service.state.redis
        # A claim outlives a watcher that dies mid-pass only briefly; once marked done or refused it is kept.
        self._claim_ttl_s = int(max(600, 10 * settings.watch_interval_s))
        self.log = get_logger(watch_uri=settings.watch_uri)

    def _claim_key(self, info: ObjectInfo) -> str:
        digest = hashlib.sha256(f"{info.uri}\n{info.etag}".encode()).hexdigest()
        return f"{self.settings.redis_prefix}watch:{digest}"

    def poll(self) -> list[str]:
        """One pass over the drop prefix; returns the ids of the jobs submitted."""
        objects = self.service.storage.list(f"s3://{self.bucket}/{self.prefix}")
        listed = [(info, self._relative(info)) for info in objects]
        specs = {rel.rpartition("/")[0]: info for info, rel in listed if PurePosixPath(rel).name == JOB_SPEC_NAME}
        candidates = [(info, rel) for info, rel in listed if PurePosixPath(rel).name != JOB_SPEC_NAME]
        claims = [self._claim_key(info) for info, _ in candidates]
        pipe = self.redis.pipeline(transaction=False)
        for claim in claims:
            pipe.set(claim, "claimed", nx=True, ex=self._claim_ttl_s)
        submitted = []
        for (info, relative), claim, claimed in zip(candidates, claims, pipe.execute()):
            if not claimed:
                continue
            try:
                job_id = self._submit(info, relative, specs.get(relative.rpartition("/")[0]))
            except (RefusedObject, InvalidJobError, ValidationError) as exc:
                reason = _reason(exc)
                self.log.error("dropped object refused", key=repr(relative), reason=reason)
                self.redis.set(claim, f"refused: {reason}", ex=self.settings.job_ttl_s)
            except Exception:
                self.log.exception("dropped object not submitted; will retry", key=repr(relative))
                self.redis.delete(claim)
            else:
                self.redis.set(claim, f"done: {job_id}", ex=self.settings.job_ttl_s)
                self.log.info("dropped object submitted", key=relative, job_id=job_id)
                submitted.append(job_id)
        return submitted

    def _relative(self, info: ObjectInfo) -> str:
        return split_s3_uri(info.uri)[1][len(self.prefix):]

    def _submit(self, info: ObjectInfo, relative: str, spec_info: ObjectInfo | None) -> str:
        check_relative_key(relative)
        if not is_document_name(relative):
            raise RefusedObject(f"unsupported document type {PurePosixPath(relative).suffix!r}")
        spec = self._spec(relative, spec_info)
        source: dict[str, Any] = (
            {"input_uri": info.uri} if relative.lower().endswith(JSONL_SUFFIX) else {"documents": [{"uri": info.uri}]}
        )
        request = JobRequest(
            **{
                **spec,
                **source,
                "idempotency_key": f"watch:{info.uri}:{info.etag}",
                "metadata": {**spec.get("metadata", {}), "source": info.uri},
            }
        )
        return self.service.submit(request, self.settings.watch_tenant).id

    def _spec(self, relative: str, spec_info: ObjectInfo | None) -> dict[str, Any]:
        if spec_info is not None:
            try:
                spec = json.loads(self.service.storage.get(spec_info.uri))
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise RefusedObject(f"{JOB_SPEC_NAME} beside it is not valid JSON: {exc}") from None
            if not isinstance(spec, dict) or not set(spec) <= {"task", "options", "priority", "metadata"}:
                raise RefusedObject(f"{JOB_SPEC_NAME} must be an object with task, options, priority, metadata")
            if not isinstance(spec.get("metadata", {}), dict):
                raise RefusedObject(f"{JOB_SPEC_NAME}: metadata must be an object")
            return spec
        folder = relative.split("/", 1)[0] if "/" in relative else ""
        if folder in TASK_OPTIONS:
            return {"task": folder}
        raise RefusedObject(
            f"no {JOB_SPEC_NAME} beside it and its first folder {folder!r} is not a task "
            f"({', '.join(sorted(TASK_OPTIONS))})"
        )

    def run(self, stop: threading.Event | None = None) -> None:
        """Poll every `watch_interval_s` until `stop` is set."""
        stop = stop or threading.Event()
        self.log.info("watching", interval_s=self.settings.watch_interval_s)
        while not stop.is_set():
            try:
                self.poll()
            except Exception:
                self.log.exception("poll failed; retrying next interval")
            stop.wait(self.settings.watch_interval_s)


def _reason(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        return f"{'.'.join(map(str, first['loc'])) or 'job.json'}: {first['msg']}"
    return str(exc)
