"""Build tests/data/wice_subset.jsonl from the WiCE claim-level dev split (reproducible).

60 claims, 20 per label (supported / partially_supported / not_supported), drawn
with a fixed seed among claims whose page has at most 400 sentences. Evidence is
trimmed to at most 30 sentences: the title line, every gold supporting sentence,
one neighbour each side, then random distractors from the same page, in page
order; ``supporting_sentences`` is remapped to the trimmed list. Annotations are
ODC-BY 1.0 (WiCE, Kamoi et al. 2023); see tests/data/wice_subset.README.md.

    python benchmarks/make_wice_subset.py [--source PATH] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

SOURCE = Path("/work/shared/data/wice/entailment_retrieval/claim/dev.jsonl")
OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "wice_subset.jsonl"
PER_LABEL = 20
MAX_SENTENCES = 30
SEED = 6


def trim(row: dict, rng: random.Random) -> dict:
    evidence = row["evidence"]
    gold = {i for group in row["supporting_sentences"] for i in group if i < len(evidence)}
    keep = {0} | gold | {j for i in gold for j in (i - 1, i + 1) if 0 <= j < len(evidence)}
    keep = set(sorted(keep, key=lambda i: (i not in gold and i != 0, i))[:MAX_SENTENCES])
    others = [i for i in range(len(evidence)) if i not in keep]
    rng.shuffle(others)
    keep |= set(others[: max(0, MAX_SENTENCES - len(keep))])
    order = sorted(keep)
    index = {old: new for new, old in enumerate(order)}
    return {
        "id": row["meta"]["id"],
        "label": row["label"],
        "claim": row["claim"],
        "evidence": [evidence[i] for i in order],
        "supporting_sentences": [
            [index[i] for i in group if i in index] for group in row["supporting_sentences"]
        ],
        "meta": {"claim_title": row["meta"].get("claim_title"), "source": "WiCE dev (claim)"},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=SOURCE)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    rows = [json.loads(line) for line in args.source.read_text(encoding="utf-8").splitlines()]
    rng = random.Random(SEED)
    chosen = []
    for label in ("supported", "partially_supported", "not_supported"):
        pool = [r for r in rows if r["label"] == label and len(r["evidence"]) <= 400]
        pool.sort(key=lambda r: r["meta"]["id"])
        chosen += [trim(r, rng) for r in rng.sample(pool, PER_LABEL)]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as handle:
        for item in chosen:
            handle.write(json.dumps(item, ensure_ascii=False) + "\n")
    print(f"wrote {len(chosen)} claims to {args.out}")


if __name__ == "__main__":
    main()
