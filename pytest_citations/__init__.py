"""pytest-citations: check that the page an LLM cited says what the LLM claims.

The public surface is ``__all__``; everything else may change. Attributes load
lazily (PEP 562) because pytest imports this package at start-up for every
suite through the plugin entry point, and pydantic, httpx or torch there would
slow down suites that never verify a citation.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "verify": "pytest_citations.pipeline",
    "averify": "pytest_citations.pipeline",
    "Verifier": "pytest_citations.pipeline",
    "ClaimVerdict": "pytest_citations.models",
    "CitationVerdict": "pytest_citations.models",
    "Label": "pytest_citations.models",
    "Reason": "pytest_citations.models",
    "Settings": "pytest_citations.settings",
    "split_passages": "pytest_citations.passages",
    "aggregate": "pytest_citations.aggregate",
    "Precision": "pytest_citations.aggregate",
    "CitationsError": "pytest_citations.errors",
    "ConfigurationError": "pytest_citations.errors",
    "MissingCredentialError": "pytest_citations.errors",
    "UnknownProviderError": "pytest_citations.errors",
    "SourceError": "pytest_citations.errors",
    "InvalidCitationError": "pytest_citations.errors",
    "CassetteError": "pytest_citations.errors",
    "CassetteMissingError": "pytest_citations.errors",
    "SecretInCassetteError": "pytest_citations.errors",
}

__all__ = [
    "CassetteError",
    "CassetteMissingError",
    "CitationVerdict",
    "CitationsError",
    "ClaimVerdict",
    "ConfigurationError",
    "InvalidCitationError",
    "Label",
    "MissingCredentialError",
    "Precision",
    "Reason",
    "SecretInCassetteError",
    "Settings",
    "SourceError",
    "UnknownProviderError",
    "Verifier",
    "aggregate",
    "averify",
    "split_passages",
    "verify",
]

if TYPE_CHECKING:
    from pytest_citations.aggregate import Precision, aggregate
    from pytest_citations.errors import (
        CassetteError,
        CassetteMissingError,
        CitationsError,
        ConfigurationError,
        InvalidCitationError,
        MissingCredentialError,
        SecretInCassetteError,
        SourceError,
        UnknownProviderError,
    )
    from pytest_citations.models import CitationVerdict, ClaimVerdict, Label, Reason
    from pytest_citations.passages import split_passages
    from pytest_citations.pipeline import Verifier, averify, verify
    from pytest_citations.settings import Settings


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_citations' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
