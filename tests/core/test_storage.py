"""Storage: the S3 backend against a real S3 server and the local backend, through one interface."""
from __future__ import annotations

import uuid

import httpx
import pytest

from core.storage import LocalStorage, ObjectNotFound, S3Storage, Storage, file_uri, join_uri, split_s3_uri


@pytest.fixture(params=["s3", "local"])
def backend(request, tmp_path) -> tuple[Storage, str]:
    """(storage, a fresh base URI) for each backend."""
    if request.param == "s3":
        settings, bucket = request.getfixturevalue("service_settings"), request.getfixturevalue("test_bucket")
        return S3Storage(settings), f"s3://{bucket}/storage-test/{uuid.uuid4().hex}"
    return LocalStorage(), file_uri(tmp_path / "store")


def test_put_get_exists_and_stream_round_trip(backend: tuple[Storage, str]) -> None:
    storage, base = backend
    data = "Ünïcode text, ½ of it.\n".encode() * 50_000
    uri = join_uri(base, "docs", "a%2Fb.json")
    assert not storage.exists(uri)
    storage.put(uri, data)
    assert storage.exists(uri)
    assert storage.get(uri) == data
    chunks = list(storage.stream(uri))
    assert b"".join(chunks) == data and len(chunks) >= 1


def test_list_is_recursive_sorted_and_relative(backend: tuple[Storage, str]) -> None:
    storage, base = backend
    storage.put_many({join_uri(base, name): name.encode() for name in ("b.txt", "a/c.md", "a/b.pdf", "z.jsonl")})
    listed = list(storage.list(base))
    assert [info.relative_key for info in listed] == ["a/b.pdf", "a/c.md", "b.txt", "z.jsonl"]
    assert [info.size for info in listed] == [len("a/b.pdf"), len("a/c.md"), len("b.txt"), len("z.jsonl")]
    assert all(info.etag for info in listed)
    assert storage.get(listed[1].uri) == b"a/c.md"


def test_missing_objects_raise_object_not_found(backend: tuple[Storage, str]) -> None:
    storage, base = backend
    with pytest.raises(ObjectNotFound):
        storage.get(join_uri(base, "nope.json"))
    with pytest.raises(ObjectNotFound):
        storage.stream(join_uri(base, "nope.json"))
    assert list(storage.list(join_uri(base, "empty"))) == []


def test_check_bucket_passes_where_objects_can_be_stored(backend: tuple[Storage, str]) -> None:
    storage, base = backend
    storage.check_bucket(join_uri(base, "new", "folder"))


def test_check_bucket_refuses_a_missing_bucket_or_a_file_in_the_way(service_settings, tmp_path) -> None:
    with pytest.raises(ObjectNotFound):
        S3Storage(service_settings).check_bucket(f"s3://no-such-bucket-{uuid.uuid4().hex[:12]}/jobs")
    (tmp_path / "plain-file").write_text("x")
    with pytest.raises(ObjectNotFound, match="not a directory"):
        LocalStorage().check_bucket(file_uri(tmp_path / "plain-file" / "jobs"))


def test_presigned_urls_download_from_s3(service_settings, test_bucket: str) -> None:
    storage = S3Storage(service_settings)
    uri = f"s3://{test_bucket}/storage-test/{uuid.uuid4().hex}/results.jsonl"
    storage.put(uri, b'{"id": "a"}\n')
    url = storage.presigned_url(uri, 60)
    assert "X-Amz-Signature" in url
    assert httpx.get(url).content == b'{"id": "a"}\n'
    assert LocalStorage().presigned_url("file:///tmp/x", 60) is None


@pytest.mark.parametrize("uri", ["http://bucket/key", "s3://", "/abs/path"], ids=["http", "no-bucket", "path"])
def test_split_s3_uri_refuses_other_uris(uri: str) -> None:
    with pytest.raises(ValueError, match="URI"):
        split_s3_uri(uri)


def test_local_storage_refuses_relative_uris() -> None:
    with pytest.raises(ValueError, match="file://"):
        LocalStorage().get("file://relative/path")
