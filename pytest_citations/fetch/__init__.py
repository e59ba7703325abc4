"""Stage 1: turn a cited source into a :class:`Page` (DESIGN.md §5).

:func:`fetch_page` dispatches on the source and the configured fetcher:

* a path or ``file://`` URL → :mod:`.local` (no network);
* ``http(s)`` with ``fetcher="crawlbase"`` (the default when ``CRAWLBASE_TOKEN``
  is set) → :mod:`.crawlbase`, the Crawling API over httpx;
* ``fetcher="crawlbase-sdk"`` → :mod:`.sdk`, the official SDK, opt-in;
* ``fetcher="direct"`` (the default without a token) → :mod:`.direct`.

It never raises for content problems (dead link, DNS failure, timeout, binary):
those are labels with reasons on the page. It raises ``SourceError`` for a local
path that cannot be read (or an empty source) and ``MissingCredentialError``
(from the transport) for a Crawlbase call that would go out without a token.

:class:`PageCache` fetches each distinct (source, fetcher) once per process.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from urllib.parse import urlsplit

from pytest_citations.errors import SourceError
from pytest_citations.fetch.rules import Page
from pytest_citations.models import Label, Reason
from pytest_citations.settings import Settings
from pytest_citations.transport import Recorder

__all__ = [
    "LOCAL_FETCHER",
    "Page",
    "PageCache",
    "fetch_page",
    "fetcher_for",
    "read_stored_page",
]

#: The fetcher name of local documents (they never touch the network).
LOCAL_FETCHER = "local"


def fetcher_for(source: str, settings: Settings) -> str:
    """Which fetcher handles ``source``: ``local``, or the configured web fetcher."""
    from pytest_citations.fetch.local import is_local_source

    return LOCAL_FETCHER if is_local_source(source.strip()) else settings.resolved_fetcher


def _malformed(target: str) -> str | None:
    """Why ``target`` is no usable URL (a bad IPv6 literal, port or host name), or None.

    Checked before any fetcher runs, so a malformed citation is a label, never a crash.
    """
    try:
        parts = urlsplit(target)
        parts.port  # noqa: B018 - raises ValueError on a port out of range
        host = parts.hostname
    except ValueError as error:
        return f"malformed URL: {error}"
    if host and parts.scheme.lower() in ("http", "https"):
        try:
            host.encode("idna")
        except UnicodeError:
            return f"malformed host name {host[:80]!r}"
    return None


async def fetch_page(source: str, settings: Settings, recorder: Recorder) -> Page:
    """Fetch one source under the rules of DESIGN.md §5 (see the module docstring)."""
    from pytest_citations.fetch import rules

    target = source.strip()
    if not target:
        raise SourceError("a source must be a URL (http/https) or a local path, got ''")
    why = _malformed(target)
    if why is not None:
        return rules.labelled(source, Label.unreachable, Reason.invalid_url, why)
    fetcher = fetcher_for(target, settings)
    if fetcher == LOCAL_FETCHER:
        from pytest_citations._threads import run_blocking
        from pytest_citations.fetch.local import load_local

        page = await run_blocking(load_local, target, settings)
        return page if page.source == source else page.model_copy(update={"source": source})
    parts = urlsplit(target)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        why = (
            f"unsupported scheme {parts.scheme!r}"
            if parts.scheme.lower() not in ("http", "https")
            else "no host"
        )
        return rules.labelled(source, Label.unreachable, Reason.invalid_url, why)
    if fetcher == "crawlbase":
        from pytest_citations.fetch.crawlbase import fetch_crawlbase

        page = await fetch_crawlbase(target, settings, recorder)
    elif fetcher == "crawlbase-sdk":
        from pytest_citations.fetch.sdk import fetch_sdk

        page = await fetch_sdk(target, settings, recorder)
    else:
        from pytest_citations.fetch.direct import fetch_direct

        page = await fetch_direct(target, settings, recorder)
    return page if page.source == source else page.model_copy(update={"source": source})


async def read_stored_page(rid: str, settings: Settings, recorder: Recorder) -> str:
    """The page Crawlbase stored under ``rid`` (Storage API); see :mod:`.crawlbase`."""
    from pytest_citations.fetch.crawlbase import read_stored_page as read

    return await read(rid, settings, recorder)


class PageCache:
    """Fetches each distinct (source, fetcher) once per process, however many cite it.

    Concurrent requests for a page already in flight wait for that fetch instead
    of starting another. Finished pages are plain immutable values, so the cache
    works across separate ``asyncio.run`` calls: the only loop-bound object it
    holds is the task of a fetch *in flight*, which is dropped when it finishes
    (or is cancelled with its loop); a caller on another loop starts its own
    fetch. Failed fetches (exceptions) are not cached: the next call tries again.
    """

    def __init__(self) -> None:
        self._pages: dict[tuple[str, str], Page] = {}
        self._inflight: dict[
            tuple[str, str], tuple[asyncio.AbstractEventLoop, asyncio.Task[Page]]
        ] = {}
        self._lock = threading.Lock()
        #: How many fetches actually ran (for tests and reports).
        self.fetches = 0

    def __len__(self) -> int:
        return len(self._pages)

    def __contains__(self, key: object) -> bool:
        return key in self._pages

    def clear(self) -> None:
        """Forget every finished page (fetches in flight still complete)."""
        with self._lock:
            self._pages.clear()

    async def get(self, source: str, settings: Settings, recorder: Recorder) -> Page:
        """The page for ``source``, fetched at most once per (source, fetcher)."""
        key = (source, fetcher_for(source, settings))
        loop = asyncio.get_running_loop()
        with self._lock:
            page = self._pages.get(key)
            if page is not None:
                return page
            entry = self._inflight.get(key)
            if entry is not None and entry[0] is loop and not entry[1].done():
                task = entry[1]
            else:
                task = loop.create_task(fetch_page(source, settings, recorder))
                self._inflight[key] = (loop, task)
                self.fetches += 1
                task.add_done_callback(functools.partial(self._finished, key))
        # shield: one caller being cancelled must not cancel the others' fetch.
        return await asyncio.shield(task)

    def _finished(self, key: tuple[str, str], task: asyncio.Task[Page]) -> None:
        with self._lock:
            entry = self._inflight.get(key)
            if entry is not None and entry[1] is task:
                del self._inflight[key]
            if not task.cancelled() and task.exception() is None:
                self._pages[key] = task.result()
