"""Citation tables, the JSON report, its baseline diff, and the ``citations`` marker gate.

Everything here is pure: the pytest plugin collects verdicts and hands them over;
the batch command and the CLI reuse the same table and report shapes.

JSON report (schema version :data:`REPORT_SCHEMA_VERSION`)::

    {
      "schema": "pytest-citations-report",
      "schema_version": 1,
      "generated_at": "2025-01-01T12:00:00+00:00",      # UTC, ISO 8601
      "pytest_citations_version": "0.1.0",
      "pipeline_version": "1",
      "record_mode": "none",
      "settings": {...},                                 # the first configuration used,
                                                         # Settings minus secret fields
      "configurations": {"3f2a9c1b07de": {...}, ...},    # every configuration used, by id
      "summary": {
        "tests": 3, "claims": 4, "citations": 9,
        "labels": {"supported": 2, "contradicted": 1, "not_found": 3,
                   "unreachable": 3, "fabricated": 0},
        "needs_review": 2,
        "citation_precision": {"value": 0.2222, "supported": 2, "total": 9},
        "reachable_precision": {"value": 0.3333, "supported": 2, "reachable": 6},
        "requests": {"replayed": 12, "live": 0}
      },
      "tests": [
        {"nodeid": "tests/test_x.py::test_a", "outcome": "passed",
         "configuration": "3f2a9c1b07de",              # a key of "configurations"
         "requests": {"replayed": 4, "live": 0},
         "claims": [{"claim": "...", "label": "supported",
                     "citations": [<CitationVerdict as JSON>, ...]}]}
      ]
    }

``value`` is null when the denominator is 0. A folder's ``conftest.py`` may
override the settings, so one session can verify under several configurations:
each test names the one it used. A citation's fields are those of
:class:`~pytest_citations.models.CitationVerdict` (``url``, ``label``,
``evidence_quote``, ``confidence``, ``final_url``, ``original_status``, ``rid``,
``reason``, ``needs_review``, ``quote``, ``section``, ``closest_passage``,
``closest_similarity``, ``detail``).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pytest_citations.aggregate import Precision
from pytest_citations.models import CitationVerdict, ClaimVerdict, Label

__all__ = [
    "DEFAULT_FAIL_ON",
    "REPORT_SCHEMA",
    "REPORT_SCHEMA_VERSION",
    "BaselineDiff",
    "MarkerGate",
    "SessionCitations",
    "TestCitations",
    "citation_table",
    "compare_with_baseline",
    "explain_comparison",
    "load_report",
    "parse_marker",
]

REPORT_SCHEMA = "pytest-citations-report"
REPORT_SCHEMA_VERSION = 1

#: Labels that fail a ``@pytest.mark.citations`` test by default: a page that says
#: the opposite, and a quote the source does not contain (DESIGN.md §3).
DEFAULT_FAIL_ON: tuple[str, ...] = ("contradicted", "fabricated")

LABELS: tuple[str, ...] = tuple(label.value for label in Label)
_MOVED_TO_FAILING = ("contradicted", "fabricated")


# -- tables ---------------------------------------------------------------------------


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _confidence(verdict: CitationVerdict) -> str:
    return "-" if verdict.confidence is None else f"{verdict.confidence:.2f}"


def _evidence(verdict: CitationVerdict, limit: int) -> str:
    if verdict.label is Label.fabricated and verdict.quote:
        return f'quote not in source: "{_cut(verdict.quote, limit)}"'
    if verdict.evidence_quote:
        return f'"{_cut(verdict.evidence_quote, limit)}"'
    if verdict.detail:
        return _cut(verdict.detail, limit)
    return "-"


def citation_table(
    citations: Sequence[CitationVerdict], *, max_url: int = 80, max_quote: int = 160
) -> str:
    """One row per citation: label, confidence, reason, URL, evidence quote.

    Columns are aligned for a terminal; ``review`` marks a verdict below the
    auto-accept gate. Long URLs and quotes are cut with ``…`` (the JSON report
    keeps them whole).
    """
    if not citations:
        return "(no citations)"
    rows = [("label", "conf", "reason", "url", "evidence")]
    for verdict in citations:
        label = verdict.label.value + (" (review)" if verdict.needs_review else "")
        rows.append(
            (
                label,
                _confidence(verdict),
                verdict.reason or "-",
                _cut(verdict.url, max_url),
                _evidence(verdict, max_quote),
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(4)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row[:4], widths, strict=True))
        + "  "
        + row[4]
        for row in rows
    )


def explain_comparison(verdict: ClaimVerdict, op: str, expected: str) -> list[str]:
    """``pytest_assertrepr_compare`` lines for ``verdict == "label"``.

    Compact on purpose: pytest cuts explanations to 8 lines / 640 characters
    unless ``-vv`` or ``CI`` is set, so the claim and one line per citation
    come first.
    """
    lines = [
        f"claim verdict {verdict.label.value!r} {op} {str(expected)!r}",
        f"claim: {_cut(verdict.claim, 120)!r}",
    ]
    lines.extend(citation_table(verdict.citations, max_url=60, max_quote=70).splitlines())
    return lines


# -- precision ------------------------------------------------------------------------


def precision(citations: Iterable[CitationVerdict]) -> Precision:
    return Precision.from_verdicts(citations)


def _precision_json(value: Precision) -> dict[str, dict[str, Any]]:
    cp, rp = value.citation_precision, value.reachable_precision
    return {
        "citation_precision": {
            "value": None if cp is None else round(cp, 4),
            "supported": value.supported,
            "total": value.total,
        },
        "reachable_precision": {
            "value": None if rp is None else round(rp, 4),
            "supported": value.supported,
            "reachable": value.reachable,
        },
    }


# -- the marker gate --------------------------------------------------------------------


@dataclass(frozen=True)
class MarkerGate:
    """Validated arguments of ``@pytest.mark.citations``."""

    floor: float | None = None
    fail_on: tuple[str, ...] = DEFAULT_FAIL_ON
    reachable_only: bool = False

    def failures(self, verdicts: Sequence[ClaimVerdict]) -> str | None:
        """The failure message for a test's verdicts, or None when the gate passes."""
        rows: list[tuple[str, CitationVerdict]] = [
            (claim.claim, citation) for claim in verdicts for citation in claim.citations
        ]
        problems: list[str] = []
        offending = [(claim, c) for claim, c in rows if c.label.value in self.fail_on]
        if offending:
            labels = ", ".join(sorted({c.label.value for _, c in offending}))
            problems.append(
                f"{len(offending)} citation(s) labelled {labels} (fail_on={list(self.fail_on)}):"
            )
            problems.extend(_citation_block(claim, citation) for claim, citation in offending)
        if self.floor is not None:
            measured = precision(c for _, c in rows)
            name = "reachable_precision" if self.reachable_only else "citation_precision"
            value = (
                measured.reachable_precision if self.reachable_only else measured.citation_precision
            )
            line = measured.lines()[1 if self.reachable_only else 0]
            if value is None:
                what = "no reachable citation" if rows else "no citation"
                problems.append(
                    f"{name} is n/a ({what} verified) but the marker sets floor={self.floor}"
                )
            elif value < self.floor:
                problems.append(f"{line} is below the floor {self.floor}; citations not supported:")
                problems.extend(
                    _citation_block(claim, citation)
                    for claim, citation in rows
                    if citation.label is not Label.supported
                    and not (self.reachable_only and citation.label is Label.unreachable)
                )
        if not problems:
            return None
        return "@pytest.mark.citations failed:\n" + "\n".join(problems)


