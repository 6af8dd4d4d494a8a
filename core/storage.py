"""Object storage behind one interface: S3 (AWS, MinIO, SeaweedFS, R2) and the local filesystem (local mode).

Objects are named by URI: `s3://bucket/key` for S3Storage, `file:///abs/path` for LocalStorage.
"""
from __future__ import annotations

import os
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from core.settings import Settings

CHUNK_BYTES = 1024 * 1024


class ObjectNotFound(FileNotFoundError):
    """The named object (or its bucket) does not exist."""


class AccessDenied(PermissionError):
    """The service's credentials may not read the named object or bucket."""


@dataclass(frozen=True)
class ObjectInfo:
    """One listed object: its URI, key relative to the listed prefix, size and entity tag."""

    uri: str
    relative_key: str
    size: int
    etag: str


def join_uri(base: str, *parts: str) -> str:
    """`base` and `parts` joined with single slashes."""
    return "/".join([base.rstrip("/"), *(part.strip("/") for part in parts)])


def split_s3_uri(uri: str) -> tuple[str, str]:
    """(bucket, key) of an `s3://bucket/key` URI; raises ValueError naming the URI otherwise."""
    if not uri.startswith("s3://"):
        raise ValueError(f"not an s3:// URI: {uri!r}")
    bucket, _, key = uri[len("s3://"):].partition("/")
    if not bucket:
        raise ValueError(f"no bucket in URI {uri!r}")
    return bucket, key


