"""The `docflash` command line. Each subcommand imports what it needs when it runs, so `docflash api` never
loads torch."""
from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

if TYPE_CHECKING:
    import httpx

    from core.settings import Settings

app = typer.Typer(help="docflash: batch processing of long documents on GPUs.", no_args_is_help=True)

ApiUrl = Annotated[str, typer.Option(envvar="DOCFLASH_API_URL", help="base URL of the docflash API")]
ApiKey = Annotated[str, typer.Option(envvar="DOCFLASH_API_KEY", help="API key (bearer token)")]
DEFAULT_API_URL = "http://127.0.0.1:8000"


def _settings(configure_logs: bool = True) -> Settings:
    from core.logging import configure_logging
    from core.settings import SettingsError, get_settings

    try:
        settings = get_settings()
    except SettingsError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    if configure_logs:
        configure_logging(settings)
    return settings


def _json_option(value: str, name: str) -> dict[str, Any]:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"not valid JSON: {exc}", param_hint=name) from None
    if not isinstance(parsed, dict):
        raise typer.BadParameter("must be a JSON object", param_hint=name)
    return parsed


@app.command()
def api(
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8000,
    workers: Annotated[int, typer.Option(help="uvicorn worker processes")] = 1,
) -> None:
    """Serve the REST API (uvicorn, `api.main:app`)."""
    import uvicorn

    settings = _settings()
    uvicorn.run(
        "api.main:app", host=host, port=port, workers=workers, log_config=None, log_level=settings.log_level.lower()
    )


@app.command()
def worker(
    gpu: Annotated[
        Optional[int], typer.Option(help="GPU index: sets CUDA_VISIBLE_DEVICES and the node name gpuN@host")
    ] = None,
    node_name: Annotated[Optional[str], typer.Option(help="Celery node name (default gpuN@%h, or cpu@%h)")] = None,
) -> None:
    """Run a Celery worker on the GPU queue: one process per GPU, concurrency 1, task events on."""
    if gpu is not None:
        if gpu < 0:
            raise typer.BadParameter("must be 0 or more", param_hint="--gpu")
        os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    settings = _settings()
    from worker.celery_app import app as celery_app

    name = node_name or (f"gpu{gpu}@%h" if gpu is not None else "cpu@%h")
    celery_app.worker_main(
        [
            "worker",
            f"--queues={settings.gpu_queue}",
            "--concurrency=1",
            "--pool=prefork",
            "--task-events",
            f"--hostname={name}",
            f"--loglevel={settings.log_level}",
            "--without-gossip",
            "--without-mingle",
        ]
    )


@app.command("ping-worker")
def ping_worker(
    gpu: Annotated[Optional[list[int]], typer.Option(help="ping only gpuN@<this host> (repeatable)")] = None,
    timeout: Annotated[float, typer.Option(help="seconds to wait for an answer")] = 5.0,
) -> None:
    """Exit 0 if a Celery worker of this host answers an inspect ping (the worker liveness probe), else 1."""
    from celery.utils.nodenames import host_format

    from core.broker import TaskSender

    settings = _settings(configure_logs=False)
    control = TaskSender(settings).app.control
    if gpu:
        replies = control.ping(destination=[host_format(f"gpu{n}@%h") for n in gpu], timeout=timeout)
    else:
        host = socket.gethostname()
        replies = [r for r in control.ping(timeout=timeout) if any(n.endswith(f"@{host}") for n in r)]
    answered = sorted(name for reply in replies for name, answer in reply.items() if answer.get("ok") == "pong")
    if not answered:
        typer.echo("no worker of this host answered", err=True)
        raise typer.Exit(1)
    typer.echo(" ".join(answered))


