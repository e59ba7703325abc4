"""Live concurrency: wall time of a batch vs the ideal N/c x per-citation latency.

The website simulator answers every page after ``--page-ms`` and the OpenAI
simulator every judgement after ``--judge-ms`` (scripted verdicts: fixtures, not
a model). N citations (distinct pages) run through ``batch.run_batch`` at each
concurrency c with FakeEmbedder (so CPU does not dominate). Ideal wall time =
ceil(N/c) x (page + judge latency). Target: measured <= 1.25 x ideal.

With ``--what-if-shared-ssl`` it also runs with one shared ``ssl.SSLContext``
(the fix proposed in docs/performance.md), clearly labelled as a what-if.

Summary line: ``BENCH concurrency worst_ratio=... target<=1.25 c1=... c4=... c16=...``
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import io
import json
import math
import sys
import tempfile
import time
from pathlib import Path

from _common import article_html, bench_line, fact_sentence, filler_paragraph


def run_once(n: int, c: int, page_s: float, judge_s: float, tag: str) -> float:
    from fakes import FakeEmbedder
    from simulators.openai import OpenAIHandler
    from simulators.scripted import FAKE_KEY, JudgeSimulator, Verdict
    from simulators.website import Route, start_website

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
    site = start_website(routes)
    site._server.socket.listen(256)

    def script(claim: str, passages: list[str]) -> Verdict:
        time.sleep(judge_s)
        return Verdict("supported", claim, 0.95)

    judge = JudgeSimulator(OpenAIHandler).start()
    judge._server.socket.listen(256)
    judge.brain.script = script
    try:
        with tempfile.TemporaryDirectory() as tmp:
            source = Path(tmp) / "in.jsonl"
            source.write_text(
                "\n".join(
                    json.dumps({**r, "urls": [site.url + u for u in r["urls"]]}) for r in records
                ),
                encoding="utf-8",
            )
            settings = Settings(
                openai_api_key=FAKE_KEY,
                openai_base_url=judge.url + "/v1",
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
        site.stop()
        judge.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=64)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--page-ms", type=float, default=200)
    parser.add_argument("--judge-ms", type=float, default=300)
    parser.add_argument("--what-if-shared-ssl", action="store_true")
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
    if args.what_if_shared_ssl:
        from httpx._transports import default

        default.create_ssl_context = functools.lru_cache(maxsize=8)(default.create_ssl_context)
        print("  WHAT-IF (not the shipped code): one shared ssl.SSLContext per configuration")
        for c in args.concurrency:
            ideal = math.ceil(args.n / c) * latency
            wall = run_once(args.n, c, args.page_ms / 1000, args.judge_ms / 1000, f"s{c}")
            print(f"  c={c:>2}: wall {wall:6.2f}s  ideal {ideal:6.2f}s  ratio {wall / ideal:.3f}")
    return 0 if worst <= 1.25 else 1


if __name__ == "__main__":
    sys.exit(main())
