"""Direct mode: a plain httpx GET when no Crawlbase token is set.

Redirects are followed hop by hop (at most :data:`~rules.MAX_REDIRECTS`; a loop
ends at once), each hop carrying ``GUARD_ADDRESS`` so the live transport resolves
the host and refuses loopback, private, link-local and metadata addresses (SSRF).
The final URL is recorded. The same 404/410, homepage, soft-404 and thin rules as
the Crawlbase fetchers apply (:mod:`pytest_citations.fetch.rules`).

Failures become labels, never exceptions:

=========================================  ====================  ==============
what happened                              label                 reason
=========================================  ====================  ==============
host resolves to a non-public address      unreachable           blocked_address
host name does not resolve                 unreachable           dns_error
connection refused / reset / TLS failure   unreachable           connect_error
no answer in time (see below)              unreachable           timeout
malformed URL, non-HTTP redirect target    unreachable           invalid_url
redirect loop, or more than 10 hops        unreachable           too_many_redirects
404 / 410                                  unreachable           http_404/http_410
429, 5xx (after retries)                   unreachable           http_<status>
401/402/403/451 (paywall, login, block)    not_found             http_<status>
other 3xx/4xx                              not_found             http_<status>
image, audio, archive, octet-stream        not_found             binary_content
PDF with no extractable text               not_found             pdf_unsupported
PDF cut by the size cap, unreadable        not_found             page_too_large
=========================================  ====================  ==============

429, 500, 502, 503 and 504 are retried ``settings.retries`` times honouring
``Retry-After`` (transient by definition); timeouts and connection errors are not
(each already cost ``settings.timeout``, and a dead host stays dead). "In time"
means each network operation within ``settings.timeout`` and the whole page —
every hop, retry and byte — within :data:`PAGE_DEADLINE_FACTOR` times that.

Size cap: the body is streamed and reading stops at ``settings.max_page_bytes``.
A cut HTML or text page *is* judged on what was read — the evidence a citation
points at is almost always in the first megabytes, and lxml parses a truncated
document fine — with a ``detail`` saying it was cut. A cut PDF cannot be parsed
(its cross-reference table sits at the end), so it becomes ``page_too_large``.
"""

from __future__ import annotations

import asyncio
import codecs
import hashlib
import io
import logging
import os
import re
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin

import httpx

from pytest_citations import transport as transport_module
from pytest_citations._threads import run_blocking
from pytest_citations.fetch import rules
from pytest_citations.fetch.rules import Page
from pytest_citations.models import Label, Reason
from pytest_citations.settings import Settings
from pytest_citations.transport import BlockedAddressError, Recorder, ResolutionError

logger = logging.getLogger(__name__)

FETCHER = "direct"
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
PDF_TYPES = frozenset({"application/pdf", "application/x-pdf"})
#: Non-``text/*`` types whose body is still text worth reading as is.
TEXT_TYPES = frozenset({"application/json", "application/xml", "application/ld+json"})
#: How far into an HTML document we look for ``<meta charset>``: the HTML
#: standard requires the declaration within the first 1024 bytes; we allow slack.
META_CHARSET_WINDOW = 4096
#: Bytes sniffed for NUL when the server sends no Content-Type.
SNIFF_WINDOW = 1024
#: A whole page (every hop, retry and byte) must finish within this many
#: ``settings.timeout``s: the per-read timeout alone lets a server that drips one
#: byte at a time hold a citation forever.
PAGE_DEADLINE_FACTOR = 4

_META_CHARSET = re.compile(
    rb"""<meta[^>]+?charset\s*=\s*["']?\s*([A-Za-z0-9_\-:.]+)""", re.IGNORECASE
)


@dataclass(frozen=True)
class Fetched:
    """The last hop's answer: status, where it was, and the (possibly cut) body."""

    status: int
    url: str
    content_type: str = ""
    charset: str | None = None
    body: bytes = b""
    truncated: bool = False
    location: str | None = None
    retry_after: str | None = None


# --- content ------------------------------------------------------------------------


