"""Replay throughput (warm embedding cache) and cold-embedding overhead.

1. Generates a 100-claim / 200-citation pytest suite over the website simulator
   (scripted pages) and the OpenAI simulator (scripted verdicts: fixtures, not a
   model), and records it once (``--citations-record-mode=once``; this run
   loads MiniLM and fills the embedding cache beside the cassettes).
2. Warm replay: ``CI=1`` (record mode ``none``), no keys, simulators stopped.
   Citations per second beyond pytest's own start-up (the same suite's
   ``--collect-only`` time is subtracted), and whether torch / numpy /
   sentence_transformers / transformers were imported (they must not be).
3. Cold: the same cassettes replayed in-process with an EMPTY embedding cache
   (the extraction cache beside the cassettes is kept, as in the plugin), MiniLM
   already loaded; pipeline time vs raw ``SentenceTransformer.encode``
   over exactly the texts the pipeline embedded. ratio = raw / pipeline
   (1.0 = the pipeline adds nothing over the model).

Summary lines:
``BENCH replay citations_per_s=... target>=200 torch_imported=False ...``
``BENCH replay_cold ratio=... target>=0.9 ...``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from _common import (
    HEAVY_MODULES,
    PYTHON,
    article_html,
    bench_line,
    clean_env,
    fact_sentence,
    filler_paragraph,
    median,
    ru_maxrss_mib,
    run,
)

PROBE = """
import json, sys, time, pytest
start = time.perf_counter()
rc = pytest.main(sys.argv[1:])
print("@@RESULT@@" + json.dumps({"rc": int(rc), "seconds": time.perf_counter() - start,
      "modules": {m: m in sys.modules for m in %r}}))
