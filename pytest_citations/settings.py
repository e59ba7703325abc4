"""Every knob of the pipeline, with one source of truth for its environment name.

Precedence, highest first (the same for the library, the plugin and the CLI):
explicit arguments (a ``Settings`` you build, a pytest command-line option, a CLI
flag) > environment variables > pytest ini options > the defaults below.
``Settings.from_env`` reads the environment; the plugin layers ini values under it
and command-line values over it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from pytest_citations.errors import ConfigurationError, UnknownProviderError
from pytest_citations.models import DEFAULT_AUTO_ACCEPT

Provider = Literal["openai", "anthropic", "ollama"]
Fetcher = Literal["auto", "crawlbase", "crawlbase-sdk", "direct"]

PROVIDERS: tuple[str, ...] = ("openai", "anthropic", "ollama")

#: OpenAI's own endpoint; any other ``OPENAI_BASE_URL`` is an OpenAI-compatible server
#: (llama.cpp, vLLM, LM Studio) that may need no key at all.
OPENAI_API_URL = "https://api.openai.com/v1"
FETCHERS: tuple[str, ...] = ("auto", "crawlbase", "crawlbase-sdk", "direct")

#: Default judge model per provider: small, cheap models that follow a JSON schema.
DEFAULT_MODELS: dict[str, str] = {
    "openai": "gpt-4o-mini",
    "anthropic": "claude-3-5-haiku-latest",
    "ollama": "llama3.1",
}

#: Three passages (seed 000): one makes retrieval brittle when the best evidence
#: ranks second; ten bring back the noise retrieval exists to remove.
DEFAULT_TOP_K = 3
#: About 200 words (``str.split()``) per passage keeps passages comparable
#: without a tokenizer and fits all-MiniLM-L6-v2's 256-token window.
DEFAULT_MAX_WORDS = 200
#: Pages above this are cut: 2 MiB holds any article, a citation is judged on its
#: evidence, not on a 100 MB dump, and HTML extraction costs ~3 s per MB of input.
DEFAULT_MAX_PAGE_BYTES = 2 * 1024 * 1024
#: Seconds per network operation; hosted judges answer within a few seconds.
DEFAULT_TIMEOUT = 30.0
#: Attempts on 429/5xx before a judge or fetch failure becomes a label.
DEFAULT_RETRIES = 3
#: First wait before a retry (doubled per attempt) when the server sends no
#: Retry-After: long enough for a brief overload to pass, short enough for CI.
DEFAULT_RETRY_BACKOFF = 0.5
#: Seed 000's ``BATCH_CONCURRENCY`` default.
DEFAULT_CONCURRENCY = 4

#: Environment variable for each field (DESIGN.md §13 plus our own names).
ENV_NAMES: dict[str, str] = {
    "crawlbase_token": "CRAWLBASE_TOKEN",
    "crawlbase_js_token": "CRAWLBASE_JS_TOKEN",
    "crawlbase_api_url": "CRAWLBASE_API_URL",
    "fetcher": "CITATIONS_FETCHER",
    "judge_provider": "JUDGE_PROVIDER",
    "judge_model": "JUDGE_MODEL",
    "openai_api_key": "OPENAI_API_KEY",
    "openai_base_url": "OPENAI_BASE_URL",
    "anthropic_api_key": "ANTHROPIC_API_KEY",
    "anthropic_base_url": "ANTHROPIC_BASE_URL",
    "ollama_host": "OLLAMA_HOST",
    "top_k": "CITATIONS_TOP_K",
    "max_words": "CITATIONS_MAX_WORDS",
    "auto_accept": "CITATIONS_AUTO_ACCEPT",
    "allow_private_hosts": "CITATIONS_ALLOW_PRIVATE_HOSTS",
    "timeout": "CITATIONS_TIMEOUT",
    "retries": "CITATIONS_RETRIES",
    "retry_backoff": "CITATIONS_RETRY_BACKOFF",
    "max_page_bytes": "CITATIONS_MAX_PAGE_BYTES",
    "embedding_cache_dir": "CITATIONS_EMBEDDING_CACHE",
    "extraction_cache_dir": "CITATIONS_EXTRACTION_CACHE",
    "batch_concurrency": "BATCH_CONCURRENCY",
}

#: Fields whose values are secrets: scrubbed from cassettes, never printed.
SECRET_FIELDS: tuple[str, ...] = (
    "crawlbase_token",
    "crawlbase_js_token",
    "openai_api_key",
    "anthropic_api_key",
)

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class Settings(BaseModel):
    """Pipeline configuration. Immutable: derive variants with ``model_copy(update=...)``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    crawlbase_token: SecretStr | None = None
    crawlbase_js_token: SecretStr | None = None
    crawlbase_api_url: str = "https://api.crawlbase.com/"
    fetcher: Fetcher = "auto"
    judge_provider: Provider = "openai"
    judge_model: str | None = None
    openai_api_key: SecretStr | None = None
    openai_base_url: str = OPENAI_API_URL
    anthropic_api_key: SecretStr | None = None
    anthropic_base_url: str = "https://api.anthropic.com"
    ollama_host: str = "http://localhost:11434"
    top_k: int = Field(default=DEFAULT_TOP_K, ge=1)
    max_words: int = Field(default=DEFAULT_MAX_WORDS, ge=1)
    auto_accept: float = Field(default=DEFAULT_AUTO_ACCEPT, ge=0, le=1)
    allow_private_hosts: bool = False
    timeout: float = Field(default=DEFAULT_TIMEOUT, gt=0)
    retries: int = Field(default=DEFAULT_RETRIES, ge=0)
    retry_backoff: float = Field(default=DEFAULT_RETRY_BACKOFF, ge=0)
    max_page_bytes: int = Field(default=DEFAULT_MAX_PAGE_BYTES, ge=1024)
    embedding_cache_dir: Path | None = None
    extraction_cache_dir: Path | None = None
    batch_concurrency: int = Field(default=DEFAULT_CONCURRENCY, ge=1)

    @property
    def model(self) -> str:
        """The judge model in use: the configured one or the provider's default."""
        return self.judge_model or DEFAULT_MODELS[self.judge_provider]

    @property
    def resolved_fetcher(self) -> str:
        """``auto`` means Crawlbase when a token is set, else direct HTTP."""
        if self.fetcher != "auto":
            return self.fetcher
        return "crawlbase" if self.crawlbase_token is not None else "direct"

    def secret_values(self) -> list[str]:
        """Every secret this configuration holds, for scrubbing and leak checks."""
        values = []
        for name in SECRET_FIELDS:
            secret = getattr(self, name)
            if secret is not None and secret.get_secret_value():
                values.append(secret.get_secret_value())
        return values

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        defaults: Mapping[str, Any] | None = None,
        **overrides: Any,
    ) -> Settings:
        """Build settings: ``overrides`` > ``env`` (default ``os.environ``) > ``defaults``.

        ``defaults`` is where the plugin passes ini values. Unknown providers,
        fetchers and malformed numbers raise :class:`ConfigurationError` naming
        the variable.
        """
        source = os.environ if env is None else env
        values: dict[str, Any] = {k: v for k, v in (defaults or {}).items() if v is not None}
        origin: dict[str, str] = dict.fromkeys(values, "ini option")
        for field, variable in ENV_NAMES.items():
            raw = source.get(variable)
            if not raw:  # unset and empty mean the same: use the default
                continue
            values[field] = _parse_bool(raw, variable) if field == "allow_private_hosts" else raw
            origin[field] = variable
        for key, value in overrides.items():
            if value is not None:
                values[key] = value
                origin[key] = key
        provider = values.get("judge_provider")
        if provider is not None and provider not in PROVIDERS:
            where = origin.get("judge_provider", "judge_provider")
            raise UnknownProviderError(
                f"{where}={provider!r} is not a judge provider; choose one of "
                f"{', '.join(PROVIDERS)}."
            )
        try:
            return cls(**values)
        except ValidationError as error:
            problems = []
            for item in error.errors():
                field = str(item["loc"][0]) if item["loc"] else "?"
                name = origin.get(field, field)
                shown = "" if field in SECRET_FIELDS else f" (got {values.get(field)!r})"
                problems.append(f"{name}: {item['msg']}{shown}")
            raise ConfigurationError("invalid settings: " + "; ".join(problems)) from None


def _parse_bool(raw: str, variable: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigurationError(f"{variable} must be 1/0, true/false, yes/no or on/off, not {raw!r}.")
