"""The page rules every fetcher shares (DESIGN.md §5), and the :class:`Page` they produce.

One implementation, three fetchers: the Crawling API over httpx, the official SDK
and direct HTTP all hand their result to the functions below, so a 404 means the
same thing whichever way the page came in. The rules run in this order, and the
first that fires decides the page:

1. :func:`status_outcome` — the origin's HTTP status (404/410 → ``unreachable``);
2. :func:`is_homepage_redirect` — a deep link that landed on ``/`` → ``not_found``;
3. :func:`is_soft_404` — a short "page does not exist" template → ``not_found``;
4. :func:`is_thin` — fewer than :data:`MIN_READABLE_CHARS` non-whitespace characters:
   the fetcher tries its fallbacks (no readability, JavaScript); a page still thin
   after all of them is ``not_found``/``thin_page`` (``empty_page`` when nothing at all).

The soft-404 check runs before the thin check on purpose: a "Page not found"
template is usually *also* thin, and recognising it first saves the billed
readability retry and JavaScript escalation that could not change the answer.

The module also holds the small HTTP helpers both httpx fetchers share (bounded
retries honouring ``Retry-After``, reading a body up to a byte cap), so no rule or
policy is written twice.
"""

from __future__ import annotations

import asyncio
import email.utils
import re
import time
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, ConfigDict

from pytest_citations.models import Label, Reason

#: Fewer non-whitespace characters than this after readability is a failed pass
#: (seed 000): an application rule, not a Crawlbase limit.
MIN_READABLE_CHARS = 200
#: A soft-404 template is short; a page at least this long (non-whitespace) that
#: mentions 404 is an article about it, not an error page (seed 000).
SOFT_404_MAX_CHARS = 800
#: Redirect hops followed before giving up: browsers stop at about 20; ten is
#: plenty for a citation and bounds the work a hostile site can cause.
MAX_REDIRECTS = 10
#: A ``Retry-After`` longer than this is not waited for: the fetch fails now
#: rather than stalling a test run for minutes.
MAX_RETRY_AFTER_SECONDS = 30.0
#: Statuses worth asking again: rate limiting and transient server trouble.
RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
#: Origin statuses that mean "the page exists but will not show itself"
#: (login, payment, blocked, legal): the page is not usable evidence.
WALLED_STATUSES = frozenset({401, 402, 403, 451})

#: Phrases of a "this page does not exist" template, in the languages we meet
#: most. A bare "404" is not enough: it needs an error word next to it.
_SOFT_404_PATTERN = re.compile(
    r"\bpage (?:was |is )?not found\b|\bwas not found on this server\b"
    r"|\b(?:page|article|post|content|document|resource|url|link|file)\b[^.\n]{0,40}?"
    r"\b(?:does not|doesn't|do not|don't|no longer|may no longer|might not) "
    r"(?:exist|be available|available)"
    r"|\b(?:could not|couldn't|can't|cannot|can not|unable to) (?:be )?(?:find|found|locate)\b"
    r"[^.\n]{0,30}\b(?:page|article|post|content|document|url|link|what you)"
    r"|\b(?:page|article|post|content)\b[^.\n]{0,30}(?:has been|was) (?:removed|deleted)"
    r"|\b404\b[^.\n]{0,20}\b(?:error|not found|page)\b|\berror:? 404\b"
    r"|\bn'existe (?:pas|plus)\b|\bpage introuvable\b"
    r"|\bseite nicht gefunden\b|\bp[áa]gina no encontrada\b",
    re.IGNORECASE,
)


class Page(BaseModel):
    """One fetched source: its text, where it ended up, and any label the fetch decided.

    ``label`` is set only when the fetch rules themselves decide the citation
    (``unreachable`` or ``not_found``); the judge is then never called and
    ``text`` is empty. ``detail`` is for humans and never holds a secret.
    """

    model_config = ConfigDict(frozen=True)

    source: str
    text: str = ""
    final_url: str | None = None
    original_status: int | None = None
    rid: str | None = None
    label: Label | None = None
    reason: str | None = None
    detail: str | None = None
    sections: dict[str, str] | None = None


def labelled(
    source: str,
    label: Label,
    reason: Reason | str,
    detail: str | None = None,
    *,
    final_url: str | None = None,
    original_status: int | None = None,
    rid: str | None = None,
) -> Page:
    """A page the fetch rules decided: no text, the judge is skipped."""
    return Page(
        source=source,
        final_url=final_url,
        original_status=original_status,
        rid=rid,
        label=label,
        reason=reason.value if isinstance(reason, Reason) else reason,
        detail=detail,
    )


def readable_chars(text: str) -> int:
    """Non-whitespace characters: the measure every size rule uses."""
    return len("".join(text.split()))


def is_thin(text: str) -> bool:
    """Fewer than :data:`MIN_READABLE_CHARS` non-whitespace characters."""
    return readable_chars(text) < MIN_READABLE_CHARS


def is_soft_404(text: str) -> bool:
    """A short page whose readable text is a "page does not exist" template.

    Only under :data:`SOFT_404_MAX_CHARS` non-whitespace characters, so a long
    article that mentions 404 (or "could not find") is never discarded.
    """
    if readable_chars(text) >= SOFT_404_MAX_CHARS:
        return False
    return _SOFT_404_PATTERN.search(text) is not None


def _normalized_path(url: str) -> str:
    path = urlsplit(url).path or "/"
    if len(path) > 1 and path.endswith("/"):
        path = path[:-1]
    return path or "/"


