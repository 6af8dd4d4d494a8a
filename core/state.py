"""Job state in Redis.

Keys (under the settings' `redis_prefix`):
  job:{id}          hash: the job's fields and its counters (total, succeeded, failed, cancelled)
  job:{id}:refs     hash: doc id -> DocRef JSON (where the worker reads the document)
  job:{id}:docs     hash: doc id -> final outcome, written once (HSETNX) so a redelivered task never counts twice
  job:{id}:running  set: doc ids being processed (running = SCARD; queued = total - done - running)
  job:{id}:attempts hash: doc id -> times processing started (a redelivered document counts again)
  job:{id}:records  hash: doc id -> its record JSON (small ones), kept until finalize to save reading them back
  job:{id}:texts    hash: doc id -> inline text (a job's small inline inputs), kept until the job is final
  tenant:{t}:jobs   sorted set: job ids by creation time (listing, newest first)
  idem:{t}:{sha256} string: idempotency key -> job id
Every change of counters happens inside one Lua script, so concurrent workers never lose a count.
"""
from __future__ import annotations

import base64
import hashlib
import json
from datetime import UTC, datetime
from typing import Any, NamedTuple

from redis import Redis

from core.inputs import DocRef, InvalidJobError
from core.jobs import Counts, Job, JobStatus

OUTCOMES = ("succeeded", "failed", "cancelled")

_CREATE = """
if ARGV[3] ~= "" then
  local existing = redis.call("GET", KEYS[4])
  if existing and redis.call("EXISTS", ARGV[7] .. existing) == 1 then return existing end
  redis.call("SET", KEYS[4], ARGV[1], "EX", ARGV[3])
end
local fields = cjson.decode(ARGV[4])
for k, v in pairs(fields) do redis.call("HSET", KEYS[1], k, v) end
local refs = cjson.decode(ARGV[5])
for k, v in pairs(refs) do redis.call("HSET", KEYS[2], k, v) end
for i = 8, #ARGV, 2 do redis.call("HSET", KEYS[5], ARGV[i], ARGV[i + 1]) end
redis.call("ZADD", KEYS[3], ARGV[2], ARGV[1])
redis.call("ZREMRANGEBYSCORE", KEYS[3], "-inf", ARGV[6])
return ARGV[1]
"""

# For each doc id in ARGV[3..]: "done" (outcome recorded), "cancelled" (job is being cancelled: recorded as
# such), "first", "retry" or "exhausted" (started more than ARGV[2] times: each attempt lost its worker).
_BEGIN = """
local status = redis.call("HGET", KEYS[1], "status")
local cancelling = status == "cancelling" or status == "cancelled"
if status == "queued" then
  redis.call("HSET", KEYS[1], "status", "running")
  redis.call("HSETNX", KEYS[1], "started_at", ARGV[1])
end
local result = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  if redis.call("HEXISTS", KEYS[2], id) == 1 then
    result[#result + 1] = "done"
  elseif cancelling then
    redis.call("HSET", KEYS[2], id, "cancelled")
    redis.call("HINCRBY", KEYS[1], "cancelled", 1)
    result[#result + 1] = "cancelled"
  else
    redis.call("SADD", KEYS[3], id)
    local attempt = redis.call("HINCRBY", KEYS[4], id, 1)
    if attempt == 1 then
      result[#result + 1] = "first"
    elseif attempt > tonumber(ARGV[2]) then
      result[#result + 1] = "exhausted"
    else
      result[#result + 1] = "retry"
    end
  end
end
return result
"""

# ARGV: (doc id, outcome, record JSON or "") per document -> documents of the job still without an outcome.
_FINISH = """
for i = 1, #ARGV, 3 do
  redis.call("SREM", KEYS[3], ARGV[i])
  if redis.call("HSETNX", KEYS[2], ARGV[i], ARGV[i + 1]) == 1 then
    redis.call("HINCRBY", KEYS[1], ARGV[i + 1], 1)
    if ARGV[i + 2] ~= "" then redis.call("HSET", KEYS[4], ARGV[i], ARGV[i + 2]) end
  end
end
return tonumber(redis.call("HGET", KEYS[1], "total")) - redis.call("HLEN", KEYS[2])
"""

