"""Stage 6: fold citation labels into a claim label, and citations into precision.

Aggregation is a fixed rule, never another model call (DESIGN.md §3, §4).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pytest_citations.models import CitationVerdict, Label


def aggregate(labels: Iterable[Label | str]) -> Label:
    """One contradiction outweighs every supporting citation.

    Otherwise any supported citation carries the claim. The claim is
    unreachable only when every citation is unreachable. Every remaining mix,
    including an empty list, is not_found; a fabricated quote counts as
    not_found here (it is still reported, and fails a ``citations``-marked test).
    """
    seen = [Label(label) for label in labels]
    if Label.contradicted in seen:
        return Label.contradicted
    if Label.supported in seen:
        return Label.supported
    if seen and all(label is Label.unreachable for label in seen):
        return Label.unreachable
    return Label.not_found


@dataclass(frozen=True)
class Precision:
    """Citation precision over claim-source pairs.

    Citation precision is supported citations divided by every citation.
    Reachable precision keeps the numerator and drops unreachable citations
    from the denominator, which separates "the model cites dead links" from
    "the model cites live pages that do not say what it claims". It is None
    when nothing was reachable.
    """

    supported: int
    total: int
    reachable: int

    @classmethod
    def from_labels(cls, labels: Iterable[Label | str]) -> Precision:
        seen = [Label(label) for label in labels]
        return cls(
            supported=sum(label is Label.supported for label in seen),
            total=len(seen),
            reachable=sum(label is not Label.unreachable for label in seen),
        )

    @classmethod
    def from_verdicts(cls, verdicts: Iterable[CitationVerdict]) -> Precision:
        return cls.from_labels(verdict.label for verdict in verdicts)

    @property
    def citation_precision(self) -> float | None:
        return self.supported / self.total if self.total else None

    @property
    def reachable_precision(self) -> float | None:
        return self.supported / self.reachable if self.reachable else None

    def lines(self) -> list[str]:
        """The seed's two lines, e.g. ``citation_precision=0.2222 (2/9)``; ``n/a`` if undefined."""
        return [
            _line("citation_precision", self.citation_precision, self.supported, self.total),
            _line("reachable_precision", self.reachable_precision, self.supported, self.reachable),
        ]

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _line(name: str, value: float | None, numerator: int, denominator: int) -> str:
    if value is None:
        return f"{name}=n/a ({numerator}/{denominator})"
    return f"{name}={value:.4f} ({numerator}/{denominator})"