def is_homepage_redirect(requested: str, final: str | None) -> bool:
    """True when a deep link (path deeper than ``/``) landed on ``/`` (seed 000)."""
    if not final:
        return False
    return _normalized_path(requested) != "/" and _normalized_path(final) == "/"


def status_outcome(status: int | None) -> tuple[Label, str] | None:
    """The label an origin HTTP status decides, or None when the page should be read.

    * 2xx (and an unknown status): read the page;
    * 404, 410: ``unreachable`` ``http_404``/``http_410`` (DESIGN.md §2);
    * 429 and 5xx (after the fetcher's retries): ``unreachable`` ``http_<status>``
      — the origin did not answer usefully, which is "could not reach it";
    * 401/402/403/451 (paywall, login, block) and every other 3xx/4xx:
      ``not_found`` ``http_<status>`` — the page may exist, but what the public
      gets is not evidence, so the claim is not settled by it.
    """
    if status is None or 200 <= status < 300:
        return None
    if status == 404:
        return Label.unreachable, Reason.http_404.value
    if status == 410:
        return Label.unreachable, Reason.http_410.value
    if status == 429 or status >= 500:
        return Label.unreachable, f"http_{status}"
    return Label.not_found, f"http_{status}"


def check_page(
    source: str,
    requested_url: str,
    *,
    text: str,
    final_url: str | None,
    original_status: int | None,
    rid: str | None = None,
    detail: str | None = None,
) -> Page | None:
    """Rules 1-3 on one fetched page: the decided :class:`Page`, or None to go on.

    None means the page passed the status, homepage and soft-404 rules; the
    caller then applies :func:`is_thin` and its own fallbacks.
    """
    outcome = status_outcome(original_status)
    if outcome is not None:
        label, reason = outcome
        why = f"the origin answered HTTP {original_status}"
        if original_status in WALLED_STATUSES:
            why += " (login, paywall or block: the public page is not evidence)"
        return labelled(
            source,
            label,
            reason,
            why,
            final_url=final_url,
            original_status=original_status,
            rid=rid,
        )
    if is_homepage_redirect(requested_url, final_url):
        return labelled(
            source,
            Label.not_found,
            Reason.redirected_to_homepage,
            f"the deep link redirected to the site's homepage ({final_url})",
            final_url=final_url,
            original_status=original_status,
            rid=rid,
        )
    if text and is_soft_404(text):
        return labelled(
            source,
            Label.not_found,
            Reason.soft_404,
            f"HTTP {original_status or 200} page whose text is a 'page not found' template",
            final_url=final_url,
            original_status=original_status,
            rid=rid,
        )
    return None


def thin_outcome(
    source: str,
    text: str,
    *,
    final_url: str | None,
    original_status: int | None,
    rid: str | None,
    tried: str,
) -> Page:
    """The page that stayed thin after every fallback ``tried`` (a human-readable list)."""
    chars = readable_chars(text)
    reason = Reason.empty_page if chars == 0 else Reason.thin_page
    return labelled(
        source,
        Label.not_found,
        reason,
        f"{chars} readable characters (under {MIN_READABLE_CHARS}) after {tried}",
        final_url=final_url,
        original_status=original_status,
        rid=rid,
    )


def accepted(
    source: str,
    text: str,
    *,
    final_url: str | None,
    original_status: int | None,
    rid: str | None = None,
    detail: str | None = None,
    sections: dict[str, str] | None = None,
) -> Page:
    """A page that passed every rule: its text goes to passages and the judge."""
    return Page(
        source=source,
        text=text,
        final_url=final_url,
        original_status=original_status,
        rid=rid,
        detail=detail,
        sections=sections,
    )


# --- shared HTTP helpers -------------------------------------------------------------


def retry_delay(retry_after: str | None, attempt: int, base: float) -> float | None:
    """Seconds to wait before retrying after failed attempt ``attempt`` (0-based), or None.

    A ``Retry-After`` header value (seconds or an HTTP date) wins when present;
    above :data:`MAX_RETRY_AFTER_SECONDS` we give up (None) instead of stalling.
    Otherwise exponential backoff from ``base`` (``settings.retry_backoff``).
    """
    if retry_after:
        seconds = parse_retry_after(retry_after)
        if seconds is not None:
            return seconds if seconds <= MAX_RETRY_AFTER_SECONDS else None
    return float(base * (2**attempt))


def parse_retry_after(value: str) -> float | None:
    """``Retry-After`` as seconds from now (RFC 9110: delay-seconds or an HTTP date)."""
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


async def sleep(seconds: float) -> None:
    """The one place fetchers wait (tests may monkeypatch it)."""
    await asyncio.sleep(seconds)


async def read_capped(response: httpx.Response, cap: int) -> tuple[bytes, bool]:
    """Read a streamed body up to ``cap`` bytes; True when the rest was left unread.

    The stream is abandoned as soon as the cap is reached, so a 10 MB (or
    endless) page costs at most ``cap`` bytes of memory. One iterator serves the
    whole read: httpx refuses a second ``aiter_bytes()`` on a started stream.
    """
    chunks: list[bytes] = []
    size = 0
    stream = response.aiter_bytes()
    async for chunk in stream:
        room = cap - size
        if len(chunk) >= room:
            chunks.append(chunk[:room])
            # Anything beyond the cap (even one byte) means the page was cut.
            if len(chunk) > room:
                return b"".join(chunks), True
            async for more in stream:
                if more:
                    return b"".join(chunks), True
            return b"".join(chunks), False
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks), False