# Marks the job cancelling and records every document that has not started as cancelled.
# -> {previous status, documents still without an outcome}.
_CANCEL = """
local status = redis.call("HGET", KEYS[1], "status")
if status ~= "queued" and status ~= "running" then
  return {status or "", -1}
end
redis.call("HSET", KEYS[1], "status", "cancelling")
local ids = redis.call("HKEYS", KEYS[4])
local skipped = 0
for _, id in ipairs(ids) do
  if redis.call("SISMEMBER", KEYS[3], id) == 0 and redis.call("HSETNX", KEYS[2], id, "cancelled") == 1 then
    skipped = skipped + 1
  end
end
redis.call("HINCRBY", KEYS[1], "cancelled", skipped)
return {status, tonumber(redis.call("HGET", KEYS[1], "total")) - redis.call("HLEN", KEYS[2])}
"""


class _JobKeys(NamedTuple):
    base: str
    docs: str
    running: str
    refs: str
    attempts: str
    records: str
    texts: str


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


def _idempotency_hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def encode_cursor(score: float, job_id: str) -> str:
    """An opaque listing cursor pointing just past (score, job_id)."""
    return base64.urlsafe_b64encode(f"{score:.0f}:{job_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    """The (score, job_id) of a cursor; raises InvalidJobError("cursor", ...) for one we did not make."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        score, job_id = raw.split(":", 1)
        return float(score), job_id
    except (ValueError, UnicodeDecodeError):
        raise InvalidJobError("cursor", "not a cursor returned by a previous listing") from None


class JobState:
    """Reads and updates jobs in Redis; safe to use from many processes at once."""

    def __init__(self, redis: Redis, prefix: str, job_ttl_s: int):
        self.redis = redis
        self.prefix = prefix
        self.job_ttl_s = job_ttl_s
        self._create = redis.register_script(_CREATE)
        self._begin = redis.register_script(_BEGIN)
        self._finish = redis.register_script(_FINISH)
        self._cancel = redis.register_script(_CANCEL)

    def _keys(self, job_id: str) -> _JobKeys:
        base = f"{self.prefix}job:{job_id}"
        return _JobKeys(base, f"{base}:docs", f"{base}:running", f"{base}:refs", f"{base}:attempts",
                        f"{base}:records", f"{base}:texts")

    def _index_key(self, tenant: str) -> str:
        return f"{self.prefix}tenant:{tenant}:jobs"

    def idempotent_job_id(self, tenant: str, key: str) -> str | None:
        """The job id already submitted by `tenant` under idempotency `key`, if any."""
        value = self.redis.get(f"{self.prefix}idem:{tenant}:{_idempotency_hash(key)}")
        return value.decode() if value else None

    def create(
        self, job: Job, refs: list[DocRef], idempotency_key: str | None, texts: dict[str, bytes] | None = None
    ) -> str:
        """Store a new job, its document refs and its inline `texts` (doc id -> text, kept until the job is
        final), all at once; with an idempotency key already used by the tenant, store nothing and return the
        earlier job's id. Returns the id of the job that holds the request."""
        fields = {
            "id": job.id,
            "tenant": job.tenant,
            "task": job.task,
            "model": job.model or "",
            "options": json.dumps(job.options),
            "status": job.status.value,
            "created_at": job.created_at.isoformat(),
            "output_uri": job.output_uri,
            "priority": str(job.priority),
            "metadata": json.dumps(job.metadata),
            "total": str(len(refs)),
            **{outcome: "0" for outcome in OUTCOMES},
        }
        keys = self._keys(job.id)
        idem_key = f"{self.prefix}idem:{job.tenant}:{_idempotency_hash(idempotency_key or '')}"
        result = self._create(
            keys=[keys.base, keys.refs, self._index_key(job.tenant), idem_key, keys.texts],
            args=[
                job.id,
                int(job.created_at.timestamp() * 1000),
                str(self.job_ttl_s) if idempotency_key else "",
                json.dumps(fields),
                json.dumps({ref.id: json.dumps(ref.to_dict()) for ref in refs}),
                int((job.created_at.timestamp() - self.job_ttl_s) * 1000),
                f"{self.prefix}job:",
                *(item for pair in (texts or {}).items() for item in pair),
            ],
        )
        return result.decode()

    def get(self, job_id: str) -> Job | None:
        """The job, or None if there is no such job."""
        return self.get_many([job_id])[0]

    def get_many(self, job_ids: list[str]) -> list[Job | None]:
        """Jobs by id (None for unknown ids), in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for job_id in job_ids:
            keys = self._keys(job_id)
            pipe.hgetall(keys.base)
            pipe.scard(keys.running)
        replies = pipe.execute()
        return [_to_job(replies[i], replies[i + 1]) for i in range(0, len(replies), 2)]

    def list(
        self, tenant: str, status: JobStatus | None, limit: int, cursor: str | None
    ) -> tuple[list[Job], str | None]:
        """A page of `tenant`'s jobs, newest first, optionally only those with `status`; also the cursor of the
        next page (None on the last page)."""
        index = self._index_key(tenant)
        after = decode_cursor(cursor) if cursor else None
        jobs: list[Job] = []
        batch = max(limit * 2, 50)
        while True:
            rows = [(member.decode(), score) for member, score in self._index_page(index, after, batch)]
            for job, (job_id, score) in zip(self.get_many([row[0] for row in rows]), rows):
                if job is None or (status is not None and job.status != status):
                    continue
                jobs.append(job)
                if len(jobs) == limit:
                    return jobs, encode_cursor(score, job_id)
            if len(rows) < batch:
                return jobs, None
            after = rows[-1][1], rows[-1][0]

    def _index_page(self, index: str, after: tuple[float, str] | None, batch: int) -> list[tuple[bytes, float]]:
        """Up to `batch` index entries, newest first, following the entry `after` (score, job id)."""
        if after is None:
            return self.redis.zrevrange(index, 0, batch - 1, withscores=True)
        score, job_id = after
        rank = self.redis.zrevrank(index, job_id)
        if rank is not None:
            return self.redis.zrevrange(index, rank + 1, rank + batch, withscores=True)
        return self.redis.zrevrangebyscore(index, f"({score:.0f}", "-inf", start=0, num=batch, withscores=True)

    def refs(self, job_id: str, doc_ids: list[str]) -> list[DocRef | None]:
        """The refs of `doc_ids` (None for unknown ones)."""
        values = self.redis.hmget(self._keys(job_id).refs, doc_ids) if doc_ids else []
        return [DocRef.from_dict(json.loads(value)) if value else None for value in values]

    def texts(self, job_id: str, doc_ids: list[str]) -> dict[str, bytes]:
        """The inline texts kept in Redis of those `doc_ids` that have one, by doc id."""
        values = self.redis.hmget(self._keys(job_id).texts, doc_ids) if doc_ids else []
        return {doc_id: value for doc_id, value in zip(doc_ids, values) if value is not None}

    def all_refs(self, job_id: str) -> list[DocRef]:
        """All refs of the job, in request order."""
        values = self.redis.hvals(self._keys(job_id).refs)
        return sorted((DocRef.from_dict(json.loads(value)) for value in values), key=lambda ref: ref.index)

    def outcomes(self, job_id: str, doc_ids: list[str] | None = None) -> dict[str, str]:
        """Doc id -> recorded outcome (succeeded, failed or cancelled), of all documents or of `doc_ids`."""
        key = self._keys(job_id).docs
        if doc_ids is None:
            return {k.decode(): v.decode() for k, v in self.redis.hgetall(key).items()}
        values = self.redis.hmget(key, doc_ids) if doc_ids else []
        return {doc_id: value.decode() for doc_id, value in zip(doc_ids, values) if value is not None}

    def begin_documents(self, job_id: str, doc_ids: list[str], max_attempts: int) -> list[str]:
        """Mark documents as running, in one round trip. Returns per document "first" (first attempt), "retry"
        (an earlier attempt started it: look for its stored record), "exhausted" (more than `max_attempts`
        attempts), "done" (outcome already recorded: skip) or "cancelled" (recorded as cancelled: skip)."""
        keys = self._keys(job_id)
        replies = self._begin(
            keys=[keys.base, keys.docs, keys.running, keys.attempts],
            args=[utcnow().isoformat(), max_attempts, *doc_ids],
        )
        return [reply.decode() for reply in replies]

    def finish_documents(self, job_id: str, outcomes: list[tuple[str, str, str]]) -> int:
        """Record (doc id, outcome, record JSON or "") triples, each document once (later calls change nothing),
        in one round trip; the record JSON is kept until finalize so it need not be read back from storage.
        Returns how many documents of the job have no outcome yet."""
        for _, outcome, _ in outcomes:
            if outcome not in OUTCOMES:
                raise ValueError(f"outcome must be one of {OUTCOMES}, got {outcome!r}")
        keys = self._keys(job_id)
        args = [item for triple in outcomes for item in triple]
        return int(self._finish(keys=[keys.base, keys.docs, keys.running, keys.records], args=args))

    def records(self, job_id: str) -> dict[str, dict]:
        """Doc id -> the records kept by `finish_documents` (until the job is final)."""
        return {k.decode(): json.loads(v) for k, v in self.redis.hgetall(self._keys(job_id).records).items()}

    def remaining(self, job_id: str) -> int:
        """How many documents of the job have no outcome yet."""
        keys = self._keys(job_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hget(keys.base, "total")
        pipe.hlen(keys.docs)
        total, done = pipe.execute()
        return int(total or 0) - int(done)

    def cancel(self, job_id: str) -> tuple[JobStatus | None, int]:
        """Start cancelling a queued or running job: documents not yet started are recorded as cancelled at once.
        Returns (status before, documents without an outcome now); -1 if the job was not cancellable."""
        keys = self._keys(job_id)
        previous, remaining = self._cancel(keys=[keys.base, keys.docs, keys.running, keys.refs])
        return (JobStatus(previous.decode()) if previous else None), int(remaining)

    def stamp_finished(self, job_id: str) -> datetime:
        """Set the job's finished_at the first time this is called; returns it (the same on every call)."""
        base = self._keys(job_id).base
        pipe = self.redis.pipeline(transaction=True)
        pipe.hsetnx(base, "finished_at", utcnow().isoformat())
        pipe.hget(base, "finished_at")
        return datetime.fromisoformat(pipe.execute()[1].decode())

    def set_final(self, job_id: str, status: JobStatus, error: str | None = None) -> None:
        """Record the final status (and finished_at, if not yet set), drop the job's inline texts and let its
        other keys expire after the retention period."""
        if not status.is_final:
            raise ValueError(f"status must be final, got {status}")
        keys = self._keys(job_id)
        pipe = self.redis.pipeline(transaction=True)
        pipe.hsetnx(keys.base, "finished_at", utcnow().isoformat())
        pipe.hset(keys.base, "status", status.value)
        if error:
            pipe.hset(keys.base, "error", error)
        pipe.delete(keys.running, keys.records, keys.texts)
        for key in (keys.base, keys.docs, keys.refs, keys.attempts):
            pipe.expire(key, self.job_ttl_s)
        pipe.execute()


def _text(data: dict[bytes, bytes], name: str) -> str | None:
    value = data.get(name.encode())
    return value.decode() if value else None


def _to_job(data: dict[bytes, bytes], running: int) -> Job | None:
    if not data:
        return None
    numbers: dict[str, Any] = {name: int(_text(data, name) or 0) for name in ("total", *OUTCOMES)}
    status = JobStatus(_text(data, "status"))
    running = 0 if status.is_final else running
    queued = max(0, numbers["total"] - numbers["succeeded"] - numbers["failed"] - numbers["cancelled"] - running)
    return Job(
        id=_text(data, "id") or "",
        tenant=_text(data, "tenant") or "",
        task=_text(data, "task") or "",
        model=_text(data, "model"),
        options=json.loads(_text(data, "options") or "{}"),
        status=status,
        counts=Counts(running=running, queued=queued, **numbers),
        created_at=datetime.fromisoformat(_text(data, "created_at") or ""),
        started_at=_opt_time(_text(data, "started_at")),
        finished_at=_opt_time(_text(data, "finished_at")),
        output_uri=_text(data, "output_uri") or "",
        priority=int(_text(data, "priority") or 0),
        metadata=json.loads(_text(data, "metadata") or "{}"),
        error=_text(data, "error"),
    )


def _opt_time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None
