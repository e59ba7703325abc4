"""Print seed 003's table from a pytest-citations JSON report.

    pytest examples/rfc7519 --citations-report=report.json
    python examples/rfc7519/table.py report.json

Rows follow ``citations.json``; each is the first verdict in the report whose
claim, quote and section match the citation (a report of ``pytest examples``
works too). Our labels map to the seed's vocabulary: supported → verified
(relation "supports"), contradicted → contradicted ("contradicts"), not_found →
unsupported ("says_nothing"), fabricated → fabricated (no model asked, so no
relation and no confidence). "action" is ``review`` when the verdict's
confidence is below the auto-accept gate (0.8), else ``auto``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

RELATION = {"supported": "supports", "contradicted": "contradicts", "not_found": "says_nothing"}
VERDICT = {
    "supported": "verified",
    "contradicted": "contradicted",
    "not_found": "unsupported",
    "fabricated": "fabricated",
    "unreachable": "unreachable",
}


def _key(claim: str, quote: str | None, section: str | None) -> tuple[str, str, str]:
    return (" ".join(claim.split()), quote or "", section or "")


def rows(report: dict[str, Any], citations: list[dict[str, Any]]) -> list[str]:
    """The table's lines: a header, then one row per citation of ``citations``."""
    verdicts: dict[tuple[str, str, str], dict[str, Any]] = {}
    for test in report.get("tests", []):
        for claim in test.get("claims", []):
            for verdict in claim.get("citations", []):
                key = _key(claim["claim"], verdict.get("quote"), verdict.get("section"))
                verdicts.setdefault(key, verdict)
    lines = [
        f"{'citation':<18}{'quote':<14}{'relation':<14}{'conf':>6}  {'verdict':<13}{'action':>7}"
    ]
    for citation in citations:
        verdict = verdicts.get(_key(citation["claim"], citation["quote"], citation["section"]))
        if verdict is None:
            raise SystemExit(f"the report has no verdict for citation {citation['id']!r}")
        label = verdict["label"]
        if citation["quote"] is None:
            status = "section-only"
        else:
            status = "missing" if label == "fabricated" else "found"
        relation = RELATION.get(label, "-")
        confidence = verdict.get("confidence")
        conf = "-" if confidence is None else f"{confidence:.2f}"
        action = "review" if verdict.get("needs_review") else "auto"
        lines.append(
            f"{citation['id']:<18}{status:<14}{relation:<14}{conf:>6}"
            f"  {VERDICT.get(label, label):<13}{action:>7}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (1, 2):
        print("usage: python examples/rfc7519/table.py REPORT.json [CITATIONS.json]")
        return 2
    report = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    citations_path = Path(args[1]) if len(args) == 2 else HERE / "citations.json"
    citations = json.loads(citations_path.read_text(encoding="utf-8"))
    print("\n".join(rows(report, citations)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
