"""A served model's chat template read on the client, from files the registry names.

A server renders chat for ``/chat/completions`` itself, but Magpie mining and the logprob
protocols send raw prompts to ``/completions``, so the client must render them with the
model's own template. Only llama.cpp's server reports its template (``/props``); vLLM and SGLang
do not, so the registry names where it is: a GGUF file (its ``tokenizer.chat_template``
metadata, read without loading weights) or a Hugging Face tokenizer directory
(``chat_template.jinja`` or ``tokenizer_config.json``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from arenaforge.pipeline.backends.chat_template import template_from_hf_dir


@dataclasses.dataclass(frozen=True)
class TemplateInfo:
    """A chat template with the token texts it may write.

    Attributes:
        template: the Jinja chat template (``None``: the files carry none).
        bos: the BOS token's text (``bos_token`` in templates).
        eos: the EOS token's text (``eos_token`` in templates).
        add_bos: whether the model's tokenizer adds BOS itself (``None``: not recorded).
    """

    template: str | None
    bos: str = ""
    eos: str = ""
    add_bos: bool | None = None


# Scalar GGUF value types -> struct format (little-endian files; gguf.GGUFValueType numbering).
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
            11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_WANTED = ("tokenizer.chat_template", "tokenizer.ggml.add_bos_token",
           "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id")


def read_gguf_tokenizer_fields(path: str | Path) -> tuple[dict, list[bytes] | None]:
    """The template-related metadata of a GGUF file, and a way to its token texts.

    ``gguf.GGUFReader`` builds every field, including the 150k-entry token and merge arrays,
    which takes 5-18 s per file on a busy 2-core machine; this walks the key-value section
    once (type codes as in ``gguf.GGUFValueType``) and keeps only the template fields and the
    token texts (a list of their raw bytes).

    Raises:
        ValueError: not a (little-endian, version 2+) GGUF file.
    """
    import mmap
    import struct

    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if buf[:4] != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        version, _n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
        if not 2 <= version < 1000:
            raise ValueError(f"{path}: unsupported GGUF version {version} (big-endian file?)")
        pos = 24

        def string() -> bytes:
            nonlocal pos
            (n,) = struct.unpack_from("<Q", buf, pos)
            pos += 8 + n
            return buf[pos - n:pos]

        def value(kind: int, keep: bool):
            nonlocal pos
            if kind == _STRING:
                return string()
            if kind == _ARRAY:
                sub, count = struct.unpack_from("<IQ", buf, pos)
                pos += 12
                if sub in _SCALARS:  # fixed size: skip in one step
                    pos += struct.calcsize(_SCALARS[sub]) * count
                    return None
                items = [value(sub, keep) for _ in range(count)]
                return items if keep else None
            fmt = _SCALARS[kind]
            (out,) = struct.unpack_from(fmt, buf, pos)
            pos += struct.calcsize(fmt)
            return out

        fields: dict = {}
        tokens = None
        for _ in range(n_kv):
            key = string().decode("utf-8")
            (kind,) = struct.unpack_from("<I", buf, pos)
            pos += 4
            is_tokens = key == "tokenizer.ggml.tokens"
            got = value(kind, keep=is_tokens)
            if is_tokens:
                tokens = got
            elif key in _WANTED:
                fields[key] = got
    return fields, tokens


def template_from_gguf(path: str | Path) -> TemplateInfo:
    """The chat template and BOS/EOS texts recorded in a GGUF file's metadata.

    Raises:
        ValueError: the file is not a GGUF file.
    """
    try:
        fields, tokens = read_gguf_tokenizer_fields(path)
    except (OSError, ValueError, KeyError) as exc:  # KeyError: an unknown value type
        raise ValueError(f"{path}: cannot read GGUF metadata: {exc!r}") from exc

    def token_text(key: str) -> str:
        token_id = fields.get(key)
        if tokens is None or token_id is None or not 0 <= token_id < len(tokens):
            return ""
        return tokens[token_id].decode("utf-8", errors="replace")

    template = fields.get("tokenizer.chat_template")
    add_bos = fields.get("tokenizer.ggml.add_bos_token")
    return TemplateInfo(template=None if template is None else template.decode("utf-8"),
                        bos=token_text("tokenizer.ggml.bos_token_id"),
                        eos=token_text("tokenizer.ggml.eos_token_id"),
                        add_bos=None if add_bos is None else bool(add_bos))


def _special(value) -> str:
    # tokenizer_config.json writes special tokens as text or as {"content": text, ...}.
    if isinstance(value, dict):
        return str(value.get("content") or "")
    return value if isinstance(value, str) else ""


def template_from_tokenizer_dir(path: str | Path) -> TemplateInfo:
    """The chat template and BOS/EOS texts of a Hugging Face tokenizer directory."""
    path = Path(path)
    config_file = path / "tokenizer_config.json"
    config = json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
    add_bos = config.get("add_bos_token")
    return TemplateInfo(template=template_from_hf_dir(path), bos=_special(config.get("bos_token")),
                        eos=_special(config.get("eos_token")),
                        add_bos=add_bos if isinstance(add_bos, bool) else None)


def load_template(path: str | Path) -> TemplateInfo:
    """The template of a GGUF file or a tokenizer directory (``~`` and ``$VARS`` expanded).

    Raises:
        FileNotFoundError: nothing at ``path``.
        ValueError: a file that is not GGUF.
    """
    import os

    path = Path(os.path.expandvars(str(path))).expanduser()
    if path.is_dir():
        return template_from_tokenizer_dir(path)
    if not path.is_file():
        raise FileNotFoundError(f"chat template source {path} does not exist")
    return template_from_gguf(path)
