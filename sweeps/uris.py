"""Storage locations as URIs: a local path or any pyarrow filesystem URI (``s3://``, ``gs://``, ``hdfs://``...).

Ray results, checkpoints and experiment folders are named by a string that is never passed through
``pathlib`` (``Path("s3://b/x")`` is ``s3:/b/x``). Reads and writes go through ``pyarrow.fs``, which takes S3
endpoints and credentials from the usual ``AWS_*`` variables (``AWS_ENDPOINT_URL`` for an S3-compatible
server). Local paths stay plain paths, made absolute.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# pyarrow filesystem type names -> the URI scheme that names them
SCHEMES = {"s3": "s3", "gcs": "gs", "hdfs": "hdfs", "abfs": "abfs"}


def is_remote(location: str) -> bool:
    """True for an object-store (or other non-local) URI; False for a path or ``file://``."""
    return "://" in location and not location.startswith("file://")


def normalize(location: str) -> str:
    """A local path made absolute (``file://`` stripped); a remote URI unchanged but for a trailing ``/``."""
    if is_remote(location):
        return location.rstrip("/")
    return os.path.abspath(os.path.expanduser(location.removeprefix("file://")))


def join(base: str, *parts: str) -> str:
    """``base`` + ``/part/...``, keeping a URI's scheme (``join("s3://b/x", "y") == "s3://b/x/y"``)."""
    if is_remote(base):
        return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts)])
    return os.path.join(base.removeprefix("file://"), *parts)


def basename(location: str) -> str:
    return posixpath.basename(location.rstrip("/")) if is_remote(location) else os.path.basename(location)


def filesystem(location: str) -> tuple[Any, str]:
    """``(pyarrow FileSystem, path on it)`` for a location."""
    import pyarrow.fs as pafs

    if is_remote(location):
        fs, path = pafs.FileSystem.from_uri(location)
        return fs, path
    return pafs.LocalFileSystem(), normalize(location)


def to_uri(path: str, fs: Any | None) -> str:
    """Rebuild a location from a pyarrow ``(filesystem, path)`` pair, e.g. a Ray ``Checkpoint``'s."""
    kind = getattr(fs, "type_name", "local") if fs is not None else "local"
    if kind == "local" or "://" in path:
        return path
    scheme = SCHEMES.get(kind, kind)
    return f"{scheme}://{path.lstrip('/')}"


def _info(location: str) -> Any:
    fs, path = filesystem(location)
    return fs.get_file_info(path)


def mtime(location: str) -> float | None:
    """When ``location`` was last written (seconds since the epoch), None where the filesystem does not say."""
    try:
        when = _info(location).mtime
    except (FileNotFoundError, OSError):
        return None
    return when.timestamp() if when is not None else None


def exists(location: str) -> bool:
    import pyarrow.fs as pafs

    return bool(_info(location).type != pafs.FileType.NotFound)


def is_dir(location: str) -> bool:
    import pyarrow.fs as pafs

    return bool(_info(location).type == pafs.FileType.Directory)


def is_file(location: str) -> bool:
    import pyarrow.fs as pafs

    return bool(_info(location).type == pafs.FileType.File)


def size(location: str) -> int:
    return int(_info(location).size or 0)


def size_and_mtime(location: str) -> tuple[int, float | None]:
    """:func:`size` and :func:`mtime` of ``location`` from one look at it (one request on an object store)."""
    info = _info(location)
    return int(info.size or 0), info.mtime.timestamp() if info.mtime is not None else None


def listdir(location: str) -> list[str]:
    """Names (not paths) directly inside a folder; empty when it does not exist."""
    import pyarrow.fs as pafs

    fs, path = filesystem(location)
    try:
        infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(posixpath.basename(i.path.rstrip("/")) for i in infos)


def read_bytes(location: str) -> bytes:
    fs, path = filesystem(location)
    with fs.open_input_stream(path) as f:
        data: bytes = f.read()
    return data


def read_text(location: str, errors: str = "strict") -> str:
    return read_bytes(location).decode("utf-8", errors=errors)


def write_bytes(location: str, data: bytes) -> None:
    fs, path = filesystem(location)
    parent = posixpath.dirname(path)
    if parent:
        fs.create_dir(parent, recursive=True)
    with fs.open_output_stream(path) as f:
        f.write(data)


def makedirs(location: str) -> None:
    fs, path = filesystem(location)
    fs.create_dir(path, recursive=True)


def delete_file(location: str) -> None:
    fs, path = filesystem(location)
    fs.delete_file(path)


def delete_dir(location: str) -> None:
    """Remove a folder and everything in it; nothing happens when it is already gone."""
    if not exists(location):
        return
    fs, path = filesystem(location)
    fs.delete_dir(path)


def download(location: str, local_dir: str) -> str:
    """Copy a (remote) folder into ``local_dir``; returns ``local_dir``."""
    import pyarrow.fs as pafs

    fs, path = filesystem(location)
    os.makedirs(local_dir, exist_ok=True)
    pafs.copy_files(path, local_dir, source_filesystem=fs, destination_filesystem=pafs.LocalFileSystem())
    return local_dir


@contextmanager
def local_copy(location: str) -> Iterator[str]:
    """A local folder holding ``location``'s files: the folder itself when local, else a temporary download."""
    if not is_remote(location):
        yield normalize(location)
        return
    tmp = tempfile.mkdtemp(prefix="sweeps-dl-")
    try:
        yield download(location, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