@app.command()
def flower(
    port: Annotated[int, typer.Option(help="port of the Flower UI")] = 5555,
    address: Annotated[str, typer.Option(help="address to listen on")] = "0.0.0.0",
    persistent: Annotated[bool, typer.Option(help="keep task history in --db across restarts")] = False,
    db: Annotated[str, typer.Option(help="Flower's state file with --persistent")] = "flower.db",
) -> None:
    """Run Flower on the broker (basic auth from FLOWER_BASIC_AUTH, as Flower reads it)."""
    from core.broker import TaskSender

    settings = _settings()
    argv = ["flower", f"--port={port}", f"--address={address}"]
    if persistent:
        argv += ["--persistent=True", f"--db={db}"]
    TaskSender(settings).app.start(argv)


@app.command()
def watch(once: Annotated[bool, typer.Option(help="poll once and exit")] = False) -> None:
    """Poll the S3 drop prefix (DOCFLASH_WATCH_URI) and submit a job per new document or .jsonl batch."""
    from core.service import JobService
    from worker.watch import DropWatcher

    settings = _settings()
    try:
        watcher = DropWatcher(settings, JobService.from_settings(settings))
    except ValueError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    if once:
        for job_id in watcher.poll():
            typer.echo(job_id)
        return
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    watcher.run(stop)


@app.command("new-key")
def new_key(tenant: Annotated[str, typer.Argument(help="tenant the key belongs to")]) -> None:
    """Make an API key for TENANT: prints the key (give it to the client) and the `tenant:sha256` entry to
    append to DOCFLASH_API_KEYS (the service stores only the hash)."""
    import secrets

    from api.auth import hash_api_key
    from core.service import check_tenant

    try:
        check_tenant(tenant)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="TENANT") from None
    key = secrets.token_urlsafe(32)
    typer.echo(f"key: {key}")
    typer.echo(f"DOCFLASH_API_KEYS entry: {tenant}:{hash_api_key(key)}")


def _client(api_url: str, api_key: str) -> httpx.Client:
    import httpx

    return httpx.Client(base_url=api_url, headers={"Authorization": f"Bearer {api_key}"}, timeout=60)


def _check(response: httpx.Response) -> httpx.Response:
    if response.is_error:
        typer.echo(f"HTTP {response.status_code}: {response.read().decode(errors='replace')}", err=True)
        raise typer.Exit(1)
    return response


def _read_documents(paths: list[Path], max_bytes: int) -> list[dict[str, str]]:
    from core.documents import JSONL_SUFFIX, DocumentError, extract_text, parse_jsonl
    from core.inputs import is_document_name

    files = sorted(f for p in paths for f in ([p] if p.is_file() else p.rglob("*")) if f.is_file())
    documents = []
    for file in (f for f in files if is_document_name(f.name)):
        try:
            if file.suffix.lower() == JSONL_SUFFIX:
                for entry in parse_jsonl(file.read_bytes(), max_bytes):
                    if isinstance(entry, DocumentError):
                        raise DocumentError(f"{file}: {entry}")
                    documents.append({"id": entry[0], "text": entry[1]})
            else:
                documents.append({"id": file.name, "text": extract_text(file.name, file.read_bytes(), max_bytes)})
        except DocumentError as exc:
            raise typer.BadParameter(str(exc), param_hint="PATHS") from None
    if not documents:
        raise typer.BadParameter("no documents found", param_hint="PATHS")
    return documents


def _wait_final(client: httpx.Client, job_id: str, interval: float = 1.0) -> dict[str, Any]:
    from core.jobs import FINAL_STATUSES

    while True:
        job = _check(client.get(f"/v1/jobs/{job_id}")).json()
        if job["status"] in FINAL_STATUSES:
            return job
        time.sleep(interval)


