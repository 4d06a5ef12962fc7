"""Where a run directory lives: a local path (an NFS mount is one) or a ``pyarrow.fs`` URI.

``resolve("s3://bucket/runs/r1")`` gives the filesystem and its path; the few operations the
store needs (whole-object reads, atomic writes, listings, removals) take that pair. Local paths
keep the old crash-safety: temp name, fsync, rename, fsync the directory. On an object store
(S3, GCS) an object appears whole when its upload completes, so a write is one upload of the
whole bytes: a writer killed mid-upload leaves no object and no temp name behind.

S3 options come from where pyarrow and the AWS SDK read them: the URI's query
(``s3://bucket/runs?endpoint_override=host:9000&scheme=http&region=eu-west-1``) and the standard
environment (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_REGION``/``AWS_DEFAULT_REGION``, ``AWS_PROFILE``, instance roles). Options in the URI
travel with the run directory to every Ray worker. Credentials belong in the environment (or an
instance role): ``s3://KEY:SECRET@bucket/...`` works too, and messages never show it, but the
URI is written into the run's config.yaml.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import hashlib
import json
import os
import posixpath
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

LOCAL = pafs.LocalFileSystem()


def is_uri(where: str | Path) -> bool:
    """``s3://...`` and the like; plain paths (relative or absolute) are not URIs."""
    return isinstance(where, str) and "://" in where.split("?", 1)[0]


def _split_query(where: str) -> tuple[str, str]:
    head, sep, query = where.partition("?")
    return head, sep + query


def join(where: str | Path, *parts: str) -> str | Path:
    """``where`` with path ``parts`` appended, a URI's query kept at the end.

    Example:
        >>> join("s3://b/runs?scheme=http", "r1", "stats.json")
        's3://b/runs/r1/stats.json?scheme=http'
    """
    if not is_uri(where):
        return Path(where).joinpath(*parts)
    head, query = _split_query(str(where))
    return "/".join([head.rstrip("/"), *parts]) + query


def split(where: str | Path) -> tuple[str | Path, str]:
    """``(parent, last part)`` of a path or URI (``--run-dir`` -> artifacts_dir and name).

    Example:
        >>> split("s3://b/runs/r1?scheme=http")
        ('s3://b/runs?scheme=http', 'r1')
    """
    if not is_uri(where):
        path = Path(where)
        return path.parent, path.name
    head, query = _split_query(str(where))
    parent, _, name = head.rstrip("/").rpartition("/")
    if not name or parent.endswith(":/"):
        raise ValueError(f"{where}: a run directory URI needs a bucket and a name "
                         "(s3://bucket/runs/NAME)")
    return parent + query, name


def display(where: str | Path) -> str:
    """``where`` for messages and logs: a URI without its query (endpoints and flags) and
    without credentials in it (``s3://KEY:SECRET@bucket/...``).

    Example:
        >>> display("s3://key:secret@b/runs/r1?scheme=http")
        's3://b/runs/r1'
    """
    if not is_uri(where):
        return str(where)
    scheme, rest = _split_query(str(where))[0].split("://", 1)
    netloc, sep, path = rest.partition("/")
    return f"{scheme}://{netloc.rpartition('@')[2]}{sep}{path}"


def resolve(where: str | Path) -> tuple[pafs.FileSystem, str]:
    """The filesystem and path of a local path or URI (``s3://``, ``gs://``, ``file://``).

    Raises:
        ValueError: a URI pyarrow cannot open (unknown scheme, bad query option).
    """
    if not is_uri(where):
        return LOCAL, os.path.abspath(os.path.expanduser(str(where)))
    try:
        fs, path = _from_uri(str(where))
    except (ValueError, OSError) as exc:  # pyarrow.ArrowInvalid is a ValueError
        raise ValueError(f"{display(where)}: {exc}") from None
    return fs, path.rstrip("/")


@functools.lru_cache(maxsize=64)
def _from_uri(uri: str) -> tuple[pafs.FileSystem, str]:
    """Cached per process: an S3 client is costly to build (credential chain, region lookup)
    and thread-safe, and every shard of a run resolves the same run directory."""
    if uri.startswith("s3://") and "allow_delayed_open" not in uri:
        # Objects smaller than a multipart part go up as one PutObject on close (one request
        # instead of three). Multipart uploads are atomic too; this only saves round trips.
        uri += ("&" if "?" in uri else "?") + "allow_delayed_open=true"
    return pafs.FileSystem.from_uri(uri)


