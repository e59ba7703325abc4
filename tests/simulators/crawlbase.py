"""The Crawlbase Crawling API and Storage API, scripted, over real HTTP.

It never touches the network: each target URL maps to a scripted :class:`Target`.
Documented behaviours reproduced (crawlbase.com/docs: Crawling API parameters and
response, Storage API; seed 000; the SDK 1.1.0 source):

* ``GET /?token=…&url=…`` with ``format`` (``md`` → the page as Markdown, else
  HTML), ``md_readability=true`` (readable Markdown: navigation and boilerplate
  removed), ``store=true`` (the answer is stored in Cloud Storage and a
  ``storage_url`` header returned), ``javascript=true`` (render with a browser;
  a request with the JavaScript token is rendered too);
* response headers ``original_status`` (the origin's status), ``cb_status`` and
  its older name ``pc_status`` (Crawlbase's own status; ``state.cb_status_header = False``
  sends only ``pc_status``), ``url`` (the final URL
  after the redirects Crawlbase followed), ``storage_url`` =
  ``https://api.crawlbase.com/storage?token=<token>&rid=<rid>`` — it carries the
  caller's token, so tests prove the client drops it — and, when
  ``state.rid_header`` is set, a ``rid`` header;
* a 404/410 origin is a successful crawl: HTTP 200, ``cb_status`` 200 and the
  real ``original_status``;
* a failed crawl answers HTTP 520 with an empty body and no crawl headers;
* ``cb_status`` 207: the origin answered 200 with an empty page;
* a missing or unknown token answers 401 (our assumption: the docs only say the
  token is required for all calls);
* rate limiting answers 429 (the docs' documented signal), here scriptable per
  target as a queue of API errors (with ``Retry-After``);
* ``GET /storage?token=…&rid=…`` — the Storage API: the stored body, with headers
  ``rid``, ``url``, ``original_status``, ``pc_status``, ``stored_at``; 404 for an
  unknown rid. Either token (normal or JavaScript) reads any rid.

Scripting: ``state.targets[url] = Target(...)``; ``state.calls[(url, mode)]``
counts calls, ``mode`` one of ``readable``, ``full``, ``js-readable``, ``js-full``;
``state.requests`` keeps every query (as dicts) in order. Start it with
``start_crawlbase()`` or the ``crawlbase_api`` fixture; point the code at it with
``Settings(crawlbase_api_url=sim.url + "/", crawlbase_token=NORMAL_TOKEN)``.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ._server import QuietHandler, Simulator

NORMAL_TOKEN = "cb-normal-token-0123456789"
JS_TOKEN = "cb-js-token-9876543210"

BOILING_MARKDOWN = (
    "# The boiling point of water\n\n"
    "Water boils at 100 degrees Celsius at sea level. This is the temperature at which the "
    "vapour pressure of water equals the standard atmospheric pressure of 101.325 kilopascals."
    "\n\nAt higher altitudes the air pressure is lower, so water boils at a lower temperature: "
    "on the summit of Mount Everest it boils at about 70 degrees Celsius.\n"
)
LONG_404_MARKDOWN = "# HTTP 404 explained\n\n" + "\n\n".join(
    f"Section {n}: a 404 Not Found status means the server cannot find the requested "
    "resource. Browsers show a 404 page and crawlers treat a 404 as a dead link."
    for n in range(1, 10)
)
SOFT_404_MARKDOWN = "# Page not found\n\nSorry, the page you are looking for does not exist.\n"
HOMEPAGE_MARKDOWN = (
    "# Example Science\n\nWelcome to Example Science, your source for friendly explanations of "
    "everyday physics and chemistry. Browse our latest articles and subscribe to the newsletter "
    "for weekly updates on experiments you can do at home.\n"
)


@dataclass
class Target:
    """What Crawlbase answers for one target URL (in one rendering mode)."""

    original_status: int = 200
    #: Markdown with ``md_readability=true``.
    markdown: str = ""
    #: Markdown without readability; None means the same as ``markdown``.
    markdown_full: str | None = None
    #: HTML for ``format=html``; None means ``markdown`` wrapped in ``<pre>``.
    html: str | None = None
    #: The ``url`` header; None means the requested URL.
    final_url: str | None = None
    #: HTTP status of the API answer (520 for a failed crawl).
    api_status: int = 200
    #: ``cb_status``/``pc_status`` (207: origin answered 200 with an empty page).
    cb_status: int = 200
    #: What a JavaScript-rendered request gets; None means the same as this target.
    js: Target | None = None
    #: Statuses answered (in order) before the real answer, e.g. ``[429, 503]``.
    api_errors: list[int] = field(default_factory=list)
    #: ``Retry-After`` sent with each scripted API error.
    retry_after: str = "0"


@dataclass
class CrawlbaseState:
    targets: dict[str, Target] = field(default_factory=dict)
    tokens: set[str] = field(default_factory=lambda: {NORMAL_TOKEN})
    js_tokens: set[str] = field(default_factory=lambda: {JS_TOKEN})
    #: Send a ``rid`` header besides ``storage_url`` (the docs show only storage_url).
    rid_header: bool = False
    #: False: answer like the older API, with ``pc_status`` only (no ``cb_status``).
    cb_status_header: bool = True
    calls: Counter[tuple[str, str]] = field(default_factory=Counter)
    requests: list[dict[str, str]] = field(default_factory=list)
    storage_reads: Counter[str] = field(default_factory=Counter)
    stored: dict[str, dict[str, Any]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _rids: int = 0

    def reset(self, targets: dict[str, Target] | None = None) -> None:
        """Back to ``targets`` (default: :func:`default_targets`), counters and storage emptied."""
        fresh = default_targets() if targets is None else targets
        with self.lock:
            self.targets = fresh
            self.tokens = {NORMAL_TOKEN}
            self.js_tokens = {JS_TOKEN}
            self.rid_header = False
            self.cb_status_header = True
            self.calls.clear()
            self.requests.clear()
            self.storage_reads.clear()
            self.stored.clear()
            self._rids = 0

    def new_rid(self) -> str:
        with self.lock:
            self._rids += 1
            return f"rid-{self._rids:04d}"

    def calls_for(self, url: str) -> dict[str, int]:
        """Calls per mode for one target URL (modes never called are absent)."""
        return {mode: n for (target, mode), n in self.calls.items() if target == url}


def default_targets() -> dict[str, Target]:
    """The seed's example pages, under ``https://example.com``."""
    site = "https://example.com"
    thin_shell = "Loading…"
    return {
        f"{site}/articles/water-boiling-point": Target(markdown=BOILING_MARKDOWN),
        f"{site}/old-report": Target(original_status=404, markdown="# Not Found\n"),
        f"{site}/retired": Target(original_status=410, markdown="# Gone\n"),
        f"{site}/articles/moved": Target(markdown=HOMEPAGE_MARKDOWN, final_url=f"{site}/"),
        f"{site}/missing-article": Target(markdown=SOFT_404_MARKDOWN),
        f"{site}/articles/http-404-explained": Target(markdown=LONG_404_MARKDOWN),
        # Readability strips a short page too far; the raw Markdown is fine.
        f"{site}/short-note": Target(
            markdown="# Note\n",
            markdown_full="# Note\n\n" + BOILING_MARKDOWN,
        ),
        # A single-page app: thin without a browser, fine rendered.
        f"{site}/app": Target(
            markdown=thin_shell,
            markdown_full=thin_shell,
            js=Target(markdown=BOILING_MARKDOWN),
        ),
        # The crawl fails without a browser (HTTP 520).
        f"{site}/spa-520": Target(api_status=520, js=Target(markdown=BOILING_MARKDOWN)),
        # The origin answered 200 with an empty page (cb_status 207).
        f"{site}/empty-200": Target(cb_status=207, js=Target(markdown=BOILING_MARKDOWN)),
        # Thin however it is fetched.
        f"{site}/always-thin": Target(markdown=thin_shell),
    }