@app.command()
def submit(
    paths: Annotated[Optional[list[Path]], typer.Argument(help="document files or folders (text sent inline)")] = None,
    task: Annotated[str, typer.Option(help="task name, e.g. summarize")] = ...,
    options: Annotated[str, typer.Option(help="task options as a JSON object")] = "{}",
    input_uri: Annotated[Optional[str], typer.Option(help="s3:// prefix or JSONL object instead of PATHS")] = None,
    idempotency_key: Annotated[
        Optional[str], typer.Option(help="resubmitting with the same key returns the same job")
    ] = None,
    priority: Annotated[int, typer.Option(help="0 (first, default) .. 9 (last)")] = 0,
    wait: Annotated[bool, typer.Option(help="wait until the job ends")] = False,
    api_url: ApiUrl = DEFAULT_API_URL,
    api_key: ApiKey = "",
) -> None:
    """Submit a job to the REST API and print it as JSON."""
    if bool(paths) == bool(input_uri):
        raise typer.BadParameter("give document PATHS or --input-uri (one of them)")
    body: dict[str, Any] = {"task": task, "options": _json_option(options, "--options"), "priority": priority}
    if input_uri:
        body["input_uri"] = input_uri
    else:
        body["documents"] = _read_documents(paths or [], _settings(configure_logs=False).max_document_bytes)
    if idempotency_key:
        body["idempotency_key"] = idempotency_key
    with _client(api_url, api_key) as client:
        job = _check(client.post("/v1/jobs", json=body)).json()
        if wait:
            job = _wait_final(client, job["id"])
    typer.echo(json.dumps(job, indent=2))


@app.command()
def status(
    job_id: Annotated[str, typer.Argument(help="job id")],
    wait: Annotated[bool, typer.Option(help="wait until the job ends")] = False,
    api_url: ApiUrl = DEFAULT_API_URL,
    api_key: ApiKey = "",
) -> None:
    """Print a job's status and counts as JSON."""
    with _client(api_url, api_key) as client:
        job = _wait_final(client, job_id) if wait else _check(client.get(f"/v1/jobs/{job_id}")).json()
    typer.echo(json.dumps(job, indent=2))


@app.command()
def results(
    job_id: Annotated[str, typer.Argument(help="job id")],
    errors: Annotated[bool, typer.Option("--errors", help="fetch errors.jsonl instead of results.jsonl")] = False,
    out: Annotated[Optional[Path], typer.Option(help="write to this file instead of stdout")] = None,
    api_url: ApiUrl = DEFAULT_API_URL,
    api_key: ApiKey = "",
) -> None:
    """Download a finished job's results.jsonl (or errors.jsonl)."""
    name = "errors" if errors else "results"
    with _client(api_url, api_key) as client, client.stream("GET", f"/v1/jobs/{job_id}/{name}") as response:
        _check(response)
        sink = out.open("wb") if out else sys.stdout.buffer
        try:
            for chunk in response.iter_bytes():
                sink.write(chunk)
        finally:
            if out:
                sink.close()
            else:
                sink.flush()


@app.command()
def run(
    input_dir: Annotated[Path, typer.Argument(help="folder of documents (.txt .md .html .pdf .docx .jsonl)")],
    task: Annotated[str, typer.Option(help="task name, e.g. summarize")] = ...,
    out: Annotated[Path, typer.Option(help="output folder for results.jsonl, errors.jsonl, manifest.json")] = ...,
    options: Annotated[str, typer.Option(help="task options as a JSON object")] = "{}",
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
) -> None:
    """Local mode: run a task over a folder in this process (no Redis, no S3) and write the job's files."""
    parsed = _json_option(options, "--options")
    settings = _settings()
    from pydantic import ValidationError

    from core.task_specs import UnknownTaskError, options_error, validate_options

    try:
        validate_options(task, parsed)
    except UnknownTaskError as exc:
        raise typer.BadParameter(str(exc), param_hint="--task") from None
    except ValidationError as exc:
        field, message = options_error(exc)
        raise typer.BadParameter(f"{field}: {message}", param_hint="--options") from None
    from worker.local import run_local

    try:
        manifest = run_local(input_dir, task, out, parsed, settings, progress=progress)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    counts = manifest["counts"]
    typer.echo(
        f"{manifest['status']}: {counts['succeeded']} succeeded, {counts['failed']} failed "
        f"in {manifest['timings']['wall_s']:.1f} s -> {out}/results.jsonl, errors.jsonl, manifest.json"
    )
    if manifest["status"] == "failed":
        raise typer.Exit(1)