def is_local(fs: pafs.FileSystem) -> bool:
    return isinstance(fs, pafs.LocalFileSystem)


def read_bytes(fs: pafs.FileSystem, path: str) -> bytes | None:
    """A file's bytes, or None when there is no such file."""
    try:
        # compression=None: a name ending in .gz is stored bytes, not a stream to inflate
        with fs.open_input_stream(path, compression=None) as f:
            return f.readall()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


def json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode()


def read_json(fs: pafs.FileSystem, path: str) -> Any | None:
    """A JSON file's value; None when missing or not valid JSON (a torn foreign write)."""
    data = read_bytes(fs, path)
    try:
        return None if data is None else json.loads(data)
    except ValueError:
        return None


def sha256(fs: pafs.FileSystem, path: str) -> str:
    h = hashlib.sha256()
    with fs.open_input_stream(path, compression=None) as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def write_bytes(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    """Write ``data`` so that readers see no file, the old one or the whole new one."""
    if is_local(fs):
        _local_atomic_write(Path(path), data)
        return
    # one write of the whole buffer, then the upload on close: a Python exception cannot land
    # between two writes and commit half an object
    with fs.open_output_stream(path) as f:
        f.write(data)


@contextlib.contextmanager
def write_via_local_file(fs: pafs.FileSystem, path: str) -> Iterator[str]:
    """Yields a local file name to write (a ``ParquetWriter`` that streams); on success it
    becomes ``path``: renamed into place locally, uploaded whole to an object store."""
    local = is_local(fs)
    directory = os.path.dirname(path) if local else None
    if local:
        os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.",
                               suffix=".tmp")
    os.close(fd)
    try:
        yield tmp
        if local:
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(tmp, path)
            _fsync_dir(Path(directory))
        else:
            pafs.copy_files(tmp, path, source_filesystem=LOCAL, destination_filesystem=fs)
    finally:
        Path(tmp).unlink(missing_ok=True)


def _local_atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        if exc.filename is None:  # write() errors (ENOSPC, EIO) do not say which file
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def list_files(fs: pafs.FileSystem, directory: str) -> list[pafs.FileInfo]:
    """The entries directly in ``directory`` (none when it does not exist), sorted by name."""
    infos = fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
    return sorted(infos, key=lambda info: info.base_name)


def is_file(fs: pafs.FileSystem, path: str) -> bool:
    return fs.get_file_info(path).type == pafs.FileType.File


def exists(fs: pafs.FileSystem, path: str) -> bool:
    return fs.get_file_info(path).type != pafs.FileType.NotFound


def delete_file(fs: pafs.FileSystem, path: str) -> None:
    """Remove a file; one already gone (another writer's cleanup) is fine."""
    with contextlib.suppress(FileNotFoundError):
        fs.delete_file(path)


def delete_dir(fs: pafs.FileSystem, path: str) -> None:
    """Remove a directory (an object store: every object under the prefix) if it exists."""
    if exists(fs, path):
        fs.delete_dir(path)


def make_dir(fs: pafs.FileSystem, path: str) -> None:
    """Create a local directory; object stores have none to create (a prefix exists once an
    object is under it), and S3 marker objects would only slow listings."""
    if is_local(fs):
        os.makedirs(path, exist_ok=True)


class Dir:
    """One directory of the run on its filesystem: names joined in, shown as a URI."""

    def __init__(self, fs: Any, path: str, shown: str):
        self.fs, self.path, self.shown = fs, path, shown

    def file(self, name: str) -> str:
        return posixpath.join(self.path, name) if not is_local(self.fs) else str(
            Path(self.path) / name)

    def show(self, fs_path: str) -> str:
        """A path of this filesystem as the user wrote its root (``s3://...`` or local)."""
        rel = posixpath.relpath(fs_path, self.path) if not is_local(self.fs) else str(
            Path(fs_path).relative_to(self.path))
        return self.shown if rel == "." else f"{self.shown.rstrip('/')}/{rel}"

    def read_json(self, fs_path: str) -> Any | None:
        return read_json(self.fs, fs_path)

    def write_json(self, fs_path: str, obj: Any) -> None:
        write_bytes(self.fs, fs_path, json_bytes(obj))

    def names(self, pattern: str, sub: str | None = None) -> list[str]:
        """Sorted names matching ``pattern`` directly in this directory (or its ``sub``)."""
        where = self.file(sub) if sub else self.path
        return [i.base_name for i in list_files(self.fs, where)
                if fnmatch.fnmatchcase(i.base_name, pattern)]