def _citation_block(claim: str, verdict: CitationVerdict) -> str:
    conf = _confidence(verdict)
    lines = [
        f"  - [{verdict.label.value}] {verdict.url}  (reason: {verdict.reason or '-'}, "
        f"confidence: {conf})",
        f"      claim:    {claim!r}",
    ]
    if verdict.quote:
        lines.append(f"      quote:    {_cut(verdict.quote, 300)!r}")
    if verdict.evidence_quote:
        lines.append(f"      evidence: {_cut(verdict.evidence_quote, 300)!r}")
    if verdict.closest_passage:
        lines.append(
            f"      closest passage ({verdict.closest_similarity or 0:.2f}): "
            f"{_cut(verdict.closest_passage, 200)!r}"
        )
    if verdict.detail:
        lines.append(f"      detail:   {_cut(verdict.detail, 300)}")
    return "\n".join(lines)


def parse_marker(args: Sequence[Any], kwargs: Mapping[str, Any]) -> MarkerGate:
    """Validate ``@pytest.mark.citations(...)``; ValueError says what is wrong."""
    usage = (
        "use @pytest.mark.citations(floor=None, fail_on=('contradicted', 'fabricated'), "
        "reachable_only=False)"
    )
    if args:
        raise ValueError(f"@pytest.mark.citations takes keyword arguments only; {usage}")
    unknown = sorted(set(kwargs) - {"floor", "fail_on", "reachable_only"})
    if unknown:
        raise ValueError(
            f"@pytest.mark.citations got unknown argument(s) {', '.join(unknown)}; {usage}"
        )
    floor = kwargs.get("floor")
    if floor is not None:
        if isinstance(floor, bool) or not isinstance(floor, int | float):
            raise ValueError(
                f"@pytest.mark.citations floor must be a number in [0, 1], not {floor!r}"
            )
        if not 0 <= floor <= 1:
            raise ValueError(f"@pytest.mark.citations floor must be in [0, 1], not {floor!r}")
        floor = float(floor)
    fail_on_raw = kwargs.get("fail_on", DEFAULT_FAIL_ON)
    if isinstance(fail_on_raw, str):
        fail_on_raw = (fail_on_raw,)
    if fail_on_raw is None:
        fail_on_raw = ()
    if not isinstance(fail_on_raw, list | tuple | set | frozenset):
        raise ValueError(
            "@pytest.mark.citations fail_on must be a label or a tuple of labels, "
            f"not {fail_on_raw!r}"
        )
    fail_on = tuple(str(label) for label in fail_on_raw)
    bad = [label for label in fail_on if label not in LABELS]
    if bad:
        raise ValueError(
            f"@pytest.mark.citations fail_on has unknown label(s) {', '.join(map(repr, bad))}; "
            f"labels are {', '.join(LABELS)}"
        )
    reachable_only = kwargs.get("reachable_only", False)
    if not isinstance(reachable_only, bool):
        raise ValueError(
            f"@pytest.mark.citations reachable_only must be True or False, not {reachable_only!r}"
        )
    return MarkerGate(floor=floor, fail_on=fail_on, reachable_only=reachable_only)


