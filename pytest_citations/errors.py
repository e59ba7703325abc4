"""One exception family for problems a user must fix before a verification can run.

Content outcomes are never exceptions: a dead link, a soft 404 or a judge that
answered nonsense is a label with a reason. What raises is configuration (a
missing key, an unknown provider, an unreadable local file) and cassette policy
(a replay that has nothing to replay). Messages name the fix and, for
credentials, the environment variable, never its value.
"""

from __future__ import annotations


class CitationsError(Exception):
    """Base class: catch this to handle every error pytest-citations raises."""


class ConfigurationError(CitationsError):
    """A setting is missing or invalid."""


class MissingCredentialError(ConfigurationError):
    """A request needs a credential that is not set.

    Raised only when a request would really go out, so cassette replay works
    with no keys at all.
    """

    def __init__(self, variable: str, purpose: str) -> None:
        self.variable = variable
        super().__init__(
            f"{variable} is not set: {purpose} needs it. Set the environment variable "
            f"{variable}, or replay from cassettes (--citations-record-mode=none)."
        )


class UnknownProviderError(ConfigurationError):
    """``JUDGE_PROVIDER`` (or the ``judge_provider`` setting) names no known judge."""


class SourceError(ConfigurationError):
    """A local document cannot be read, or a source is not a URL or a path."""


class CassetteError(CitationsError):
    """A cassette cannot be replayed or kept."""


class CassetteMissingError(CassetteError):
    """Record mode ``none`` and no recording exists for a request."""


class SecretInCassetteError(CassetteError):
    """A secret value survived scrubbing; the cassette was not kept."""


class InvalidCitationError(CitationsError, ValueError):
    """The citation itself is malformed: an empty claim, a source that is not a string."""