class CrawlbaseHandler(QuietHandler):
    server_version = "CrawlbaseSimulator/1.0"

    @property
    def state(self) -> CrawlbaseState:
        return self.server.state  # type: ignore[attr-defined, no-any-return]

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = {key: values[0] for key, values in parse_qs(parts.query).items()}
        with self.state.lock:
            self.state.requests.append(dict(query))
        if parts.path.rstrip("/") == "/storage":
            self._storage(query)
        elif parts.path == "/":
            self._crawl(query)
        else:
            self.send_json(404, {"error": "unknown endpoint"})

    def _token_kind(self, token: str | None) -> str | None:
        if token in self.state.js_tokens:
            return "js"
        if token in self.state.tokens:
            return "normal"
        return None

    def _crawl(self, query: dict[str, str]) -> None:
        state = self.state
        token = query.get("token")
        kind = self._token_kind(token)
        if kind is None:
            self.send_json(401, {"error": "invalid token"})
            return
        url = query.get("url")
        if not url:
            self.send_json(400, {"error": "url is required"})
            return
        javascript = kind == "js" or query.get("javascript") == "true"
        readable = query.get("md_readability") == "true"
        mode = ("js-" if javascript else "") + ("readable" if readable else "full")
        with state.lock:
            state.calls[(url, mode)] += 1
            base = state.targets.get(url)
            error = base.api_errors.pop(0) if base is not None and base.api_errors else None
        if error is not None:
            self.send(error, "", headers={"Retry-After": base.retry_after} if base else None)
            return
        if base is None:
            base = Target(original_status=404, markdown="# Not Found\n")
        target = base.js if javascript and base.js is not None else base
        if target.api_status == 520:
            self.send(520, b"", content_type="text/plain")
            return
        if query.get("format") == "md":
            body = (
                target.markdown
                if readable or target.markdown_full is None
                else (target.markdown_full)
            )
            content_type = "text/markdown; charset=utf-8"
        else:
            body = target.html if target.html is not None else f"<pre>{target.markdown}</pre>"
            content_type = "text/html; charset=utf-8"
        if target.cb_status == 207:
            body = ""
        final_url = target.final_url or url
        headers = {
            "original_status": str(target.original_status),
            "cb_status": str(target.cb_status),
            "pc_status": str(target.cb_status),
            "url": final_url,
        }
        if not state.cb_status_header:
            del headers["cb_status"]
        if query.get("store") == "true":
            rid = state.new_rid()
            with state.lock:
                state.stored[rid] = {
                    "body": body,
                    "url": final_url,
                    "original_status": target.original_status,
                    "cb_status": target.cb_status,
                }
            headers["storage_url"] = f"https://api.crawlbase.com/storage?token={token}&rid={rid}"
            if state.rid_header:
                headers["rid"] = rid
        self.send(target.api_status, body, content_type=content_type, headers=headers)

    def _storage(self, query: dict[str, str]) -> None:
        state = self.state
        if self._token_kind(query.get("token")) is None:
            self.send_json(401, {"error": "invalid token"})
            return
        rid = query.get("rid", "")
        with state.lock:
            state.storage_reads[rid] += 1
            stored = state.stored.get(rid)
        if stored is None:
            self.send_json(404, {"error": "not found"})
            return
        self.send(
            200,
            stored["body"],
            content_type="text/plain; charset=utf-8",
            headers={
                "rid": rid,
                "url": stored["url"],
                "original_status": str(stored["original_status"]),
                "pc_status": str(stored["cb_status"]),
                "stored_at": "2025-01-01T00:00:00+00:00",
            },
        )


def start_crawlbase(targets: dict[str, Target] | None = None) -> Simulator:
    """Start the API (default targets unless given) on 127.0.0.1:<free port>."""
    state = CrawlbaseState(targets=default_targets() if targets is None else targets)
    return Simulator(CrawlbaseHandler, state).start()
