"""docker/fetch_model.py (the worker's init container) against a real S3 server."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from core.settings import Settings
from core.storage import S3Storage

REPO = Path(__file__).resolve().parents[2]
BUCKET = "docflash-test"


@pytest.fixture
def model_prefix(s3) -> tuple[str, dict[str, bytes]]:
    """A model folder uploaded under a fresh prefix: (s3 URI of the folder, {relative path: bytes})."""
    prefix = f"models/{uuid.uuid4().hex[:8]}/tiny-model"
    files = {
        "config.json": b'{"model_type": "bert", "hidden_size": 32}',
        "tokenizer.json": os.urandom(2048),
        "model.safetensors": os.urandom(3 * 1024 * 1024 + 17),
        "nested/extra.txt": b"line\n" * 100,
    }
    for name, data in files.items():
        s3.put_object(Bucket=BUCKET, Key=f"{prefix}/{name}", Body=data)
    return f"s3://{BUCKET}/{prefix}/", files


@pytest.fixture
def storage(s3_endpoint) -> S3Storage:
    return S3Storage(Settings(_env_file=None, s3_endpoint_url=s3_endpoint, s3_access_key_id="test",
                              s3_secret_access_key="test", env="test"))


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_fetches_the_folder_then_keeps_what_is_there(docker_script, storage, model_prefix, tmp_path):
    fetch_model = docker_script("fetch_model")
    uri, files = model_prefix
    target = tmp_path / "model"
    assert fetch_model.fetch(storage, uri, target) == (len(files), 0)
    for name, data in files.items():
        assert digest((target / name).read_bytes()) == digest(data), name
    assert not list(target.rglob("*.part"))

    (target / "config.json").unlink()
    (target / "tokenizer.json").write_bytes(b"truncated")
    assert fetch_model.fetch(storage, uri, target) == (2, len(files) - 2)
    assert (target / "tokenizer.json").read_bytes() == files["tokenizer.json"]


def test_empty_prefix_is_an_error(docker_script, storage, tmp_path):
    with pytest.raises(FileNotFoundError, match="no objects under"):
        docker_script("fetch_model").fetch(storage, f"s3://{BUCKET}/models/{uuid.uuid4().hex}/", tmp_path)


@pytest.mark.parametrize("key", ["../escape.bin", "a/../../escape.bin", ""], ids=["parent", "nested-parent", "empty"])
def test_keys_outside_the_folder_are_refused(docker_script, tmp_path, key):
    with pytest.raises(ValueError, match="does not name a file inside the model folder"):
        docker_script("fetch_model").local_path(tmp_path, key)


def test_command_line_exit_codes(s3_endpoint, model_prefix, tmp_path):
    uri, files = model_prefix
    env = {**os.environ, "DOCFLASH_ENV": "test", "DOCFLASH_S3_ENDPOINT_URL": s3_endpoint,
           "DOCFLASH_S3_ACCESS_KEY_ID": "test", "DOCFLASH_S3_SECRET_ACCESS_KEY": "test"}
    script = str(REPO / "docker" / "fetch_model.py")

    done = subprocess.run([sys.executable, script, uri, str(tmp_path / "m")], env=env, capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"{len(files)} files fetched, 0 already present" in done.stdout

    missing = subprocess.run([sys.executable, script, f"s3://{BUCKET}/nothing-here/", str(tmp_path / "n")], env=env,
                             capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert missing.returncode == 1 and "no objects under" in missing.stderr

    not_s3 = subprocess.run([sys.executable, script, "/local/path", str(tmp_path / "o")], env=env,
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert not_s3.returncode == 2 and "must be an s3:// URI" in not_s3.stderr
