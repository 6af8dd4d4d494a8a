"""Copies a model folder from an S3 prefix into a local directory: the worker pod's init container runs it
before the worker starts, when the model source is S3.

Usage: python fetch_model.py s3://bucket/models/name/ /models/name
S3 endpoint, region and credentials come from the usual DOCFLASH_S3_* settings (or the pod's IAM role).
Files already present with the same size are kept, so a restarted pod on a persistent volume fetches only
what is missing; each file is written under a temporary name and renamed when complete.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path, PurePosixPath

from core.settings import load_settings
from core.storage import S3Storage, Storage


def local_path(target: Path, relative_key: str) -> Path:
    """Where the object `relative_key` lands under `target`; refuses keys that would escape it."""
    parts = PurePosixPath(relative_key).parts
    if not parts or ".." in parts:
        raise ValueError(f"object key {relative_key!r} does not name a file inside the model folder")
    return target.joinpath(*parts)


def fetch(storage: Storage, prefix_uri: str, target: Path) -> tuple[int, int]:
    """Download every object under `prefix_uri` into `target`; returns (files fetched, files already there).
    Raises FileNotFoundError if the prefix holds no objects."""
    fetched = kept = 0
    for info in storage.list(prefix_uri.rstrip("/") + "/"):
        path = local_path(target, info.relative_key)
        if path.is_file() and path.stat().st_size == info.size:
            kept += 1
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".part")
        with partial.open("wb") as out:
            for chunk in storage.stream(info.uri):
                out.write(chunk)
        partial.replace(path)
        fetched += 1
    if fetched + kept == 0:
        raise FileNotFoundError(f"no objects under {prefix_uri}")
    return fetched, kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Copy a model folder from S3 into a local directory.")
    parser.add_argument("source", help="s3://bucket/prefix/ of the model folder")
    parser.add_argument("target", type=Path, help="local directory to fill")
    args = parser.parse_args(argv)
    if not args.source.startswith("s3://"):
        parser.error(f"source must be an s3:// URI, not {args.source!r}")
    try:
        fetched, kept = fetch(S3Storage(load_settings()), args.source, args.target)
    except (FileNotFoundError, ValueError) as exc:
        print(f"fetch_model: {exc}", file=sys.stderr)
        return 1
    print(f"fetch_model: {fetched} files fetched, {kept} already present, into {args.target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