# -- the session's verdicts --------------------------------------------------------------


@dataclass
class TestCitations:
    """The verdicts one test produced, as the controller received them."""

    __test__ = False  # not a pytest test class

    nodeid: str
    claims: list[ClaimVerdict] = field(default_factory=list)
    outcome: str = "passed"
    requests: dict[str, int] = field(default_factory=dict)
    configuration: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "nodeid": self.nodeid,
            "outcome": self.outcome,
            "configuration": self.configuration,
            "requests": {
                "replayed": self.requests.get("replayed", 0),
                "live": self.requests.get("live", 0),
            },
            "claims": [claim.model_dump(mode="json") for claim in self.claims],
        }


def encode_test_property(
    claims: Sequence[ClaimVerdict],
    requests: Mapping[str, int],
    configuration: str | None = None,
    settings: Mapping[str, Any] | None = None,
) -> str:
    """The ``citations`` user property: how a worker's verdicts reach the controller.

    ``configuration`` names the settings the test ran under; ``settings`` carries
    them, sent with the first test of each configuration only.
    """
    return json.dumps(
        {
            "claims": [claim.model_dump(mode="json") for claim in claims],
            "requests": dict(requests),
            "configuration": configuration,
            "settings": dict(settings) if settings is not None else None,
        },
        ensure_ascii=False,
        sort_keys=True,
    )