def html_to_markdown(html: str, *, readable: bool = True) -> str:
    """Main-content Markdown of an HTML page ("" when nothing readable is found).

    trafilatura is the extractor because it is the one that does what Crawlbase's
    ``md_readability`` does for direct mode: it finds the main content (dropping
    navigation, sidebars, footers, cookie banners) *and* writes Markdown
    (``output_format="markdown"``) that keeps headings, lists and tables, so the
    passages split the same way as a Crawlbase page. It is pure Python over lxml,
    needs no browser, and in published extraction benchmarks it scores at the top
    among open-source main-content extractors; readability-lxml and
    BeautifulSoup's ``get_text`` either keep boilerplate or lose structure.

    ``readable=False`` is the fallback for thin results, the direct-mode twin of
    dropping ``md_readability``: a recall-oriented extraction, then the whole
    page's text.
    """
    import trafilatura

    html = html.lstrip()
    if "html" not in html[:50].lower():
        # trafilatura rejects a document whose start does not mention "html"
        # (a bare fragment such as "<p>…</p>"); give it the document it expects.
        html = f"<html><body>{html}</body></html>"
    try:
        text: str = (
            trafilatura.extract(
                html,
                output_format="markdown",
                include_comments=False,
                include_tables=True,
                include_images=False,
                include_links=False,
                with_metadata=False,
                favor_recall=not readable,
            )
            or ""
        )
        if readable:
            return text
        if rules.is_thin(text):
            whole: str = trafilatura.html2txt(html) or ""
            if rules.readable_chars(whole) > rules.readable_chars(text):
                text = whole
        return text
    except Exception:  # an extractor bug on hostile markup must not fail the citation
        logger.debug("trafilatura failed", exc_info=True)
        return ""


def pdf_to_text(data: bytes) -> str:
    """The text of every page of a PDF (pypdf), "" when nothing can be extracted."""
    from pypdf import PdfReader

    try:
        reader = PdfReader(io.BytesIO(data))
        pages = [page.extract_text() or "" for page in reader.pages]
    except Exception:  # pypdf raises many types on malformed or cut files
        logger.debug("pypdf failed", exc_info=True)
        return ""
    return "\n\n".join(page.strip() for page in pages if page.strip())


def _usable_codec(name: str | None) -> str | None:
    if not name:
        return None
    try:
        return codecs.lookup(name.strip()).name
    except LookupError:
        return None


def decode_body(body: bytes, header_charset: str | None, *, html: bool) -> str:
    """Bytes to text: the Content-Type charset, then ``<meta charset>``, then UTF-8.

    Undecodable bytes become U+FFFD instead of failing the page.
    """
    if body.startswith(codecs.BOM_UTF8):
        return body[len(codecs.BOM_UTF8) :].decode("utf-8", errors="replace")
    codec = _usable_codec(header_charset)
    if codec is None and html:
        match = _META_CHARSET.search(body[:META_CHARSET_WINDOW])
        codec = _usable_codec(match.group(1).decode("ascii", "replace")) if match else None
    return body.decode(codec or "utf-8", errors="replace")


