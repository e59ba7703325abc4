"""The ``/verify`` HTTP service (DESIGN.md §11, seed 000): a thin FastAPI layer over the library.

Routes:

* ``GET /health`` → ``{"status": "ok", "version": ...}``;
* ``POST /verify`` with ``{"claim", "urls", "quote"?, "section"?}`` → the seed's
  JSON, ``{"claim", "overall", "citations": [...]}``
  (:meth:`~pytest_citations.models.ClaimVerdict.seed_json`);
* ``GET /openapi.json`` and ``GET /docs``: the schema FastAPI generates.

Errors: a missing token or key → 503 whose body names the environment variable
(``{"detail": ..., "variable": "OPENAI_API_KEY"}``), never its value; any other
configuration problem → 503 too; a malformed body → 422 with pydantic's detail.

The service only verifies ``http``/``https`` URLs: a local path or ``file://``
URL in a request is refused (422), so a client cannot make the server read its
own disk. Direct fetching keeps the private-address guard unless
``CITATIONS_ALLOW_PRIVATE_HOSTS`` is set.

Install with ``pip install 'pytest-citations[server]'``; run with
``citations serve`` (uvicorn), or mount ``create_app()`` in your own ASGI server.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator

from pytest_citations import __version__
from pytest_citations.errors import (
    CassetteError,
    ConfigurationError,
    InvalidCitationError,
    SourceError,
)
from pytest_citations.models import Label, UrlVerdict

if TYPE_CHECKING:
    from pytest_citations.pipeline import Verifier

#: Most URLs one request may cite: each one is a fetch and a judge call.
MAX_URLS = 50


class VerifyRequest(BaseModel):
    """One claim and the URLs an LLM cited for it."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "claim": "Water boils at 100 degrees Celsius at sea level.",
                    "urls": [
                        "https://example.com/articles/water-boiling-point",
                        "https://example.com/old-report",
                    ],
                }
            ]
        },
    )

    claim: str = Field(min_length=1, description="The sentence the LLM asserted.")
    urls: list[str] = Field(
        min_length=1, max_length=MAX_URLS, description="The http(s) URLs it cited."
    )
    quote: str | None = Field(
        default=None, description="Text the LLM says it took from the source (checked first)."
    )
    section: str | None = Field(default=None, description="The section of the source it names.")

    @field_validator("claim")
    @classmethod
    def _claim_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("claim must not be blank")
        return value

    @field_validator("urls")
    @classmethod
    def _http_urls(cls, value: list[str]) -> list[str]:
        for url in value:
            parts = urlsplit(url.strip())
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError(f"only http(s) URLs can be verified here, got {url!r}")
        return value


class VerifyResponse(BaseModel):
    """The claim's label (a fixed rule over its citations) and each citation's verdict."""

    claim: str
    overall: Label
    citations: list[UrlVerdict]


class ErrorBody(BaseModel):
    """A 503: what is missing, and the environment variable that provides it."""

    detail: str
    variable: str | None = None


class Health(BaseModel):
    status: str
    version: str


class _VerifierHolder:
    """Builds the environment's Verifier on first use, so the app starts without keys."""

    def __init__(self, verifier: Verifier | None) -> None:
        self._verifier = verifier
        self._lock = asyncio.Lock()

    async def get(self) -> Verifier:
        if self._verifier is None:
            async with self._lock:
                if self._verifier is None:
                    from pytest_citations.pipeline import Verifier

                    self._verifier = Verifier()
        return self._verifier


def _unavailable(error: ConfigurationError | CassetteError) -> JSONResponse:
    variable = getattr(error, "variable", None)
    body = ErrorBody(detail=str(error), variable=variable if isinstance(variable, str) else None)
    return JSONResponse(status_code=503, content=body.model_dump())


def create_app(verifier: Verifier | None = None) -> FastAPI:
    """The ASGI app. ``verifier`` defaults to one built from the environment on first request."""
    app = FastAPI(
        title="pytest-citations verifier",
        version=__version__,
        description="Checks that the pages an LLM cited say what the LLM claims. "
        "Labels: supported, contradicted, not_found, unreachable, fabricated.",
    )
    holder = _VerifierHolder(verifier)
    app.state.verifier_holder = holder

    @app.exception_handler(ConfigurationError)
    async def _configuration(_: Request, error: ConfigurationError) -> JSONResponse:
        if isinstance(error, SourceError):
            return JSONResponse(status_code=422, content={"detail": str(error)})
        return _unavailable(error)

    @app.exception_handler(CassetteError)
    async def _cassette(_: Request, error: CassetteError) -> JSONResponse:
        return _unavailable(error)

    @app.exception_handler(InvalidCitationError)
    async def _invalid(_: Request, error: InvalidCitationError) -> JSONResponse:
        return JSONResponse(status_code=422, content={"detail": str(error)})

    @app.get("/health", response_model=Health)
    async def health() -> Health:
        return Health(status="ok", version=__version__)

    responses: dict[int | str, dict[str, Any]] = {
        503: {
            "model": ErrorBody,
            "description": "A required token or key is not set (the body names the "
            "environment variable, never its value), or another setting is invalid.",
        }
    }

    @app.post("/verify", response_model=VerifyResponse, responses=responses)
    async def verify(request: VerifyRequest) -> dict[str, Any]:
        # MissingCredentialError and other configuration problems reach the
        # handlers above (503); content problems are labels in the verdict.
        current = await holder.get()
        verdict = await current.averify(
            request.claim, request.urls, quote=request.quote, section=request.section
        )
        return verdict.seed_json()

    return app