def decode_test_property(
    value: str,
) -> tuple[list[ClaimVerdict], dict[str, int], str | None, dict[str, Any] | None]:
    """(claims, requests, configuration id, its settings or None) from the property."""
    data = json.loads(value)
    claims = [ClaimVerdict.model_validate(item) for item in data.get("claims", [])]
    requests = {k: int(v) for k, v in data.get("requests", {}).items()}
    configuration = data.get("configuration")
    settings = data.get("settings")
    return (
        claims,
        requests,
        configuration if isinstance(configuration, str) else None,
        settings if isinstance(settings, dict) else None,
    )


@dataclass
class SessionCitations:
    """Every test's verdicts, once each, in the order their reports arrived."""

    tests: dict[str, TestCitations] = field(default_factory=dict)

    def add(
        self,
        nodeid: str,
        claims: Sequence[ClaimVerdict],
        requests: Mapping[str, int],
        outcome: str = "passed",
        configuration: str | None = None,
    ) -> None:
        record = self.tests.setdefault(nodeid, TestCitations(nodeid))
        # A rerun (pytest-rerunfailures) replaces the earlier attempt.
        record.claims = list(claims)
        record.requests = dict(requests)
        record.outcome = outcome
        record.configuration = configuration

    def citations(self) -> list[tuple[str, str, CitationVerdict]]:
        return [
            (record.nodeid, claim.claim, citation)
            for record in self.tests.values()
            for claim in record.claims
            for citation in claim.citations
        ]

    def precision(self) -> Precision:
        return precision(c for _, _, c in self.citations())

    def requests(self) -> dict[str, int]:
        total: Counter[str] = Counter()
        for record in self.tests.values():
            total.update(record.requests)
        return {"replayed": total.get("replayed", 0), "live": total.get("live", 0)}

    def summary_json(self) -> dict[str, Any]:
        citations = [c for _, _, c in self.citations()]
        labels = Counter(c.label.value for c in citations)
        return {
            "tests": len(self.tests),
            "claims": sum(len(record.claims) for record in self.tests.values()),
            "citations": len(citations),
            "labels": {label: labels.get(label, 0) for label in LABELS},
            "needs_review": sum(c.needs_review for c in citations),
            **_precision_json(self.precision()),
            "requests": self.requests(),
        }

    def to_json(
        self,
        *,
        settings: Mapping[str, Any] | None = None,
        configurations: Mapping[str, Mapping[str, Any]] | None = None,
        record_mode: str | None = None,
        pipeline_version: str | None = None,
    ) -> dict[str, Any]:
        from pytest_citations import __version__

        return {
            "schema": REPORT_SCHEMA,
            "schema_version": REPORT_SCHEMA_VERSION,
            "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "pytest_citations_version": __version__,
            "pipeline_version": pipeline_version,
            "record_mode": record_mode,
            "settings": dict(settings or {}),
            "configurations": {name: dict(value) for name, value in (configurations or {}).items()},
            "summary": self.summary_json(),
            "tests": [self.tests[nodeid].to_json() for nodeid in sorted(self.tests)],
        }

    def summary_lines(self) -> list[str]:
        """The terminal summary: counts, the two precision lines, what needs a look."""
        summary = self.summary_json()
        labels = summary["labels"]
        requests = summary["requests"]
        lines = [
            f"{summary['citations']} citation(s) of {summary['claims']} claim(s) in "
            f"{summary['tests']} test(s): "
            + ", ".join(f"{label}={labels[label]}" for label in LABELS),
            *self.precision().lines(),
            f"requests: replayed={requests['replayed']} live={requests['live']}",
        ]
        for label in ("contradicted", "fabricated"):
            rows = [(n, claim, c) for n, claim, c in self.citations() if c.label.value == label]
            if rows:
                lines.append(f"{label}:")
                for nodeid, claim, citation in rows:
                    lines.append(f"  {nodeid}")
                    lines.append(_citation_block(claim, citation))
        review = [(n, claim, c) for n, claim, c in self.citations() if c.needs_review]
        if review:
            lines.append("needs_review:")
            for nodeid, claim, citation in review:
                lines.append(
                    f"  - [{citation.label.value} {_confidence(citation)}] {citation.url}  "
                    f"{claim!r}  ({nodeid})"
                )
        return lines


