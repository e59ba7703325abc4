"""Live concurrency: wall time of a batch vs the ideal N/c x per-citation latency.

The website simulator answers every page after ``--page-ms`` and the OpenAI
simulator every judgement after ``--judge-ms`` (scripted verdicts: fixtures, not
a model). N citations (distinct pages) run through ``batch.run_batch`` at each
concurrency c with FakeEmbedder (so CPU does not dominate). Ideal wall time =
ceil(N/c) x (page + judge latency). Target: measured <= 1.25 x ideal, the
median of ``--repeat`` timed batches (this machine is shared and noisy).

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

from _common import article_html, bench_line, fact_sentence, filler_paragraph, median


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


def run_once(
    n: int, c: int, page_s: float, judge_s: float, tag: str, repeat: int
) -> tuple[float, list[tuple[float, float]]]:
    """``repeat`` batches of ``n`` citations at concurrency ``c``.

    Returns the warm-up's wall seconds and, per timed batch, (wall seconds, CPU
    seconds of this process). The simulators run in another process, as real
    servers would, so their CPU does not share our interpreter. A one-citation
    batch runs first, untimed by the ratio: it pays the process's one-off imports
    (trafilatura, the judge and audit code), which the first wave of a concurrent
    batch would otherwise wait for together, a start-up cost rather than a
    concurrency overhead. Every batch has pages of its own and a fresh Verifier,
    so no batch is served from another's page cache.
    """
    from fakes import FakeEmbedder
    from simulators.scripted import FAKE_KEY
    from simulators.website import Route

    from pytest_citations.batch import BatchOptions, run_batch
    from pytest_citations.pipeline import Verifier
    from pytest_citations.settings import Settings
    from pytest_citations.transport import LiveRecorder

    routes = {}
    batches: list[list[dict]] = []
    for r in range(repeat + 1):  # batch 0 is the warm-up
        records = []
        for i in range(1 if r == 0 else n):
            path = f"/{tag}/{r}/{i}"
            html = article_html(f"Widget {i}", [fact_sentence(i), filler_paragraph(str(i), 120)])
            routes[path] = Route(body=html.encode(), delay=page_s)
            records.append({"id": f"{tag}-{r}-{i}", "claim": fact_sentence(i), "urls": [path]})
        batches.append(records)
    parent, child = multiprocessing.get_context("fork").Pipe()
    server = multiprocessing.get_context("fork").Process(
        target=_serve, args=(routes, judge_s, child), daemon=True
    )
    server.start()
    try:
        site_url, judge_url = parent.recv()
        settings = Settings(
            openai_api_key=FAKE_KEY,
            openai_base_url=judge_url + "/v1",
            fetcher="direct",
            allow_private_hosts=True,
        )

        def batch(batch_records: list[dict]) -> tuple[float, float]:
            verifier = Verifier(
                settings, embedder=FakeEmbedder(), recorder=LiveRecorder(allow_private_hosts=True)
            )
            with tempfile.TemporaryDirectory() as tmp:
                source = Path(tmp) / "in.jsonl"
                source.write_text(
                    "\n".join(
                        json.dumps({**r, "urls": [site_url + u for u in r["urls"]]})
                        for r in batch_records
                    ),
                    encoding="utf-8",
                )
                options = BatchOptions(
                    input=source,
                    out=Path(tmp) / "out.csv",
                    concurrency=c,
                    audit=Path(tmp) / "audit.sqlite3",
                )
                start, cpu_start = time.perf_counter(), time.process_time()
                result = asyncio.run(run_batch(options, verifier, stderr=io.StringIO()))
                wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
            labels = {row.verdict.label.value for row in result.rows if row.verdict}
            assert labels == {"supported"} and not result.errors, labels
            return wall, cpu

        warm_up = batch(batches[0])[0]
        return warm_up, [batch(records) for records in batches[1:]]
    finally:
        server.terminate()
        server.join(timeout=5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=64)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--page-ms", type=float, default=200)
    parser.add_argument("--judge-ms", type=float, default=300)
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="timed batches per concurrency; the median ratio is reported (c=1 takes "
        "N x 0.5 s each)",
    )
    args = parser.parse_args(argv)
    latency = (args.page_ms + args.judge_ms) / 1000
    ratios: dict[int, list[float]] = {}
    details: list[str] = []
    for c in args.concurrency:
        ideal = math.ceil(args.n / c) * latency
        warm_up, runs = run_once(
            args.n, c, args.page_ms / 1000, args.judge_ms / 1000, f"c{c}", args.repeat
        )
        ratios[c] = [wall / ideal for wall, _ in runs]
        details.append(
            f"  c={c:>2}: ideal {ideal:6.2f}s  walls {[round(w, 2) for w, _ in runs]}  "
            f"ratios {[round(x, 3) for x in ratios[c]]}  median {median(ratios[c]):.3f}  "
            f"pipeline CPU {1000 * median([cpu for _, cpu in runs]) / args.n:.1f} ms/citation  "
            f"(untimed one-citation warm-up: {warm_up:.2f}s, ideal {latency:.2f}s)"
        )
    medians = {c: median(values) for c, values in ratios.items()}
    worst = max(medians.values())
    print(
        bench_line(
            "concurrency",
            worst_ratio=round(worst, 3),
            target="<=1.25",
            **{f"c{c}": round(value, 3) for c, value in medians.items()},
            n=args.n,
            page_ms=args.page_ms,
            judge_ms=args.judge_ms,
            repeat=args.repeat,
            ok=worst <= 1.25,
        )
    )
    print("\n".join(details))
    return 0 if worst <= 1.25 else 1


if __name__ == "__main__":
    sys.exit(main())