"""


PAGES: dict[str, bytes] = {}


def extraction_seconds() -> float:
    """trafilatura over every page body once: work a warm replay still repeats."""
    from pytest_citations.fetch.direct import decode_body, html_to_markdown

    start = time.perf_counter()
    for body in PAGES.values():
        html_to_markdown(decode_body(body, "utf-8", html=True))
    return time.perf_counter() - start


def start_simulators(claims: int):
    from simulators.openai import OpenAIHandler
    from simulators.scripted import JudgeSimulator, Verdict
    from simulators.website import Route, start_website

    routes = {}
    for i in range(claims):
        for j in range(2):
            paragraphs = [
                fact_sentence(i) + " " + filler_paragraph(f"{i}-{j}-a", 120),
                filler_paragraph(f"{i}-{j}-b", 190),
                filler_paragraph(f"{i}-{j}-c", 150),
            ]
            html = article_html(f"Widget {i} ({j})", paragraphs)
            PAGES[f"/w/{i}/{j}"] = html.encode()
            routes[f"/w/{i}/{j}"] = Route(
                body=html.encode(), content_type="text/html; charset=utf-8"
            )
    site = start_website(routes)

    def script(claim: str, passages: list[str]) -> Verdict:
        for passage in passages:
            if claim in passage:
                return Verdict("supported", claim, 0.95)
        return Verdict("not_found", None, 0.3)

    judge = JudgeSimulator(OpenAIHandler).start()
    judge.brain.script = script
    return site, judge


def make_suite(root: Path, site_url: str, claims: int) -> Path:
    suite = root / "suite"
    suite.mkdir()
    (suite / "pytest.ini").write_text(
        "[pytest]\ncitations_cassette_dir = cassettes\ncitations_fetcher = direct\n",
        encoding="utf-8",
    )
    per_file = 20
    for f in range(0, claims, per_file):
        lines = []
        for i in range(f, min(f + per_file, claims)):
            urls = [f"{site_url}/w/{i}/0", f"{site_url}/w/{i}/1"]
            lines.append(
                f"def test_claim_{i}(verify_citation):\n"
                f"    assert verify_citation({fact_sentence(i)!r}, {urls!r}) == 'supported'\n"
            )
        (suite / f"test_claims_{f:03d}.py").write_text("\n".join(lines), encoding="utf-8")
    return suite


def pytest_probe(suite: Path, env: dict[str, str], *args: str) -> dict:
    seconds, proc = run(
        [PYTHON, "-c", PROBE % (HEAVY_MODULES,), "-q", "-p", "no:cacheprovider", *args],
        env=env,
        cwd=suite,
    )
    lines = [x for x in proc.stdout.splitlines() if x.startswith("@@RESULT@@")]
    if not lines:
        raise SystemExit(f"pytest probe failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    result = json.loads(lines[-1][len("@@RESULT@@") :])
    result["wall"] = seconds
    if result["rc"] != 0:
        raise SystemExit(f"pytest failed (rc {result['rc']}):\n{proc.stdout[-3000:]}")
    return result


def cold(suite: Path, claims: list[tuple[str, list[str]]], repeat: int) -> dict:
    """Replay with an empty embedding cache, MiniLM loaded; vs raw encode of the same texts.

    ``repeat`` interleaved pairs (pipeline, then raw encodes of exactly the texts
    it embedded), each pipeline run with a cache of its own, so a noisy moment
    hits one pair; the median ratio is the figure.
    """
    from pytest_citations._threads import EMBEDDING_THREAD
    from pytest_citations.cassettes import CassetteRecorder
    from pytest_citations.pipeline import Verifier
    from pytest_citations.retrieval import EMBEDDING_BATCH_SIZE, CachedEmbedder, MiniLMEmbedder
    from pytest_citations.settings import Settings

    def on_embedding_thread(function, *args, **kwargs):  # type: ignore[no-untyped-def]
        # torch's OpenMP pool is per calling thread: the model is loaded and the raw
        # encodes run on the thread the pipeline ranks on, so neither side pays for
        # the other's idle, spinning pool.
        return EMBEDDING_THREAD.submit(function, *args, **kwargs).result()

    minilm = MiniLMEmbedder()
    load_start = time.perf_counter()
    on_embedding_thread(minilm.embed, ["warm-up"])
    load_s = time.perf_counter() - load_start
    model = minilm._load()
    seen: list[str] = []
    calls: list[list[str]] = []

    class Spy:
        name = minilm.name

        def embed(self, texts):
            seen.extend(texts)
            calls.append(list(texts))
            return minilm.embed(texts)

    def encode(texts: list[str], batch: int) -> float:
        start = time.perf_counter()
        on_embedding_thread(
            model.encode,
            texts,
            batch_size=batch,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return time.perf_counter() - start

    def per_call() -> None:
        for texts in calls:  # the pipeline's call pattern: one encode per claim
            model.encode(
                texts,
                batch_size=EMBEDDING_BATCH_SIZE,
                normalize_embeddings=True,
                show_progress_bar=False,
            )

    pairs = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as empty:
            verifier = Verifier(
                # As the plugin configures it: only the EMBEDDING cache is empty; the
                # extracted page texts beside the cassettes are used as on any replay.
                Settings(fetcher="direct", extraction_cache_dir=suite / "cassettes" / "extracted"),
                embedder=CachedEmbedder(Spy(), empty),
                recorder=CassetteRecorder(suite / "cassettes", record_mode="none"),
            )

            async def all_claims(
                batch: list[tuple[str, list[str]]], verifier: Verifier = verifier
            ) -> list:
                return [await verifier.averify(claim, urls) for claim, urls in batch]

            # The first claim pays the one-off imports of the fetch, cassette and
            # judge stack (~1 s on the first pair): a start-up cost, not embedding
            # overhead, so it is not timed.
            asyncio.run(all_claims(claims[:1]))
            seen.clear()
            calls.clear()
            start = time.perf_counter()
            verdicts = asyncio.run(all_claims(claims[1:]))
            pipeline_s = time.perf_counter() - start
        assert all(v.label == "supported" for v in verdicts), [v.label for v in verdicts]
        raw_s = encode(seen, EMBEDDING_BATCH_SIZE)
        raw32_s = encode(seen, 32)
        start = time.perf_counter()
        on_embedding_thread(per_call)
        per_call_s = time.perf_counter() - start
        pairs.append(
            {
                "pipeline_s": pipeline_s,
                "raw_same_batch_s": raw_s,
                "raw_batch32_s": raw32_s,
                "raw_per_call_s": per_call_s,
            }
        )
    return {
        "pairs": pairs,
        "ratio": median([p["raw_same_batch_s"] / p["pipeline_s"] for p in pairs]),
        "ratio32": median([p["raw_batch32_s"] / p["pipeline_s"] for p in pairs]),
        "ratio_per_call": median([p["raw_per_call_s"] / p["pipeline_s"] for p in pairs]),
        "texts": len(seen),
        "calls": len(calls),
        "model_load_s": load_s,
        "batch": EMBEDDING_BATCH_SIZE,
        "rss_mib": ru_maxrss_mib(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--cold-claims",
        type=int,
        default=30,
        help="claims replayed cold (MiniLM on CPU: ~12 passages/s)",
    )
    parser.add_argument(
        "--cold-repeat", type=int, default=3, help="interleaved cold pairs (median ratio)"
    )
    parser.add_argument("--keep", type=Path, help="keep the generated suite here")
    args = parser.parse_args(argv)

    tmp = tempfile.TemporaryDirectory()
    root = args.keep or Path(tmp.name)
    root.mkdir(parents=True, exist_ok=True)
    site, judge = start_simulators(args.claims)
    try:
        suite = make_suite(root, site.url, args.claims)
        record_env = clean_env()
        record_env.update(
            OPENAI_API_KEY="sk-test-SECRET123",
            OPENAI_BASE_URL=judge.url + "/v1",
            CITATIONS_ALLOW_PRIVATE_HOSTS="1",
        )
        record = pytest_probe(suite, record_env, "--citations-record-mode=once")
    finally:
        site.stop()
        judge.stop()
    replay_env = clean_env()
    replay_env["CI"] = "1"
    collect, replay = [], []
    modules: dict[str, bool] = {}
    for _ in range(args.runs):
        collect.append(pytest_probe(suite, replay_env, "--collect-only")["wall"])
        result = pytest_probe(suite, replay_env)
        replay.append(result["wall"])
        modules = {m: modules.get(m, False) or v for m, v in result["modules"].items()}
    citations = 2 * args.claims
    beyond = median(replay) - median(collect)
    rate = citations / beyond
    heavy = [m for m, v in modules.items() if v]
    ok = rate >= 200 and not heavy
    print(
        bench_line(
            "replay",
            citations_per_s=round(rate, 1),
            target=">=200",
            torch_imported=modules.get("torch", False),
            heavy_modules=",".join(heavy) or "none",
            citations=citations,
            replay_s=round(median(replay), 3),
            collect_s=round(median(collect), 3),
            ok=ok,
        )
    )
    print(
        f"  record run (live simulators, MiniLM cold, {citations} citations): "
        f"{record['wall']:.1f}s wall"
    )
    print(
        f"  replay runs: {[round(x, 3) for x in replay]}  collect-only: "
        f"{[round(x, 3) for x in collect]}"
    )
    extraction = extraction_seconds()
    print(
        f"  HTML->Markdown (trafilatura) of the {len(PAGES)} pages alone: {extraction:.2f}s "
        f"= {100 * extraction / beyond:.0f}% of the replay time beyond start-up "
        "(saved on every replay by the extraction cache beside the cassettes)"
    )
    cassettes = list((suite / "cassettes").rglob("*.yaml"))
    vectors = list((suite / "cassettes").rglob("*.vec"))
    print(f"  cassettes: {len(cassettes)} yaml, {len(vectors)} cached vectors")

    n = min(args.cold_claims, args.claims)
    claims = [(fact_sentence(i), [f"{site.url}/w/{i}/0", f"{site.url}/w/{i}/1"]) for i in range(n)]
    c = cold(suite, claims, args.cold_repeat)
    ratio = c["ratio"]
    print(
        bench_line(
            "replay_cold",
            ratio=round(ratio, 3),
            target=">=0.9",
            ratio_vs_batch32=round(c["ratio32"], 3),
            claims=n,
            texts=c["texts"],
            repeat=args.cold_repeat,
            ok=ratio >= 0.9,
        )
    )
    for index, pair in enumerate(c["pairs"], 1):
        print(
            f"  pair {index}: pipeline {pair['pipeline_s']:.2f}s; raw encode batch_size="
            f"{c['batch']} (the pipeline's) {pair['raw_same_batch_s']:.2f}s -> ratio "
            f"{pair['raw_same_batch_s'] / pair['pipeline_s']:.3f}; batch_size=32 "
            f"{pair['raw_batch32_s']:.2f}s; in the pipeline's call pattern ({c['calls']} "
            f"calls, one per claim) {pair['raw_per_call_s']:.2f}s"
        )
    print(
        f"  median ratios: same batch size {ratio:.3f}, vs batch_size=32 {c['ratio32']:.3f}, "
        f"vs the per-claim call pattern {c['ratio_per_call']:.3f}; model load "
        f"{c['model_load_s']:.1f}s; peak RSS with the model loaded {c['rss_mib']:.0f} MiB"
    )
    tmp.cleanup()
    return 0 if ok and ratio >= 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())