# -- baseline ------------------------------------------------------------------------------


def load_report(path: Path | str) -> dict[str, Any]:
    """Read a JSON report; ValueError names the file and the problem."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"baseline report {path} does not exist") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"baseline report {path} is not JSON: {error}") from None
    if not isinstance(data, dict) or data.get("schema") != REPORT_SCHEMA:
        raise ValueError(f"{path} is not a pytest-citations report")
    if data.get("schema_version") != REPORT_SCHEMA_VERSION:
        raise ValueError(
            f"{path} has report schema version {data.get('schema_version')!r}; this "
            f"version reads {REPORT_SCHEMA_VERSION}"
        )
    return data


_Key = tuple[str, str, str, str]


_LOOPBACK_PORT = re.compile(r"(?<![\w.])((?:127(?:\.\d{1,3}){3})|localhost|\[::1\]):\d{1,5}")


def _citation_labels(report: Mapping[str, Any]) -> dict[_Key, str]:
    """(claim, url, quote, section) → label; the identity cassettes use too, not the test name.

    A loopback URL's port is dropped, as in cassette names: a local simulator
    listens on a new port each run.
    """
    labels: dict[_Key, str] = {}
    for test in report.get("tests", []):
        for claim in test.get("claims", []):
            for citation in claim.get("citations", []):
                key = (
                    claim.get("claim", ""),
                    _LOOPBACK_PORT.sub(r"\1", citation.get("url", "")),
                    citation.get("quote") or "",
                    citation.get("section") or "",
                )
                labels.setdefault(key, citation.get("label", ""))
    return labels


@dataclass
class BaselineDiff:
    """How this run differs from a baseline report, and whether that fails the session."""

    lines: list[str]
    failures: list[str]

    @property
    def failed(self) -> bool:
        return bool(self.failures)


def compare_with_baseline(
    current: Mapping[str, Any], baseline: Mapping[str, Any], tolerance: float
) -> BaselineDiff:
    """Fail on a precision drop beyond ``tolerance`` or a citation newly contradicted/fabricated."""
    lines: list[str] = []
    failures: list[str] = []
    for name in ("citation_precision", "reachable_precision"):
        now = current.get("summary", {}).get(name, {}).get("value")
        before = baseline.get("summary", {}).get(name, {}).get("value")
        if now is None or before is None:
            lines.append(f"{name}: {_fmt(before)} -> {_fmt(now)}")
            continue
        delta = now - before
        lines.append(f"{name}: {before:.4f} -> {now:.4f} ({delta:+.4f})")
        if delta < -tolerance - 1e-12:
            failures.append(
                f"{name} dropped from {before:.4f} to {now:.4f} ({delta:+.4f}), beyond the "
                f"tolerance {tolerance}"
            )
    old, new = _citation_labels(baseline), _citation_labels(current)
    for key in sorted(old.keys() & new.keys()):
        if old[key] != new[key]:
            claim, url, _, _ = key
            line = f"  {old[key]} -> {new[key]}: {url}  {claim!r}"
            lines.append(line)
            if new[key] in _MOVED_TO_FAILING:
                failures.append(f"citation moved to {new[key]}: {url}  {claim!r}")
    added, removed = new.keys() - old.keys(), old.keys() - new.keys()
    if added:
        lines.append(f"  {len(added)} citation(s) not in the baseline")
    if removed:
        lines.append(f"  {len(removed)} baseline citation(s) not verified in this run")
    return BaselineDiff(lines=lines, failures=failures)


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"
