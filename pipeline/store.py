"""Crash-safe run directory: atomic Parquet shards, completion markers, a manifest.

The run directory is a local path (an NFS mount is one) or any ``pyarrow.fs`` URI
(``s3://bucket/runs/<name>``); every read, write, listing and removal in it goes through this
module and ``arenaforge.pipeline.filesystem``. Its layout (every path in it, by name) is
``arenaforge.pipeline.layout``.

A shard counts as done only when its marker exists and the checksums in it match the files, so
a shard killed half-written (or truncated later) is recomputed, never read as data. The order
is the one datatrove and Spark use: write to a temp name, fsync, rename, then write the marker
the same way; on an object store each file is one whole upload instead (no temp names).

What must be local stays local when the run directory is remote: ``cache_dir`` (embedding
caches, a SQLite request cache) lives under ``runner.local_cache_dir`` or
``$ARENAFORGE_CACHE``/the user cache dir (``runs/<name>-<hash of the URI>``); model weights and
sandbox scratch never live in the run directory.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import posixpath
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from arenaforge.pipeline import __version__, layout
from arenaforge.pipeline import filesystem as fsys
from arenaforge.pipeline.layout import SUCCESS


class StoreError(RuntimeError):
    """A run directory that cannot be used as asked (wrong config, corrupt data)."""


# -- local helpers (local caches outside the run directory use them too) ---------------------
def file_sha256(path: Path) -> str:
    return fsys.sha256(fsys.LOCAL, str(path))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to a local ``path`` so that readers see the old file or the whole new one."""
    fsys.write_bytes(fsys.LOCAL, str(path), data)


def table_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def atomic_write_table(path: Path, table: pa.Table) -> None:
    atomic_write_bytes(path, table_bytes(table))


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, fsys.json_bytes(obj))


def read_json(path: Path) -> Any | None:
    return fsys.read_json(fsys.LOCAL, str(path))


def table_hash(table: pa.Table, key: str | None = None) -> str:
    """Order-sensitive fingerprint of a table's key column (or of all its rows).

    Hashed in slices of rows, so a large table never becomes one JSON string in memory.
    """
    h = hashlib.sha256()
    cols = [key] if key and key in table.column_names else table.column_names
    for col in cols:
        h.update(col.encode())
        column = table.column(col)
        for start in range(0, len(column), 4096):
            h.update(json.dumps(column.slice(start, 4096).to_pylist(), default=str).encode())
    return h.hexdigest()[:16]


# Decoded shard files of this process, keyed by path and checksum (so a rewritten shard is a
# new entry). A stage sharded from an unsharded source (answer from compress, difficulty from
# clean) reads the same one file for every shard: decoding it each time cost 152 ms a shard at
# 20k instructions (19k rows), O(n) per shard and O(n^2) per stage; filtering the decoded table
# costs 0.5 ms. Two entries: the parts a worker reads next are mostly the ones it just read.
_DECODED: OrderedDict[tuple[str, str], pa.Table | None] = OrderedDict()
_DECODED_LOCK = threading.Lock()
_DECODED_MAX = 2


def _read_shard(buf: pa.Buffer, columns: list[str] | None) -> pa.Table | None:
    """A shard file's rows, only those of ``columns`` it has (an optional column may be
    absent; None: every column); None for a shard that kept no row and lacks some of them
    (``_has_rows_or_columns``), from one read of the file's footer."""
    if columns is None:
        return pq.read_table(pa.BufferReader(buf))
    meta = pq.read_metadata(pa.BufferReader(buf))
    names = set(meta.schema.to_arrow_schema().names)
    if not meta.num_rows and not set(columns) <= names:
        return None
    return pq.read_table(pa.BufferReader(buf), columns=[c for c in columns if c in names])


def _has_rows_or_columns(buf: pa.Buffer, columns: list[str] | None) -> bool:
    """Whether to read ``columns`` from a shard file: a shard whose rows were all dropped may
    have no columns at all, and holds no row to read."""
    if columns is None:
        return True
    reader = pa.BufferReader(buf)
    return bool(pq.read_metadata(reader).num_rows) or set(columns) <= set(
        pq.read_schema(pa.BufferReader(buf)).names)


class TableCache:
    """A local folder of Parquet parts, one of a run's caches (``RunStore.table_cache``).

    What a stage gets from ``ctx.table_cache(name)``: it names parts and never touches the
    folder itself; a part is written atomically, so concurrent or killed writers leave whole
    parts only.
    """

    def __init__(self, path: Path):
        self.path = Path(path)

    def parts(self) -> list[str]:
        """The names of the parts written so far, sorted."""
        return sorted(p.name for p in self.path.glob("*.parquet")) if self.path.is_dir() else []

    def read(self, name: str) -> pa.Table | None:
        """The part ``name``, or None when it was never written."""
        path = self.path / name
        return pq.read_table(path) if path.is_file() else None

    def write(self, name: str, table: pa.Table) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        atomic_write_table(self.path / name, table)


