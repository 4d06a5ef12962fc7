"""A sentence-transformers model that embeds texts where it is loaded, in batches on lanes.

``decontaminate`` and ``compress`` ask ``ctx.embedder(model_path, device)`` for one; inline it is
a :class:`LocalEmbedder` held by the process, on Ray a client of the run's embedding service
(``arenaforge.pipeline.embedding_service``), which holds one :class:`LocalEmbedder` for the
whole run. Either way ``embed`` returns the same vectors for the same texts: a request is
split into the batches ``SentenceTransformer.encode`` itself would make (texts sorted by
length, longest first, ``batch_size`` at a time), and each batch is encoded on its own on one
of ``lanes`` single-threaded lanes. A batch's vectors depend only on its texts (their padded
length), so the lanes change the speed, not the numbers, and a shard's texts get the vectors a
single-threaded encode of that shard gives.

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
decisions at a 0.7 threshold.
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


def batch_order(texts: list[str], batch_size: int, model: Any = None) -> list[list[int]]:
    """The batches (indices into ``texts``) that ``SentenceTransformer.encode`` makes: texts
    sorted by length, longest first (the same ``np.argsort`` call, so ties fall alike), cut
    every ``batch_size``.

    >>> batch_order(["a", "ccc", "bb"], 2)
    [[1, 2], [0]]
    """
    length = getattr(model, "_input_length", len)
    order = np.argsort([-length(t) for t in texts])
    flatten = getattr(model, "_can_flatten_inputs", None)
    if callable(flatten) and flatten():
        order = model._interleave_sorted_indices(order)
    order = [int(i) for i in order]
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


class LocalEmbedder:
    """One sentence-transformers model in this process, loaded on first use.

    Args:
        model_path: the local model directory (never a hub name).
        device: ``cpu``, ``cuda``...; None: CUDA when available, else CPU.
        lanes: batches encoded at once, each on one thread (``1``: in the calling thread,
            with torch's own threads, as a plain ``encode`` runs).
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
        if self.lanes == 1:
            out = self._encode(model, list(texts), batch_size, precision)
        else:
            batches = batch_order(list(texts), batch_size, model)
            parts = list(self._lanes().map(
                lambda idx: (idx, self._encode(model, [texts[i] for i in idx], len(idx),
                                               precision)), batches))
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

                # each lane is one thread: the process's intra-op threads would spin against
                # the lanes (this process holds nothing else: the service's actor)
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
