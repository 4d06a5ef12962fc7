"""A sentence-transformers model that embeds texts where it is loaded, in batches on lanes.

``decontaminate`` and ``compress`` ask ``ctx.embedder(model_path, device)`` for one; inline it is
a :class:`LocalEmbedder` held by the process, on Ray a client of the run's embedding service
(``arenaforge.pipeline.embedding_service``), which holds one :class:`LocalEmbedder` for the
whole run. Either way ``embed`` returns the same vectors for the same texts.

A text's vector is a function of the text alone, never of the texts it came with: a batch holds
only texts of the same token length (:func:`length_batches`), so nothing is padded, and a
padding-free batch on one thread computes each row as that text alone would (checked bit for
bit, float32 and bfloat16, in ``tests/stages/common/test_embeddings.py``). A batch padded to
its longest text computes the others' rows with other matrix shapes and moves them by up to
1e-7 (float32) or 1e-3 (bfloat16). So the shard size, the batch size and which process asked
first change the speed, not the numbers, and the run's embedding service may compute vectors
ahead of the stage that asks for them. Batches are encoded on ``lanes`` single-threaded lanes.

Why single-threaded lanes rather than one multi-threaded encode: torch's intra-op threads
spin (OpenMP) and collapse when other processes share the cores. Measured here (2-core AMD
EPYC, load 12-16): 218 texts of the default run took 68 s of wall in one 2-thread encode and
25 ms of CPU per text on one thread.

Precision (``float32``, ``bfloat16``, ``auto``): ``bfloat16`` runs the model under
``torch.autocast``; it pays where the processor computes bfloat16 natively (AVX512-BF16 or
AMX on a CPU, any CUDA GPU), elsewhere it is emulated and slower. ``auto`` is ``bfloat16``
there and ``float32`` elsewhere (:func:`resolve_precision`). What bfloat16 keeps is measured and
tested in ``tests/stages/common/test_embedding_precision.py`` (53 requests against HumanEval):
cosines within 0.005 of float32's and the same decontamination decisions; compress keeps and
drops as many rows and its first picks are float32's, but a group of rewordings can keep a
different member, and the k-center order after that differs. So the default stays ``float32``
(the rows of a run do not change); ``auto`` is for runs that accept that tolerance. int8
(torch's dynamic quantisation of the linear layers) was measured and left out: 1.3x faster
than bfloat16 per text but cosines to float32 as low as 0.85 (0.91 per channel), which moves
decisions at a 0.7 threshold. So was int8 through ONNX Runtime (docs/PERFORMANCE.md): 1.3x
faster than bfloat16, cosines to float32 of 0.989 at least, but at 12,000 requests it decided
13 of 21 decontamination drops otherwise and compress kept 6.5% more rows.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import numpy as np

Precision = Literal["float32", "bfloat16", "auto"]
PRECISIONS: tuple[str, ...] = ("float32", "bfloat16", "auto")


@functools.cache
def native_bf16_cpu() -> bool:
    """Whether this CPU computes bfloat16 natively (AVX512-BF16 or AMX tiles)."""
    import torch

    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def resolve_precision(precision: str, device: str) -> str:
    """The compute type ``precision`` means on ``device`` (``cpu``, ``cuda``, ``cuda:1``).

    >>> resolve_precision("float32", "cpu"), resolve_precision("auto", "cuda:0")
    ('float32', 'bfloat16')
    """
    if precision not in PRECISIONS:
        raise ValueError(f"embedding precision {precision!r}: expected one of {PRECISIONS}")
    if precision != "auto":
        return precision
    if device.startswith("cuda"):
        return "bfloat16"
    return "bfloat16" if device == "cpu" and native_bf16_cpu() else "float32"


def length_batches(texts: list[str], batch_size: int, lengths: list[int]) -> list[list[int]]:
    """Batches (indices into ``texts``) of at most ``batch_size`` texts of one token length
    each (``lengths[i]``: the tokens of ``texts[i]`` as the model reads it), longest first,
    first come first within a length.

    >>> length_batches(["a", "b c", "d", "e f", "g"], 2, [1, 2, 1, 2, 1])
    [[1, 3], [0, 2], [4]]
    """
    by_length: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        by_length.setdefault(n, []).append(i)
    return [idx[i:i + batch_size] for n in sorted(by_length, reverse=True)
            for idx in [by_length[n]] for i in range(0, len(idx), batch_size)]


def token_lengths(model: Any, texts: list[str], chunk: int = 1024) -> list[int]:
    """Each text's token count as ``model.encode`` reads it (its own tokenizer call: the same
    stripping, lowercasing and truncation)."""
    features = getattr(model, "preprocess", None) or model.tokenize  # renamed in 6.x
    out: list[int] = []
    for i in range(0, len(texts), chunk):
        out += features(texts[i:i + chunk])["attention_mask"].sum(dim=1).tolist()
    return out


class LocalEmbedder:
    """One sentence-transformers model in this process, loaded on first use.

    Args:
        model_path: the local model directory (never a hub name).
        device: ``cpu``, ``cuda``...; None: CUDA when available, else CPU.
        lanes: batches encoded at once, each on one thread. torch computes single-threaded
            in this process from the first ``embed`` on: with several threads a matrix
            product splits its rows by their number, and a text's vector would move with its
            batch (by ~1e-7 in float32, measured).
    """

    def __init__(self, model_path: Path | str, device: str | None = None, lanes: int = 1):
        self.model_path, self.asked_device, self.lanes = Path(model_path), device, max(1, lanes)
        self._model: Any = None
        self._load_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self.load_seconds = 0.0
        self.texts = 0
        self.embed_seconds = 0.0

    def model(self) -> Any:
        with self._load_lock:
            if self._model is None:
                start = time.perf_counter()
                from sentence_transformers import SentenceTransformer

                model = SentenceTransformer(str(self.model_path), device=self.asked_device,
                                            local_files_only=True)
                # one encode before any concurrent one: the fast tokenizer sets its padding and
                # truncation state on first use, and two threads doing that at once fail
                model.encode(["warm up"], show_progress_bar=False)
                self._model = model
                self.load_seconds = time.perf_counter() - start
            return self._model

    def precision(self, asked: str) -> str:
        """The compute type ``asked`` resolves to here (see :func:`resolve_precision`);
        without loading the model (sentence-transformers puts it on CUDA when there is one)."""
        if asked != "auto":
            return resolve_precision(asked, "cpu")
        device = self.asked_device
        if device is None:
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
        return resolve_precision(asked, device)

    def embed(self, texts: list[str], batch_size: int = 64,
              precision: str = "float32") -> np.ndarray:
        """``(len(texts), d)`` float32 raw (unnormalised) embeddings."""
        model = self.model()
        if not texts:
            return np.zeros((0, model.get_sentence_embedding_dimension() or 0), np.float32)
        start = time.perf_counter()
        precision = self.precision(precision)
        texts = list(texts)
        batches = length_batches(texts, batch_size, token_lengths(model, texts))

        def encode(idx: list[int]) -> tuple[list[int], np.ndarray]:
            return idx, self._encode(model, [texts[i] for i in idx], len(idx), precision)

        parts = list(self._lanes().map(encode, batches))
        out = np.empty((len(texts), parts[0][1].shape[1]), np.float32)
        for idx, vecs in parts:
            out[idx] = vecs
        self.texts += len(texts)
        self.embed_seconds += time.perf_counter() - start
        return out

    def _lanes(self) -> ThreadPoolExecutor:
        with self._load_lock:
            if self._pool is None:
                import torch

                # each lane is one thread: intra-op threads would spin against the lanes and
                # make a text's vector depend on its batch (see ``lanes``)
                torch.set_num_threads(1)
                self._pool = ThreadPoolExecutor(self.lanes, thread_name_prefix="embed")
            return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        self._model = None

    @staticmethod
    def _encode(model: Any, texts: list[str], batch_size: int, precision: str) -> np.ndarray:
        import torch

        compute = (torch.autocast(model.device.type, dtype=torch.bfloat16)
                   if precision == "bfloat16" else contextlib.nullcontext())
        with compute:
            out = model.encode(texts, batch_size=batch_size, convert_to_tensor=True,
                               normalize_embeddings=False, show_progress_bar=False)
        return out.float().cpu().numpy()

    def stats(self) -> dict[str, Any]:
        return {"model": str(self.model_path), "load_seconds": self.load_seconds,
                "texts": self.texts, "embed_seconds": self.embed_seconds, "lanes": self.lanes}
