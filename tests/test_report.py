"""Tables, the marker gate, the JSON report and the baseline diff, as pure functions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_citations.models import CitationVerdict, ClaimVerdict, Label
from pytest_citations.report import (
    MarkerGate,
    SessionCitations,
    citation_table,
    compare_with_baseline,
    decode_test_property,
    encode_test_property,
    explain_comparison,
    load_report,
    parse_marker,
)


def _c(url: str, label: str, **kw: object) -> CitationVerdict:
    return CitationVerdict(url=url, label=Label(label), **kw)  # type: ignore[arg-type]


SUPPORTED = _c(
    "https://a.example/x", "supported", evidence_quote="Water boils at 100 °C.", confidence=0.95
)
CONTRADICTED = _c(
    "https://b.example/y", "contradicted", evidence_quote="It boils at 90.", confidence=0.9
)
DEAD = _c("https://c.example/z", "unreachable", reason="http_404", confidence=1.0)
FABRICATED = _c(
    "https://d.example/q", "fabricated", reason="quote_not_in_source", quote="invented words"
)
REVIEW = _c("https://e.example/r", "not_found", confidence=0.4, needs_review=True)


def _claim(
    *citations: CitationVerdict, label: str = "supported", text: str = "Water boils."
) -> ClaimVerdict:
    return ClaimVerdict(claim=text, label=Label(label), citations=list(citations))


def test_citation_table_has_one_aligned_row_per_citation() -> None:
    table = citation_table([SUPPORTED, DEAD, FABRICATED, REVIEW])
    lines = table.splitlines()
    assert lines[0].split() == ["label", "conf", "reason", "url", "evidence"]
    assert len(lines) == 5
    assert lines[1].startswith("supported") and '"Water boils at 100 °C."' in lines[1]
    assert "0.95" in lines[1]
    assert "http_404" in lines[2] and "https://c.example/z" in lines[2]
    assert 'quote not in source: "invented words"' in lines[3] and " -  " in lines[3]
    assert lines[4].startswith("not_found (review)")
    assert len({line.index("https://") for line in lines[1:]}) == 1  # the URL column aligns


def test_citation_table_cuts_long_quotes_and_handles_no_citations() -> None:
    long = _c("https://a.example", "supported", evidence_quote="word " * 200, confidence=1.0)
    assert "…" in citation_table([long])
    assert citation_table([]) == "(no citations)"


def test_claim_verdict_table_uses_the_citation_table() -> None:
    claim = _claim(SUPPORTED, DEAD)
    assert claim.table() == citation_table(claim.citations)


def test_explain_comparison_starts_with_the_labels_and_the_claim() -> None:
    lines = explain_comparison(_claim(CONTRADICTED, label="contradicted"), "==", "supported")
    assert lines[0] == "claim verdict 'contradicted' == 'supported'"
    assert lines[1] == "claim: 'Water boils.'"
    assert "It boils at 90." in lines[3]


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((0.5,), {}, "keyword arguments only"),
        ((), {"flor": 0.5}, "unknown argument(s) flor"),
        ((), {"floor": 1.5}, "must be in [0, 1]"),
        ((), {"floor": "high"}, "must be a number"),
        ((), {"floor": True}, "must be a number"),
        ((), {"fail_on": ("contradicted", "wrong")}, "unknown label(s) 'wrong'"),
        ((), {"reachable_only": "yes"}, "True or False"),
    ],
)
def test_parse_marker_rejects_bad_arguments(
    args: tuple[object, ...], kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(
        ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
    ):
        parse_marker(args, kwargs)


def test_parse_marker_defaults_and_single_label() -> None:
    assert parse_marker((), {}) == MarkerGate(None, ("contradicted", "fabricated"), False)
    assert parse_marker((), {"fail_on": "unreachable", "floor": 1}).fail_on == ("unreachable",)


def test_gate_fails_on_labels_with_evidence() -> None:
    message = MarkerGate().failures(
        [_claim(SUPPORTED, CONTRADICTED, FABRICATED, label="contradicted")]
    )
    assert message is not None
    assert "2 citation(s) labelled contradicted, fabricated" in message
    assert "evidence: 'It boils at 90.'" in message
    assert "quote:    'invented words'" in message
    assert MarkerGate(fail_on=()).failures([_claim(CONTRADICTED)]) is None


def test_gate_floor_and_reachable_only() -> None:
    verdicts = [_claim(SUPPORTED, DEAD)]
    message = MarkerGate(floor=0.6).failures(verdicts)
    assert (
        message is not None and "citation_precision=0.5000 (1/2) is below the floor 0.6" in message
    )
    assert MarkerGate(floor=0.6, reachable_only=True).failures(verdicts) is None
    assert MarkerGate(floor=0.5).failures(verdicts) is None
    empty = MarkerGate(floor=0.5).failures([])
    assert empty is not None and "n/a" in empty


def _session() -> SessionCitations:
    session = SessionCitations()
    session.add("t.py::a", [_claim(SUPPORTED, DEAD)], {"replayed": 3, "live": 0})
    session.add(
        "t.py::b", [_claim(CONTRADICTED, FABRICATED, REVIEW, label="contradicted")], {"live": 2}
    )
    return session


def test_summary_lines_use_the_seed_format() -> None:
    lines = _session().summary_lines()
    assert "citation_precision=0.2000 (1/5)" in lines
    assert "reachable_precision=0.2500 (1/4)" in lines
    assert "requests: replayed=3 live=2" in lines
    text = "\n".join(lines)
    assert "contradicted:" in text and "fabricated:" in text and "needs_review:" in text


def test_report_json_round_trips_through_the_property() -> None:
    claims = [_claim(SUPPORTED, DEAD)]
    decoded, requests, configuration, settings = decode_test_property(
        encode_test_property(claims, {"replayed": 1, "live": 2}, "3f2a9c1b07de", {"top_k": 3})
    )
    assert decoded == claims and requests == {"replayed": 1, "live": 2}
    assert (configuration, settings) == ("3f2a9c1b07de", {"top_k": 3})
    assert decode_test_property(encode_test_property(claims, {}))[2:] == (None, None)
    report = _session().to_json(
        settings={"top_k": 3},
        configurations={"3f2a9c1b07de": {"top_k": 3}},
        record_mode="none",
        pipeline_version="1",
    )
    assert report["schema_version"] == 1
    assert report["configurations"] == {"3f2a9c1b07de": {"top_k": 3}}
    assert report["summary"]["labels"]["fabricated"] == 1
    assert report["summary"]["citation_precision"] == {"value": 0.2, "supported": 1, "total": 5}
    assert json.loads(json.dumps(report)) == report


def test_baseline_diff_flags_drops_and_new_contradictions(tmp_path: Path) -> None:
    before = SessionCitations()
    before.add("t.py::a", [_claim(SUPPORTED, DEAD)], {})
    after = SessionCitations()
    moved = _c("https://a.example/x", "contradicted", evidence_quote="no", confidence=0.9)
    after.add("t.py::renamed", [_claim(moved, DEAD, label="contradicted")], {})
    path = tmp_path / "base.json"
    path.write_text(json.dumps(before.to_json()))
    diff = compare_with_baseline(after.to_json(), load_report(path), tolerance=0.0)
    assert diff.failed
    assert any("supported -> contradicted: https://a.example/x" in line for line in diff.lines)
    assert any("citation moved to contradicted" in line for line in diff.failures)
    same = compare_with_baseline(before.to_json(), before.to_json(), tolerance=0.0)
    assert not same.failed
    assert not compare_with_baseline(after.to_json(), before.to_json(), tolerance=0.6).failures[:0]


def test_load_report_explains_bad_files(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        load_report(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(ValueError, match="not a pytest-citations report"):
        load_report(bad)