class StageStore:
    """The shards of one stage. Paths it returns are paths of the run's filesystem."""

    def __init__(self, root: fsys.Dir | Path | str, stage: str):
        if not isinstance(root, fsys.Dir):  # a run directory's path or URI
            root = RunStore(root)._dir
        self.stage = stage
        self.fs = root.fs
        self.dir = root.file(posixpath.join(layout.STAGES, stage))
        self._root = root

    def shard_path(self, i: int) -> str:
        return self._file(layout.shard_name(i))

    def dropped_path(self, i: int) -> str:
        return self._file(layout.shard_name(i, "dropped"))

    def marker_path(self, i: int) -> str:
        return self._file(layout.shard_name(i, "marker"))

    def _file(self, name: str) -> str:
        return self._root.file(layout.stage_file(self.stage, name))

    def _names(self, pattern: str) -> list[str]:
        return self._root.names(pattern, posixpath.join(layout.STAGES, self.stage))

    def write_shard(self, i: int, kept: pa.Table, dropped: pa.Table,
                    info: dict[str, Any]) -> dict[str, Any]:
        """Write a shard's data, then its marker: the marker is the commit point. Returns the
        marker (checksums of the bytes written: no read-back, which on S3 is three GETs)."""
        fsys.make_dir(self.fs, self.dir)
        kept_bytes, dropped_bytes = table_bytes(kept), table_bytes(dropped)
        fsys.write_bytes(self.fs, self.shard_path(i), kept_bytes)
        fsys.write_bytes(self.fs, self.dropped_path(i), dropped_bytes)
        marker = dict(info, rows=kept.num_rows, dropped=dropped.num_rows,
                      sha256=hashlib.sha256(kept_bytes).hexdigest(),
                      dropped_sha256=hashlib.sha256(dropped_bytes).hexdigest(),
                      written_at=time.time())
        self._root.write_json(self.marker_path(i), marker)
        return marker

    def _file_problem(self, path: str, expected: str | None) -> str | None:
        try:  # one read (one GET on S3), no existence check before it
            digest = fsys.sha256(self.fs, path)
        except (FileNotFoundError, IsADirectoryError):
            return f"{self._root.show(path)}: missing"
        if digest != expected:
            return f"{self._root.show(path)}: checksum mismatch (truncated or modified)"
        return None

    def shard_done(self, i: int, input_hash: str) -> dict[str, Any] | None:
        """The marker of a complete, intact shard made from this input, else None."""
        marker = self._root.read_json(self.marker_path(i))
        if not marker or marker.get("input_hash") != input_hash:
            return None
        for path, key in ((self.shard_path(i), "sha256"), (self.dropped_path(i), "dropped_sha256")):
            if self._file_problem(path, marker.get(key)) is not None:
                return None
        return marker

    def markers(self) -> list[dict[str, Any]]:
        return [m for name in self._names("part-*.done.json")
                if (m := self._root.read_json(self._file(name)))]

    def read_dropped_detail(self) -> str | None:
        """The first ``detail`` among this stage's dropped rows (for error messages)."""
        for name in self._names("part-*.dropped.parquet"):
            data = fsys.read_bytes(self.fs, self._file(name))
            if data is None:
                continue
            column = pq.read_table(pa.BufferReader(data), columns=["detail"]).column(0)
            details = [d for d in column.to_pylist() if d]
            if details:
                return details[0]
        return None

    def mark_success(self, info: dict[str, Any]) -> None:
        self._root.write_json(self._file(SUCCESS), info)

    def success(self) -> dict[str, Any] | None:
        return self._root.read_json(self._file(SUCCESS))

    def _complete(self) -> dict[str, Any]:
        """The success marker of a stage whose output is about to be read."""
        info = self.success()
        if info is None:
            raise StoreError(f"cannot read stage output:\n  {self.stage}: not complete")
        return info

    def clear_success(self) -> None:
        fsys.delete_file(self.fs, self._file(SUCCESS))

    def verify(self, parts: Iterable[int] | None = None) -> list[str]:
        """Problems with a complete stage's files (empty when intact); ``parts``: only those
        shards (a worker checks what it reads, not the whole stage). Streams the checksums."""
        info = self.success()
        if info is None:
            return [f"{self.stage}: not complete"]
        problems = []
        for i in (range(info["shards"]) if parts is None else parts):
            marker = self._root.read_json(self.marker_path(i))
            if marker is None:
                problems.append(f"{self._root.show(self.marker_path(i))}: marker missing")
                continue
            for path, key in ((self.shard_path(i), "sha256"),
                              (self.dropped_path(i), "dropped_sha256")):
                if (problem := self._file_problem(path, marker.get(key))) is not None:
                    problems.append(problem)
        return problems

    def _verified(self, indices: Iterable[int], which: str = "kept") -> list[pa.Buffer]:
        """The bytes of shard files of a complete stage (the caller checked, ``_complete``),
        each read once and checked against its marker.

        Raises:
            StoreError: a file is missing or altered (all such problems listed).
        """
        buffers, problems = [], []
        for i in indices:
            buf, problem = self._checked(i, self._root.read_json(self.marker_path(i)), which)
            if problem is not None:
                problems.append(problem)
            else:
                buffers.append(buf)
        if problems:
            raise StoreError("cannot read stage output:\n  " + "\n  ".join(problems))
        return buffers

    def _checked(self, i: int, marker: dict | None,
                 which: str = "kept") -> tuple[pa.Buffer | None, str | None]:
        """Shard ``i``'s file bytes checked against ``marker`` (already read by the caller),
        or what is wrong with them."""
        if marker is None:
            return None, f"{self._root.show(self.marker_path(i))}: marker missing"
        path = self.shard_path(i) if which == "kept" else self.dropped_path(i)
        data = fsys.read_bytes(self.fs, path)
        if data is None:
            return None, f"{self._root.show(path)}: missing"
        if hashlib.sha256(data).hexdigest() != marker.get(
                "sha256" if which == "kept" else "dropped_sha256"):
            return None, f"{self._root.show(path)}: checksum mismatch (truncated or modified)"
        return pa.py_buffer(data), None

    def remove_stale(self, keep: int) -> None:
        """Drop temp files of killed writers and shards numbered >= keep (an earlier plan's)."""
        for name in self._names(".*.tmp"):
            fsys.delete_file(self.fs, self._file(name))
        for name in self._names("part-*"):
            try:
                n = int(name[5:10])
            except ValueError:
                continue
            if n >= keep:
                fsys.delete_file(self.fs, self._file(name))

    def schema(self) -> pa.Schema | None:
        """The columns of a complete stage's output (from its first shard), without reading it."""
        info = self.success()
        if info is None or not info.get("shards") or not fsys.is_file(self.fs, self.shard_path(0)):
            return None
        return pq.read_schema(self.shard_path(0), filesystem=self.fs)

    def key_parts(self, key: str) -> list[tuple[int, list]]:
        """``(shard index, its key values)`` per shard that kept rows (checksums verified)."""
        indices = list(range(self._complete()["shards"]))
        out = []
        for i, buf in zip(indices, self._verified(indices)):
            if pq.read_metadata(pa.BufferReader(buf)).num_rows:
                out.append((i, pq.read_table(pa.BufferReader(buf), columns=[key])
                            .column(0).to_pylist()))
        return out

    def read_where(self, key: str, values: Iterable[str],
                   parts: Iterable[int] | None = None) -> pa.Table:
        """The kept rows whose ``key`` is among ``values``, in shard and row order.

        ``parts``: the shards that hold them (the driver knows from ``key_parts``), so a worker
        opens and checks only those: reading every shard for every shard made a stage O(S^2)
        (0.39 s a read with 150 source shards). Each file is filtered as it is read.
        """
        import pyarrow.compute as pc

        info = self._complete()
        indices = list(range(info.get("shards", 0))) if parts is None else list(parts)
        wanted = pa.array(list(values), pa.string())
        tables = [t.filter(pc.is_in(t.column(key), value_set=wanted))
                  for i in indices if (t := self._decoded(i, key)) is not None]
        return pa.concat_tables(tables, promote_options="permissive") if tables else pa.table({})

    def _decoded(self, i: int, key: str) -> pa.Table | None:
        """Shard ``i``'s kept rows, decoded once per process (see ``_DECODED``); None when
        the shard kept no row and has no ``key`` column."""
        marker = self._root.read_json(self.marker_path(i))
        cache_key = (self._root.show(self.shard_path(i)), str((marker or {}).get("sha256")))
        with _DECODED_LOCK:
            if cache_key in _DECODED:
                _DECODED.move_to_end(cache_key)
                return _DECODED[cache_key]
        buf, problem = self._checked(i, marker)
        if problem is not None:
            raise StoreError("cannot read stage output:\n  " + problem)
        table = pq.read_table(pa.BufferReader(buf)) if _has_rows_or_columns(buf, [key]) else None
        with _DECODED_LOCK:
            _DECODED[cache_key] = table
            while len(_DECODED) > _DECODED_MAX:
                _DECODED.popitem(last=False)
        return table

    def read(self, which: str = "kept", columns: Iterable[str] | None = None) -> pa.Table:
        """All shards of a complete stage, in shard order, checksums verified; ``columns``:
        only those of them that the output has (None: all)."""
        columns = list(columns) if columns is not None else None
        tables = [t for buf in self._verified(range(self._complete().get("shards", 0)), which)
                  if (t := _read_shard(buf, columns)) is not None]
        if not tables:
            return pa.table({})
        return pa.concat_tables(tables, promote_options="permissive")