class Storage(ABC):
    """Reads and writes whole objects by URI."""

    @abstractmethod
    def put(self, uri: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        """Write `data` to `uri`, replacing what is there."""

    def put_many(self, objects: dict[str, bytes], content_type: str = "application/octet-stream") -> None:
        """Write each of `objects` (URI -> bytes), several at a time."""
        if len(objects) <= 1:
            for uri, data in objects.items():
                self.put(uri, data, content_type)
            return
        with ThreadPoolExecutor(max_workers=min(16, len(objects))) as pool:
            list(pool.map(lambda item: self.put(item[0], item[1], content_type), objects.items()))

    @abstractmethod
    def get(self, uri: str) -> bytes:
        """The bytes at `uri`; raises ObjectNotFound if there are none."""

    @abstractmethod
    def exists(self, uri: str) -> bool:
        """Whether an object is stored at `uri`."""

    @abstractmethod
    def list(self, prefix_uri: str) -> Iterator[ObjectInfo]:
        """Objects under `prefix_uri` (recursively), in key order."""

    @abstractmethod
    def stream(self, uri: str) -> Iterator[bytes]:
        """The object at `uri` in chunks; raises ObjectNotFound before the first chunk if it is missing."""

    @abstractmethod
    def presigned_url(self, uri: str, expires_s: int) -> str | None:
        """A time-limited URL to download `uri`, or None where the backend has none."""

    @abstractmethod
    def check_bucket(self, uri: str) -> None:
        """Raise ObjectNotFound or AccessDenied if objects under `uri` cannot be stored (S3: its bucket)."""


def _client_error(exc: ClientError, uri: str) -> Exception:
    """The storage error for an S3 client error about `uri`: ObjectNotFound, AccessDenied, or `exc` itself."""
    code = exc.response.get("Error", {}).get("Code", "")
    if code in ("404", "NoSuchKey", "NotFound", "NoSuchBucket"):
        return ObjectNotFound(uri)
    if code in ("403", "AccessDenied", "AllAccessDisabled", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
        return AccessDenied(f"access denied to {uri} ({code})")
    return exc


class S3Storage(Storage):
    """S3 or an S3-compatible server, configured from settings (endpoint, region, credentials)."""

    def __init__(self, settings: Settings):
        secret = settings.s3_secret_access_key
        key_id = settings.s3_access_key_id
        self._client = boto3.client(
            "s3",
            endpoint_url=settings.s3_endpoint_url,
            region_name=settings.s3_region,
            aws_access_key_id=key_id.get_secret_value() if key_id else None,
            aws_secret_access_key=secret.get_secret_value() if secret else None,
            config=Config(
                signature_version="s3v4",
                s3={"addressing_style": "path" if settings.s3_endpoint_url else "auto"},
                retries={"max_attempts": 5, "mode": "standard"},
                max_pool_connections=32,
            ),
        )

    def put(self, uri: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        bucket, key = split_s3_uri(uri)
        self._client.put_object(Bucket=bucket, Key=key, Body=data, ContentType=content_type)

    def get(self, uri: str) -> bytes:
        bucket, key = split_s3_uri(uri)
        try:
            return self._client.get_object(Bucket=bucket, Key=key)["Body"].read()
        except ClientError as exc:
            raise _client_error(exc, uri) from None

    def exists(self, uri: str) -> bool:
        bucket, key = split_s3_uri(uri)
        try:
            self._client.head_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            if isinstance(_client_error(exc, uri), ObjectNotFound):
                return False
            raise
        return True

    def list(self, prefix_uri: str) -> Iterator[ObjectInfo]:
        bucket, prefix = split_s3_uri(prefix_uri)
        pages = self._client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        try:
            for page in pages:
                yield from self._listed(bucket, prefix, page)
        except ClientError as exc:
            raise _client_error(exc, prefix_uri) from None

    @staticmethod
    def _listed(bucket: str, prefix: str, page: dict) -> Iterator[ObjectInfo]:
        for item in page.get("Contents", []):
            key = item["Key"]
            if key.endswith("/"):
                continue
            yield ObjectInfo(
                uri=f"s3://{bucket}/{key}",
                relative_key=key[len(prefix):].lstrip("/"),
                size=item["Size"],
                etag=item.get("ETag", "").strip('"'),
            )

    def stream(self, uri: str) -> Iterator[bytes]:
        bucket, key = split_s3_uri(uri)
        try:
            body = self._client.get_object(Bucket=bucket, Key=key)["Body"]
        except ClientError as exc:
            raise _client_error(exc, uri) from None
        return body.iter_chunks(CHUNK_BYTES)

    def presigned_url(self, uri: str, expires_s: int) -> str | None:
        bucket, key = split_s3_uri(uri)
        return self._client.generate_presigned_url(
            "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=expires_s
        )

    def check_bucket(self, uri: str) -> None:
        bucket, _ = split_s3_uri(uri)
        try:
            self._client.head_bucket(Bucket=bucket)
        except ClientError as exc:
            raise _client_error(exc, f"s3://{bucket}") from None


def file_uri(path: Path) -> str:
    """The URI LocalStorage uses for `path`: `file://` + the absolute path, not percent-encoded (so document
    names that are percent-encoded stay literal)."""
    return "file://" + str(path.resolve())


class LocalStorage(Storage):
    """Files on the local filesystem, named by `file://` + absolute path (see `file_uri`); writes are atomic
    (temp file + rename)."""

    @staticmethod
    def _path(uri: str) -> Path:
        if not uri.startswith("file:///"):
            raise ValueError(f"not a file:// URI of an absolute path: {uri!r}")
        return Path(uri[len("file://"):])

    def put(self, uri: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        path = self._path(uri)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)

    def get(self, uri: str) -> bytes:
        try:
            return self._path(uri).read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            raise ObjectNotFound(uri) from None

    def exists(self, uri: str) -> bool:
        return self._path(uri).is_file()

    def list(self, prefix_uri: str) -> Iterator[ObjectInfo]:
        root = self._path(prefix_uri)
        if not root.is_dir():
            return
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            stat = path.stat()
            yield ObjectInfo(
                uri=file_uri(path),
                relative_key=path.relative_to(root).as_posix(),
                size=stat.st_size,
                etag=f"{stat.st_mtime_ns:x}-{stat.st_size:x}",
            )

    def stream(self, uri: str) -> Iterator[bytes]:
        path = self._path(uri)
        if not path.is_file():
            raise ObjectNotFound(uri)
        return self._chunks(path)

    @staticmethod
    def _chunks(path: Path) -> Iterator[bytes]:
        with path.open("rb") as handle:
            while chunk := handle.read(CHUNK_BYTES):
                yield chunk

    def presigned_url(self, uri: str, expires_s: int) -> str | None:
        return None

    def check_bucket(self, uri: str) -> None:
        path = self._path(uri)
        existing = next(p for p in (path, *path.parents) if p.exists())
        if not existing.is_dir():
            raise ObjectNotFound(f"{uri}: {existing} is not a directory")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise AccessDenied(f"access denied to {uri}: {existing} is not writable")
