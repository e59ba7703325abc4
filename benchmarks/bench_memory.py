"""Peak RSS of a 1,000-citation batch replayed from cassettes.

Records the batch once (``citations batch --record-mode once``) against the
website and OpenAI simulators (scripted: fixtures, not a model), then replays it
(``--record-mode none``, no keys) in a fresh process and reports that process's
peak RSS (``ru_maxrss``). Embeddings come from FakeEmbedder (``tests/fakes.py``):
with MiniLM loaded add the model's ~0.5 GiB (see bench_replay's cold line).
Pages are ~8 KB of HTML each, 500 distinct pages, each cited twice.

Summary line: ``BENCH memory peak_rss_mib=... target<1024 citations=1000``
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from _common import (
    PYTHON,
    TESTS,
    article_html,
    bench_line,
    clean_env,
    fact_sentence,
    filler_paragraph,
    run,
)

DRIVER = """
import functools, resource, sys
from httpx._transports import default
# Setup speed only (recording): one SSL context instead of one per page (see docs).
default.create_ssl_context = functools.lru_cache(maxsize=8)(default.create_ssl_context)
from fakes import main
code = main()
print("@@RSS_MIB@@%.1f" % (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
      file=sys.stderr)
sys.exit(code)
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--citations", type=int, default=1000)
    args = parser.parse_args(argv)

    from simulators.openai import OpenAIHandler
    from simulators.scripted import FAKE_KEY, JudgeSimulator, Verdict
    from simulators.website import Route, start_website

    claims = args.citations // 2
    pages = max(1, claims)
    routes = {}
    for p in range(pages):
        paragraphs = [fact_sentence(p)] + [filler_paragraph(f"{p}-{k}", 180) for k in range(5)]
        routes[f"/m/{p}"] = Route(body=article_html(f"Widget {p}", paragraphs).encode())
    records = [
        {
            "id": f"m{i}",
            "claim": fact_sentence(i),
            "urls": [f"/m/{i % pages}", f"/m/{(i + 1) % pages}"],
        }
        for i in range(claims)
    ]

    def script(claim: str, passages: list[str]) -> Verdict:
        if any(claim in p for p in passages):
            return Verdict("supported", claim, 0.95)
        return Verdict("not_found", None, 0.3)

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        site = start_website(routes)
        judge = JudgeSimulator(OpenAIHandler).start()
        judge.brain.script = script
        for sim in (site, judge):
            sim._server.socket.listen(256)
        source = root / "in.jsonl"
        source.write_text(
            "\n".join(
                json.dumps({**r, "urls": [site.url + u for u in r["urls"]]}) for r in records
            ),
            encoding="utf-8",
        )
        env = clean_env()
        env["PYTHONPATH"] = str(TESTS)
        base = [
            PYTHON,
            "-c",
            DRIVER,
            "batch",
            str(source),
            "--cassette-dir",
            str(root / "cassettes"),
            "--no-audit",
            "--concurrency",
            "8",
        ]
        try:
            record_env = dict(
                env,
                OPENAI_API_KEY=FAKE_KEY,
                OPENAI_BASE_URL=judge.url + "/v1",
                CITATIONS_FETCHER="direct",
                CITATIONS_ALLOW_PRIVATE_HOSTS="1",
            )
            rec_s, rec = run(
                [*base, "--record-mode", "once", "--out", str(root / "rec.csv")], env=record_env
            )
        finally:
            site.stop()
            judge.stop()
        if rec.returncode != 0:
            raise SystemExit(f"recording failed ({rec.returncode}): {rec.stderr[-2000:]}")
        replay_env = dict(env, CITATIONS_FETCHER="direct")
        rep_s, rep = run(
            [*base, "--record-mode", "none", "--out", str(root / "rep.csv")], env=replay_env
        )
        if rep.returncode != 0:
            raise SystemExit(f"replay failed ({rep.returncode}): {rep.stderr[-2000:]}")
        rss = float(next(x for x in rep.stderr.splitlines() if x.startswith("@@RSS_MIB@@"))[11:])
        rec_rss = float(
            next(x for x in rec.stderr.splitlines() if x.startswith("@@RSS_MIB@@"))[11:]
        )
        rows = (root / "rep.csv").read_text(encoding="utf-8").count("\n") - 1
        cassettes = sum(1 for _ in (root / "cassettes").rglob("*.yaml"))
    print(
        bench_line(
            "memory",
            peak_rss_mib=round(rss, 1),
            target="<1024",
            citations=args.citations,
            ok=rss < 1024 and rows == args.citations,
        )
    )
    print(
        f"  replay: {rep_s:.1f}s wall, {rows} report rows, {cassettes} cassettes; "
        f"stdout {rep.stdout.strip()!r}"
    )
    print(f"  recording run: {rec_s:.1f}s wall, peak RSS {rec_rss:.0f} MiB")
    return 0 if rss < 1024 else 1


if __name__ == "__main__":
    sys.exit(main())
