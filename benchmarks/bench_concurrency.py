"""Live concurrency: wall time of a batch vs the ideal N/c x per-citation latency.

The website simulator answers every page after ``--page-ms`` and the OpenAI
simulator every judgement after ``--judge-ms`` (scripted verdicts: fixtures, not
a model). N citations (distinct pages) run through ``batch.run_batch`` at each
concurrency c with FakeEmbedder (so CPU does not dominate). Ideal wall time =
ceil(N/c) x (page + judge latency). Target: measured <= 1.25 x ideal.

The simulators run in a child process, as remote servers would: in this
process their request handling would compete with the pipeline for the GIL.

Summary line: ``BENCH concurrency worst_ratio=... target<=1.25 c1=... c4=... c16=...``
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import math
import multiprocessing
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

from _common import article_html, bench_line, fact_sentence, filler_paragraph


def _serve(routes: dict, judge_s: float, urls: Connection) -> None:  # type: ignore[type-arg]
    """The child process: both simulators, until the parent terminates it."""
    from simulators.openai import OpenAIHandler
    from simulators.scripted import JudgeSimulator, Verdict
    from simulators.website import start_website

    def script(claim: str, passages: list[str]) -> Verdict:
        time.sleep(judge_s)
        return Verdict("supported", claim, 0.95)

    site = start_website(routes)
    judge = JudgeSimulator(OpenAIHandler).start()
    judge.brain.script = script
    urls.send((site.url, judge.url))
    threading.Event().wait()


def run_once(n: int, c: int, page_s: float, judge_s: float, tag: str) -> float:
    """One batch of ``n`` citations at concurrency ``c``; the simulators run in another
    process, as real servers would, so their CPU does not share our interpreter."""
    from fakes import FakeEmbedder
    from simulators.scripted import FAKE_KEY
    from simulators.website import Route

    from pytest_citations.batch import BatchOptions, run_batch
    from pytest_citations.pipeline import Verifier
    from pytest_citations.settings import Settings
    from pytest_citations.transport import LiveRecorder

    routes = {}
    records = []
    for i in range(n):
        path = f"/{tag}/{i}"
        html = article_html(f"Widget {i}", [fact_sentence(i), filler_paragraph(str(i), 120)])
        routes[path] = Route(body=html.encode(), delay=page_s)
        records.append({"id": f"{tag}{i}", "claim": fact_sentence(i), "urls": [path]})
    parent, child = multiprocessing.get_context("fork").Pipe()
    server = multiprocessing.get_context("fork").Process(
        target=_serve, args=(routes, judge_s, child), daemon=True
    )
    server.start()
    try:
        site_url, judge_url = parent.recv()
        with tempfile.TemporaryDirectory() as tmp:
            source = Path(tmp) / "in.jsonl"
            source.write_text(
                "\n".join(
                    json.dumps({**r, "urls": [site_url + u for u in r["urls"]]}) for r in records
                ),
                encoding="utf-8",
            )
            settings = Settings(
                openai_api_key=FAKE_KEY,
                openai_base_url=judge_url + "/v1",
                fetcher="direct",
                allow_private_hosts=True,
            )
            verifier = Verifier(
                settings, embedder=FakeEmbedder(), recorder=LiveRecorder(allow_private_hosts=True)
            )
            options = BatchOptions(
                input=source,
                out=Path(tmp) / "out.csv",
                concurrency=c,
                audit=Path(tmp) / "audit.sqlite3",
            )
            start = time.perf_counter()
            result = asyncio.run(run_batch(options, verifier, stderr=io.StringIO()))
            wall = time.perf_counter() - start
        labels = {row.verdict.label.value for row in result.rows if row.verdict}
        assert labels == {"supported"} and not result.errors, labels
        return wall
    finally:
        server.terminate()
        server.join(timeout=5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=64)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--page-ms", type=float, default=200)
    parser.add_argument("--judge-ms", type=float, default=300)
    args = parser.parse_args(argv)
    latency = (args.page_ms + args.judge_ms) / 1000
    results: dict[int, tuple[float, float]] = {}
    for c in args.concurrency:
        ideal = math.ceil(args.n / c) * latency
        wall = run_once(args.n, c, args.page_ms / 1000, args.judge_ms / 1000, f"c{c}")
        results[c] = (wall, wall / ideal)
    worst = max(ratio for _, ratio in results.values())
    fields = {f"c{c}": round(ratio, 3) for c, (_, ratio) in results.items()}
    print(
        bench_line(
            "concurrency",
            worst_ratio=round(worst, 3),
            target="<=1.25",
            **fields,
            n=args.n,
            page_ms=args.page_ms,
            judge_ms=args.judge_ms,
            ok=worst <= 1.25,
        )
    )
    for c, (wall, ratio) in results.items():
        ideal = math.ceil(args.n / c) * latency
        print(f"  c={c:>2}: wall {wall:6.2f}s  ideal {ideal:6.2f}s  ratio {ratio:.3f}")
    return 0 if worst <= 1.25 else 1


if __name__ == "__main__":
    sys.exit(main())
