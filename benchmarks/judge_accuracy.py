"""Judge accuracy on WiCE: retrieve -> judge -> guard, against human labels.

Reads WiCE-format JSON lines (default: the 60-claim subset shipped in
tests/data/wice_subset.jsonl; ``--data /work/shared/data/wice/entailment_retrieval/claim/dev.jsonl``
for the full 349-claim dev split). For each claim, the cited page's sentences
become the page text (one paragraph per sentence), which is split into passages
(``split_passages``), ranked (``top_k``, MiniLM by default) and the top-k go to:

* the **baseline** (no model): lexical recall of the claim's content words in the
  retrieved passages; ``supported`` when at least ``--threshold`` (0.7, fixed in
  advance) of them occur, else ``not_found``;
* the **judge** (``--judge configured``): the provider in the environment
  (``JUDGE_PROVIDER``, ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL`` for any
  OpenAI-compatible server, ``ANTHROPIC_API_KEY``, ``OLLAMA_HOST``), then the
  deterministic guard (``guard_judgement``), counting how often the guard
  downgraded the judge (quote not in the passages);
* ``--judge scripted``: the OpenAI *simulator* with a scripted rule, to prove
  the plumbing end to end. Its numbers are NOT A MEASUREMENT OF ANY MODEL.

Label mapping (WiCE has no "contradicted"): gold ``supported`` is the positive
class; ``partially_supported`` and ``not_supported`` are negatives (a claim only
partly backed by its citation must not pass as supported). Predicted positive =
``supported``; ``contradicted``, ``not_found`` and ``judge_error`` are negatives.
Balanced accuracy = (TPR + TNR) / 2 (0.5 = chance). ``lenient`` also counts
``partially_supported`` as positive. The confusion matrix shows all three gold
labels against our labels.

Summary lines: ``BENCH judge_accuracy system=baseline balanced_accuracy=...`` and one
per judge run (``system=scripted-simulator`` is labelled ``not_a_model=True``).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

from _common import ROOT, bench_line

DEFAULT_DATA = ROOT / "tests" / "data" / "wice_subset.jsonl"
GOLD = ("supported", "partially_supported", "not_supported")
PREDICTED = ("supported", "contradicted", "not_found", "judge_error")
STOPWORDS = set(
    [
        "a",
        "an",
        "the",
        "of",
        "in",
        "on",
        "at",
        "to",
        "for",
        "from",
        "by",
        "with",
        "and",
        "or",
        "but",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "as",
        "that",
        "this",
        "these",
        "those",
        "it",
        "its",
        "he",
        "she",
        "they",
        "his",
        "her",
        "their",
        "them",
        "who",
        "whom",
        "which",
        "what",
        "when",
        "where",
        "how",
        "also",
        "has",
        "have",
        "had",
        "not",
        "no",
        "into",
        "than",
        "then",
        "over",
        "after",
        "before",
        "during",
        "about",
        "s",
    ]
)
_WORD = re.compile(r"[a-z0-9]+")


def content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in STOPWORDS}


def lexical_recall(claim: str, passages: list[str]) -> float:
    wanted = content_words(claim)
    if not wanted:
        return 0.0
    have = set().union(*(content_words(p) for p in passages)) if passages else set()
    return len(wanted & have) / len(wanted)


def metrics(rows: list[tuple[str, str]]) -> dict:
    """Balanced accuracy (strict and lenient) and the confusion matrix."""
    matrix = Counter(rows)

    def balanced(positive: set[str]) -> float:
        tp = sum(n for (g, p), n in matrix.items() if g in positive and p == "supported")
        fn = sum(n for (g, p), n in matrix.items() if g in positive and p != "supported")
        tn = sum(n for (g, p), n in matrix.items() if g not in positive and p != "supported")
        fp = sum(n for (g, p), n in matrix.items() if g not in positive and p == "supported")
        tpr = tp / (tp + fn) if tp + fn else 0.0
        tnr = tn / (tn + fp) if tn + fp else 0.0
        return (tpr + tnr) / 2

    return {
        "strict": balanced({"supported"}),
        "lenient": balanced({"supported", "partially_supported"}),
        "matrix": matrix,
    }


def print_matrix(matrix: Counter) -> None:
    print("    gold \\ ours           " + "".join(f"{p:>14}" for p in PREDICTED))
    for g in GOLD:
        print(f"    {g:<22}" + "".join(f"{matrix.get((g, p), 0):>14}" for p in PREDICTED))


def load(path: Path, limit: int | None) -> list[dict]:
    items = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return items[:limit] if limit else items


def make_embedder(kind: str):
    if kind == "fake":
        sys.path.insert(0, str(ROOT / "tests"))
        from fakes import FakeEmbedder

        return FakeEmbedder()
    from pytest_citations.retrieval import MiniLMEmbedder

    return MiniLMEmbedder()


def retrieve(items: list[dict], embedder, top_k: int, max_words: int) -> list[list[str]]:
    from pytest_citations.passages import split_passages
    from pytest_citations.retrieval import top_k as rank

    out = []
    for item in items:
        text = "\n\n".join(item["evidence"])
        passages = split_passages(text, max_words)
        out.append([p for _, p, _ in rank(item["claim"], passages, embedder, top_k)])
    return out


async def judge_all(items, evidence, settings, concurrency: int):
    """(our label per item, guard downgrades, judge errors) through judge + guard."""
    from pytest_citations.guard import guard_judgement
    from pytest_citations.judge import JudgeError, make_judge
    from pytest_citations.transport import LiveTransport, client_for

    judge = make_judge(settings)
    semaphore = asyncio.Semaphore(concurrency)
    labels: list[str] = [""] * len(items)
    downgrades = 0
    errors = 0

    async def one(index: int) -> None:
        nonlocal downgrades, errors
        async with semaphore:
            transport = LiveTransport(allow_private_hosts=True)
            async with client_for(transport, timeout=settings.timeout) as client:
                try:
                    judgement = await judge.judge(client, items[index]["claim"], evidence[index])
                except JudgeError:
                    errors += 1
                    labels[index] = "judge_error"
                    return
        label, _, _, _ = guard_judgement(
            judgement.label, judgement.evidence_quote, judgement.confidence, evidence[index]
        )
        label = getattr(label, "value", label)
        if label != judgement.label:
            downgrades += 1
        labels[index] = label

    await asyncio.gather(*(one(i) for i in range(len(items))))
    return labels, downgrades, errors


def scripted_simulator():
    """The OpenAI simulator with a lexical rule and a foreign quote for ~1 claim in 7.

    FIXTURE, NOT A MODEL: it exists to show the request, the guard and the metric
    plumbing working end to end. Which claims get the foreign quote depends on the
    claim's text, not on the order concurrent requests arrive in, so every run
    prints the same figures.
    """
    sys.path.insert(0, str(ROOT / "tests"))
    from simulators.openai import OpenAIHandler
    from simulators.scripted import JudgeSimulator, Verdict

    def script(claim: str, passages: list[str]) -> Verdict:
        if int(hashlib.sha256(claim.encode("utf-8")).hexdigest()[:8], 16) % 7 == 0:
            return Verdict("supported", "a sentence that is on no page", 0.9)
        if not passages:
            return Verdict("not_found", None, 0.2)
        best = max(passages, key=lambda p: lexical_recall(claim, [p]))
        score = lexical_recall(claim, [best])
        if score >= 0.6:
            return Verdict("supported", " ".join(best.split()[:12]), round(score, 2))
        return Verdict("not_found", None, round(score, 2))

    sim = JudgeSimulator(OpenAIHandler).start()
    sim.brain.script = script
    return sim


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--limit", type=int)
    parser.add_argument("--embedder", choices=("minilm", "fake"), default="minilm")
    parser.add_argument("--judge", choices=("none", "configured", "scripted"), default="none")
    parser.add_argument("--threshold", type=float, default=0.7)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args(argv)

    from pytest_citations.settings import Settings

    items = load(args.data, args.limit)
    settings = Settings.from_env()
    start = time.perf_counter()
    evidence = retrieve(items, make_embedder(args.embedder), settings.top_k, settings.max_words)
    retrieval_s = time.perf_counter() - start
    gold = [item["label"] for item in items]
    print(
        f"data: {args.data} ({len(items)} claims: {dict(Counter(gold))}); retrieval: "
        f"{args.embedder}, top_k={settings.top_k}, {retrieval_s:.1f}s"
    )

    baseline = [
        "supported" if lexical_recall(item["claim"], ev) >= args.threshold else "not_found"
        for item, ev in zip(items, evidence, strict=True)
    ]
    m = metrics(list(zip(gold, baseline, strict=True)))
    print(
        bench_line(
            "judge_accuracy",
            system="baseline-lexical",
            data=args.data.name,
            n=len(items),
            balanced_accuracy=round(m["strict"], 3),
            lenient=round(m["lenient"], 3),
            threshold=args.threshold,
        )
    )
    print_matrix(m["matrix"])

    if args.judge == "none":
        return 0
    sim = None
    if args.judge == "scripted":
        sim = scripted_simulator()
        settings = Settings(
            judge_provider="openai",
            openai_api_key="sk-test-SECRET123",
            openai_base_url=sim.url + "/v1",
            retries=0,
        )
        system, note = "scripted-simulator", {"not_a_model": True}
    else:
        system, note = f"{settings.judge_provider}:{settings.model}", {}
    try:
        start = time.perf_counter()
        labels, downgrades, errors = asyncio.run(
            judge_all(items, evidence, settings, args.concurrency)
        )
        judge_s = time.perf_counter() - start
    finally:
        if sim is not None:
            sim.stop()
    m = metrics(list(zip(gold, labels, strict=True)))
    print(
        bench_line(
            "judge_accuracy",
            system=system,
            data=args.data.name,
            n=len(items),
            balanced_accuracy=round(m["strict"], 3),
            lenient=round(m["lenient"], 3),
            guard_downgrades=downgrades,
            judge_errors=errors,
            **note,
        )
    )
    if sim is not None:
        print(
            "  PLUMBING ONLY: verdicts came from a scripted simulator rule, not from a "
            "model; these numbers measure nothing about any judge."
        )
    print(
        f"  judge time {judge_s:.1f}s; guard downgraded {downgrades}/{len(items)} "
        f"({100 * downgrades / max(1, len(items)):.0f}%) judgements (quote not in passages)"
    )
    print_matrix(m["matrix"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