def content_kind(content_type: str, body: bytes) -> str:
    """``html``, ``text``, ``pdf`` or ``binary`` from the media type, sniffing when absent."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media in PDF_TYPES or body.startswith(b"%PDF-"):
        return "pdf"
    if media in HTML_TYPES:
        return "html"
    if media.startswith("text/") or media in TEXT_TYPES or media.endswith("+xml"):
        return "text"
    if not media:
        head = body[:SNIFF_WINDOW]
        if b"\x00" in head:
            return "binary"
        return "html" if head.lstrip()[:1] == b"<" else "text"
    return "binary"


# --- network ------------------------------------------------------------------------


def _is_dns_failure(error: BaseException) -> bool:
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, socket.gaierror):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def error_page(url: str, error: Exception, current: str) -> Page:
    """The label for an exception raised while fetching ``current`` (a hop of ``url``)."""
    if isinstance(error, BlockedAddressError):
        reason, label = Reason.blocked_address, Label.unreachable
    elif isinstance(error, ResolutionError) or _is_dns_failure(error):
        reason, label = Reason.dns_error, Label.unreachable
    elif isinstance(error, httpx.TimeoutException):
        reason, label = Reason.timeout, Label.unreachable
    elif isinstance(error, httpx.InvalidURL | httpx.UnsupportedProtocol):
        reason, label = Reason.invalid_url, Label.unreachable
    else:
        reason, label = Reason.connect_error, Label.unreachable
    message = str(error) or type(error).__name__
    return rules.labelled(url, label, reason, message, final_url=current)


async def _get(client: httpx.AsyncClient, url: str, settings: Settings) -> Fetched:
    """One hop, with retries on 429/5xx; the body is read only for a non-redirect."""
    attempts = settings.retries + 1
    for attempt in range(attempts):
        request = client.build_request(
            "GET", url, extensions={transport_module.GUARD_ADDRESS: True}
        )
        response = await client.send(request, stream=True)
        try:
            status = response.status_code
            location = response.headers.get("Location")
            retry_after = response.headers.get("Retry-After")
            if status in REDIRECT_STATUSES and location:
                return Fetched(status=status, url=url, location=location)
            if status in rules.RETRYABLE_STATUSES and attempt + 1 < attempts:
                delay = rules.retry_delay(retry_after, attempt, settings.retry_backoff)
                if delay is not None:
                    logger.debug("%s answered %s; retrying in %.1fs", url, status, delay)
                    await response.aclose()
                    await rules.sleep(delay)
                    continue
            body, truncated = await rules.read_capped(response, settings.max_page_bytes)
            return Fetched(
                status=status,
                url=url,
                content_type=response.headers.get("Content-Type", ""),
                charset=response.charset_encoding,
                body=body,
                truncated=truncated,
                retry_after=retry_after,
            )
        finally:
            await response.aclose()
    raise AssertionError("unreachable")  # pragma: no cover - the loop always returns


async def follow(client: httpx.AsyncClient, url: str, settings: Settings) -> Fetched | Page:
    """GET ``url`` following redirects hop by hop; a :class:`Page` when a hop failed."""
    current = url
    seen = {url}
    for hop in range(rules.MAX_REDIRECTS + 1):
        try:
            fetched = await _get(client, current, settings)
        except (httpx.TransportError, httpx.InvalidURL) as error:
            return error_page(url, error, current)
        if fetched.location is None:
            return fetched
        target = urljoin(current, fetched.location)
        if target in seen or hop == rules.MAX_REDIRECTS:
            why = "a redirect loop" if target in seen else f"more than {rules.MAX_REDIRECTS} hops"
            return rules.labelled(
                url,
                Label.unreachable,
                Reason.too_many_redirects,
                f"{why} (last hop {current} -> {target})",
                final_url=target,
                original_status=fetched.status,
            )
        seen.add(target)
        current = target
    raise AssertionError("unreachable")  # pragma: no cover


#: Part of every extraction-cache key: bump it when ``html_to_markdown`` changes
#: what it returns, so texts extracted the old way are ignored.
EXTRACTION_VERSION = "1"


def _extraction_path(html: str, readable: bool, cache_dir: Path) -> Path:
    material = f"{EXTRACTION_VERSION}\0{readable}\0{html}".encode("utf-8", "surrogatepass")
    digest = hashlib.sha256(material).hexdigest()
    return cache_dir / digest[:2] / f"{digest}.md"


def cached_extraction(html: str, *, readable: bool = True, cache_dir: Path | None) -> str | None:
    """The text :func:`extract` remembered for ``html``, or None (no cache, not there)."""
    if cache_dir is None:
        return None
    try:
        return _extraction_path(html, readable, cache_dir).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def extract(html: str, *, readable: bool = True, cache_dir: Path | None = None) -> str:
    """:func:`html_to_markdown`, remembered on disk when ``cache_dir`` is set.

    Extraction is the costliest step of replaying a directly fetched page (a few
    ms of CPU per page, every run, since cassettes keep the raw HTML). The cache
    is keyed by the HTML itself, so a re-recorded page never meets a stale text;
    like the embedding cache, it sits beside the cassettes and may be committed.
    Files are written atomically; an unreadable one is simply extracted again.
    """
    cached = cached_extraction(html, readable=readable, cache_dir=cache_dir)
    if cached is not None:
        return cached
    text = html_to_markdown(html, readable=readable)
    if cache_dir is None:
        return text
    path = _extraction_path(html, readable, cache_dir)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
    except OSError:  # a read-only checkout still verifies, only slower
        logger.debug("cannot write the extraction cache at %s", path, exc_info=True)
    return text


async def _extract(html: str, *, readable: bool = True, cache_dir: Path | None) -> str:
    """:func:`extract` off the event loop, unless the cache answers (a small file read)."""
    cached = cached_extraction(html, readable=readable, cache_dir=cache_dir)
    if cached is not None:
        return cached
    return await run_blocking(extract, html, readable=readable, cache_dir=cache_dir)


async def page_from(url: str, fetched: Fetched, cache_dir: Path | None = None) -> Page:
    """Apply the content handling and the shared rules to the last hop's answer."""
    final_url, status = fetched.url, fetched.status
    decided = rules.check_page(url, url, text="", final_url=final_url, original_status=status)
    if decided is not None:
        return decided
    kind = content_kind(fetched.content_type, fetched.body)
    cut = f"page cut at {len(fetched.body)} bytes" if fetched.truncated else None
    if kind == "binary":
        media = fetched.content_type.split(";", 1)[0].strip() or "unknown type"
        return rules.labelled(
            url,
            Label.not_found,
            Reason.binary_content,
            f"{media} is not text",
            final_url=final_url,
            original_status=status,
        )
    tried = "main-content extraction"
    if kind == "pdf":
        text = await run_blocking(pdf_to_text, fetched.body)
        if not text.strip():
            if fetched.truncated:
                return rules.labelled(
                    url,
                    Label.not_found,
                    Reason.page_too_large,
                    f"PDF larger than the {len(fetched.body)}-byte cap cannot be read",
                    final_url=final_url,
                    original_status=status,
                )
            return rules.labelled(
                url,
                Label.not_found,
                Reason.pdf_unsupported,
                "no text in the PDF",
                final_url=final_url,
                original_status=status,
            )
        tried = "PDF text extraction"
    elif kind == "html":
        html = decode_body(fetched.body, fetched.charset, html=True)
        text = await _extract(html, cache_dir=cache_dir)
        if rules.is_thin(text):
            fallback = await _extract(html, readable=False, cache_dir=cache_dir)
            if rules.readable_chars(fallback) > rules.readable_chars(text):
                text = fallback
            tried = "main-content extraction and the whole-page text (no JavaScript in direct mode)"
    else:
        text = decode_body(fetched.body, fetched.charset, html=False)
        tried = "reading the text"
    decided = rules.check_page(url, url, text=text, final_url=final_url, original_status=status)
    if decided is not None:
        return decided
    if rules.is_thin(text):
        return rules.thin_outcome(
            url, text, final_url=final_url, original_status=status, rid=None, tried=tried
        )
    return rules.accepted(url, text, final_url=final_url, original_status=status, detail=cut)


async def fetch_direct(url: str, settings: Settings, recorder: Recorder) -> Page:
    """Fetch ``url`` with httpx (no Crawlbase) under every rule of DESIGN.md §5."""
    key = {"source": url, "fetcher": FETCHER}
    deadline = settings.timeout * PAGE_DEADLINE_FACTOR
    async with (
        recorder.session("page", key) as inner,
        transport_module.client_for(inner, timeout=settings.timeout) as client,
    ):
        try:
            async with asyncio.timeout(deadline):
                fetched = await follow(client, url, settings)
        except TimeoutError:
            return rules.labelled(
                url,
                Label.unreachable,
                Reason.timeout,
                f"no complete answer within {deadline:g} seconds",
            )
    if isinstance(fetched, Page):
        return fetched
    return await page_from(url, fetched, settings.extraction_cache_dir)