class RunStore:
    """A run directory; refuses to mix outputs of different configs.

    Args:
        root: a local path or a ``pyarrow.fs`` URI (``s3://bucket/runs/r1``).
        local_cache_dir: where ``cache_dir`` puts local caches when ``root`` is remote
            (default: ``$ARENAFORGE_CACHE`` or the user cache dir, ``runs/<name>-<hash>``).
    """

    def __init__(self, root: str | Path, local_cache_dir: str | Path | None = None):
        self.remote = fsys.is_uri(root)
        # the run directory as the user named it: a Path when local, the URI string otherwise
        self.root: Path | str = str(root) if self.remote else Path(root)
        self.fs, self.path = fsys.resolve(root)
        self._dir = fsys.Dir(self.fs, self.path, fsys.display(root))
        self.local_cache_dir = Path(local_cache_dir) if local_cache_dir else None

    @property
    def name(self) -> str:
        """The run's name: the last part of its directory."""
        return fsys.split(self.root)[1]

    @property
    def location(self) -> str:
        """The run directory for messages (a URI without its query options)."""
        return self._dir.shown

    @property
    def manifest_path(self) -> str:
        return self._dir.file(layout.MANIFEST)

    def stage(self, name: str) -> StageStore:
        return StageStore(self._dir, name)

    def manifest(self) -> dict[str, Any]:
        return self._dir.read_json(self.manifest_path) or {}

    def open(self, config_hash: str, config_yaml: str, fresh: bool = False) -> None:
        """Create the run directory, or check that an existing one was made by this config."""
        existing = self.manifest()
        if existing and not fresh and existing.get("config_hash") != config_hash:
            raise StoreError(
                f"{self.location} was made by a different config (hash "
                f"{existing.get('config_hash')}, now {config_hash}). Use --fresh to discard it, "
                "or choose another --name.")
        if fresh:
            fsys.delete_dir(self.fs, self.path)
            existing = {}
        fsys.make_dir(self.fs, self.path)
        for stale in self._dir.names(".*.tmp"):  # left by a writer killed mid-write
            fsys.delete_file(self.fs, self._dir.file(stale))
        fsys.write_bytes(self.fs, self._dir.file(layout.CONFIG), config_yaml.encode())
        if not existing:
            existing = {"config_hash": config_hash, "code_version": __version__,
                        "created": time.time(), "stages": {}}
        existing["code_version"] = __version__
        self._dir.write_json(self.manifest_path, existing)

    def update_stage(self, name: str, info: dict[str, Any]) -> None:
        manifest = self.manifest()
        manifest.setdefault("stages", {})[name] = info
        self._dir.write_json(self.manifest_path, manifest)

    def cache_dir(self, name: str) -> Path:
        """A local directory for one cache (``embeddings/<model>``), created.

        In the run directory when it is local; when it is remote, under the local cache root
        (the class docstring): these caches are read by local code (SQLite, glob of Parquet
        parts), and losing one only costs recomputation.
        """
        path = self.cache_path(name)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def table_cache(self, name: str) -> TableCache:
        """The cache ``name`` (``embeddings/<model>``) as a folder of Parquet parts."""
        return TableCache(self.cache_path(name))

    def cache_path(self, name: str) -> Path:
        """Where ``cache_dir(name)`` is, without creating it (a run that fails its checks
        leaves no directory behind)."""
        if self.remote:
            digest = hashlib.sha256(str(self.root).encode()).hexdigest()[:12]
            from arenaforge.pipeline.models.weights import cache_root

            base = (self.local_cache_dir or cache_root() / "runs") / f"{self.name}-{digest}"
        else:
            base = self.root / layout.CACHE
        path = base / name
        if not path.resolve().is_relative_to(base.resolve()):
            raise StoreError(f"cache name {name!r} leaves the cache directory")
        return path

    def request_cache(self, store: str) -> tuple[Path | str, str]:
        """``(location, store)`` of the request cache for ``runner.request_cache_store``.

        ``auto``: SQLite in a local run directory, ``files`` in a remote one. The ``files``
        store lives in the run directory on any filesystem (every node of a cluster shares it);
        SQLite needs a local disk and file locks, so it is refused for a remote run directory.

        Raises:
            StoreError: ``sqlite`` asked for a remote run directory.
        """
        if store == "auto":
            store = "files" if self.remote else "sqlite"
        if store == "sqlite" and self.remote:
            raise StoreError(f"runner.request_cache_store: sqlite needs a local run directory; "
                             f"{self.location} is remote: use files (or auto)")
        if store == "files":
            return fsys.join(self.root, layout.CACHE, layout.REQUEST_CACHE), store
        return self.cache_path(layout.REQUEST_CACHE), store

    def completed(self) -> dict[str, dict[str, Any]]:
        """``{stage: its _SUCCESS record}`` of every complete stage in the run directory."""
        out = {}
        for name in self._dir.names("*", layout.STAGES):
            record = self._dir.read_json(self._dir.file(layout.stage_file(name, SUCCESS)))
            if record is not None:
                out[name] = record
        return out

    def funnel(self, order: list[str] | None = None) -> Any:
        """The completed stages as a ``arenaforge.pipeline.funnel.Funnel`` (pipeline order by default)."""
        from arenaforge.pipeline.funnel import Funnel

        return Funnel.from_records(self.completed(), order)

    def _artifact_path(self, relpath: str) -> str:
        norm = posixpath.normpath(relpath)
        if posixpath.isabs(norm) or norm == ".." or norm.startswith("../"):
            raise StoreError(f"artifact path {relpath!r} leaves the run directory")
        return self._dir.file(norm)

    def artifact_location(self, relpath: str) -> Path | str:
        """Where an artifact lives, as the run directory was named (a Path or a URI)."""
        self._artifact_path(relpath)
        return fsys.join(self.root, *posixpath.normpath(relpath).split("/"))

    def has_artifact(self, relpath: str) -> bool:
        return fsys.is_file(self.fs, self._artifact_path(relpath))

    def read_artifact(self, relpath: str) -> bytes | None:
        """A side artifact's bytes, or None when it was never written."""
        return fsys.read_bytes(self.fs, self._artifact_path(relpath))

    def remove_artifacts(self, folder: str, pattern: str, keep: Iterable[str]) -> list[str]:
        """Delete files matching ``pattern`` in artifact ``folder`` whose names are not in
        ``keep`` (a rerun that writes fewer dataset shards must not leave the old ones)."""
        keep = set(keep)
        directory = self._artifact_path(folder)
        removed = []
        for info in fsys.list_files(self.fs, directory):
            if (info.type == pafs.FileType.File and info.base_name not in keep
                    and fnmatch.fnmatchcase(info.base_name, pattern)):
                fsys.delete_file(self.fs, info.path)
                removed.append(info.base_name)
        return removed

    def write_dropped_summary(self, stages: Iterable[str], schema: pa.Schema) -> Path | str:
        """``dropped.parquet``: every dropped row of ``stages``, streamed shard by shard (the
        run's drops never sit in memory at once) into a local temp file, then renamed into
        place (local) or uploaded whole (object store)."""
        target = self._dir.file(layout.DROPPED)
        with (fsys.write_via_local_file(self.fs, target) as tmp,
              pq.ParquetWriter(tmp, schema, compression="zstd") as writer):
            for name in stages:
                stage = self.stage(name)
                for i in range((stage.success() or {}).get("shards", 0)):
                    # batch by batch: one unsharded stage's drops (emit's not_selected
                    # rows carry each answer's JSON) reached 55 MB at 5k instructions
                    with self.fs.open_input_file(stage.dropped_path(i)) as f:
                        for batch in pq.ParquetFile(f).iter_batches(batch_size=4096,
                                                                    columns=schema.names):
                            writer.write_table(pa.Table.from_batches([batch]).cast(schema))
        return self.artifact_location(layout.DROPPED)

    def write_artifact(self, relpath: str, data: bytes | str | pa.Table) -> Path | str:
        """Atomically write a side artifact; returns where it lives (a Path or a URI)."""
        path = self._artifact_path(relpath)
        if isinstance(data, pa.Table):
            data = table_bytes(data)
        elif isinstance(data, str):
            data = data.encode()
        fsys.write_bytes(self.fs, path, data)
        return self.artifact_location(relpath)
