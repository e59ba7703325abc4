"""A small scripted website: the origin servers cited pages live on, over real HTTP.

Behaviours reproduced (each a route in :func:`default_routes`), the cases seed 000
and DESIGN.md §5 name:

* ``/articles/water-boiling-point`` — an article stating water boils at 100 °C at
  sea level, with navigation, sidebar and footer boilerplate around it;
* ``/articles/jwt`` — an article on JSON Web Tokens; ``/articles/http-404-explained``
  — a long article that mentions 404 many times (not a soft 404);
* ``/old-report`` — HTTP 404; ``/retired`` — HTTP 410;
* ``/missing-article`` — a soft 404: HTTP 200 with a short "page not found" template;
* ``/articles/moved`` — a deep link that redirects (302) to ``/``; ``/`` — the homepage;
* ``/redirect/one`` → ``/redirect/two`` → the boiling article (a legitimate chain);
* ``/loop/a`` ⇄ ``/loop/b`` — a redirect loop;
* ``/app`` — a JavaScript-only shell (``<div id="root"></div>``);
* ``/paper.pdf`` — a real PDF with extractable text; ``/empty.pdf`` — a PDF with no text;
* ``/logo.png`` — a binary (``image/png``);
* ``/latin1`` — a Latin-1 page declared in the Content-Type charset;
  ``/meta-charset`` — a windows-1252 page declared only in ``<meta charset>``;
* ``/huge`` — a 10 MB page streamed in chunks (the client must stop reading);
* ``/paywall`` — HTTP 403; ``/flaky`` — 503 (``Retry-After: 0``) once, then the article;
  ``/down`` — always 503; ``/slow`` — answers after a delay (timeouts);
* ``/notes.txt`` — plain text.

Scripting: ``state.routes`` is a plain dict path → :class:`Route` (or a list of
routes served in turn, the last repeating). Add or replace entries freely, e.g.
``website.state.routes["/claim"] = html_page("Title", "<p>Body</p>")``.
``state.hits[path]`` counts requests; ``state.completed[path]`` counts bodies
written in full (a client that stopped reading leaves it at 0).

Start it with ``start_website()`` (a :class:`~simulators._server.Simulator`),
or the ``website`` fixture in ``tests/conftest.py``.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ._server import QuietHandler, Simulator

BOILING_SENTENCE = "Water boils at 100 degrees Celsius at sea level."
JWT_SENTENCE = (
    "A JSON Web Token (JWT) is a compact, URL-safe means of representing claims "
    "to be transferred between two parties."
)
PDF_SENTENCE = "The mitochondria is the powerhouse of the cell."


@dataclass
class Route:
    """One scripted answer. ``body`` may be a callable yielding chunks (streamed)."""

    status: int = 200
    body: bytes | str | Callable[[], Iterator[bytes]] = b""
    content_type: str = "text/html; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)
    #: Seconds to wait before answering (for timeout tests).
    delay: float = 0.0
    #: Content-Length announced for a streamed body.
    length: int | None = None


@dataclass
class WebsiteState:
    routes: dict[str, Route | list[Route]] = field(default_factory=dict)
    hits: Counter[str] = field(default_factory=Counter)
    completed: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self, routes: dict[str, Route | list[Route]] | None = None) -> None:
        """Back to ``routes`` (default: :func:`default_routes`) with zeroed counters."""
        fresh = default_routes() if routes is None else routes
        with self.lock:
            self.routes = fresh
            self.hits.clear()
            self.completed.clear()

    def next_route(self, path: str) -> Route | None:
        with self.lock:
            self.hits[path] += 1
            count = self.hits[path]
            route = self.routes.get(path)
        if isinstance(route, list):
            return route[min(count, len(route)) - 1] if route else None
        return route


def html_page(title: str, body_html: str, *, status: int = 200, charset: str = "utf-8") -> Route:
    """A full HTML document with site chrome (nav, sidebar, footer) around ``body_html``."""
    html = (
        "<!doctype html><html><head>"
        f'<meta charset="{charset}"><title>{title}</title></head><body>'
        '<nav><a href="/">Home</a> | <a href="/articles">Articles</a> | '
        '<a href="/about">About</a></nav>'
        f"<main><article><h1>{title}</h1>{body_html}</article></main>"
        '<aside><h2>Related</h2><ul><li><a href="/a">Another story</a></li></ul></aside>'
        "<footer><p>Copyright 2024 Example Science. All rights reserved.</p></footer>"
        "</body></html>"
    )
    return Route(
        status=status, body=html.encode(charset), content_type=f"text/html; charset={charset}"
    )


def redirect(location: str, status: int = 302) -> Route:
    return Route(status=status, headers={"Location": location}, content_type="text/plain")


def minimal_pdf(lines: list[str]) -> bytes:
    """A valid one-page PDF whose content stream draws ``lines`` in Helvetica."""

    def escape(text: str) -> str:
        return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")

    ops = ["BT", "/F1 12 Tf", "14 TL", "72 720 Td"]
    for line in lines:
        ops.append(f"({escape(line)}) Tj T*")
    ops.append("ET")
    stream = "\n".join(ops).encode("latin-1")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length " + str(len(stream)).encode() + b" >>\nstream\n" + stream + b"\nendstream",
    ]
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, obj in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + obj + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    for offset in offsets:
        out += f"{offset:010d} 00000 n \n".encode()
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n"
    ).encode()
    return bytes(out)


def tiny_png() -> bytes:
    """A valid 1x1 PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return len(data).to_bytes(4, "big") + kind + data + crc.to_bytes(4, "big")

    header = (1).to_bytes(4, "big") * 2 + b"\x08\x02\x00\x00\x00"
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


HUGE_BYTES = 10 * 1024 * 1024
_HUGE_CHUNK = (
    b"<p>"
    + b"Filler paragraph of a very large page that repeats for many megabytes. " * 13
    + b"</p>\n"
)


def _huge_body() -> Iterator[bytes]:
    yield b"<!doctype html><html><head><title>Huge</title></head><body><article>"
    yield b"<h1>Huge page</h1><p>" + BOILING_SENTENCE.encode() + b"</p>"
    sent = 0
    while sent < HUGE_BYTES:
        yield _HUGE_CHUNK
        sent += len(_HUGE_CHUNK)


def _paragraphs(*sentences: str) -> str:
    return "".join(f"<p>{sentence}</p>" for sentence in sentences)


def default_routes() -> dict[str, Route | list[Route]]:
    """A fresh copy of the default site (mutate it freely in a test)."""
    boiling = html_page(
        "The boiling point of water",
        _paragraphs(
            BOILING_SENTENCE
            + " This is the temperature at which the vapour pressure of water equals "
            "the standard atmospheric pressure of 101.325 kilopascals.",
            "At higher altitudes the air pressure is lower, so water boils at a lower "
            "temperature: on the summit of Mount Everest it boils at about 70 degrees "
            "Celsius, which is why cooking takes longer in the mountains.",
            "Dissolving salt in water raises its boiling point slightly, an effect known "
            "as boiling point elevation.",
        ),
    )
    jwt = html_page(
        "JSON Web Tokens in practice",
        _paragraphs(
            JWT_SENTENCE,
            'The "exp" (expiration time) claim identifies the expiration time on or after '
            "which the JWT must not be accepted for processing. Its use is optional.",
            'The "aud" claim identifies the recipients that the JWT is intended for; a '
            "recipient that does not identify itself with a value in the claim must reject "
            "the token.",
        ),
    )
    http_404 = html_page(
        "HTTP 404 explained",
        _paragraphs(
            *(
                f"Section {n}: a 404 Not Found status means the server cannot find the "
                "requested resource. Browsers show a 404 page, and crawlers treat a 404 as "
                "a dead link. A soft 404 is a page that says it does not exist while "
                "answering 200, which confuses search engines and link checkers alike."
                for n in range(1, 8)
            )
        ),
    )
    soft_404 = html_page(
        "Page not found",
        "<p>Sorry, the page you are looking for does not exist.</p>"
        '<p><a href="/">Return to the homepage</a></p>',
    )
    homepage = html_page(
        "Example Science",
        _paragraphs(
            "Welcome to Example Science, your source for friendly explanations of everyday "
            "physics and chemistry. Browse our latest articles, subscribe to the newsletter "
            "and follow us for weekly updates on experiments you can do at home.",
            "Featured this week: why ice floats, how rainbows form, and what makes a "
            "pressure cooker faster than a saucepan.",
        ),
    )
    latin1_html = (
        "<html><head><title>Crème brûlée</title></head><body><article>"
        "<h1>Crème brûlée</h1><p>La crème brûlée est un dessert français à base de crème, "
        "de jaunes d'œufs et de sucre, dont la surface est caramélisée au chalumeau juste "
        "avant de servir. Le contraste entre la croûte craquante et la crème froide fait "
        "tout son charme ; on la sert dans des ramequins peu profonds.</p>"
        "</article></body></html>"
    ).replace("œ", "oe")
    meta_html = latin1_html.replace("<head>", '<head><meta charset="windows-1252">').replace(
        "Crème brûlée</h1>", "Crème brûlée – façon “maison”</h1>"
    )
    notes = (
        "Field notes, plain text.\n\n"
        + BOILING_SENTENCE
        + " We measured it three times with a calibrated thermometer at the harbour, "
        "and each reading was within half a degree of the textbook value. At the mountain "
        "hut the same kettle boiled at 93 degrees.\n"
    )
    return {
        "/": homepage,
        "/articles/water-boiling-point": boiling,
        "/articles/jwt": jwt,
        "/articles/http-404-explained": http_404,
        "/old-report": html_page("Not Found", "<p>404 Not Found</p>", status=404),
        "/retired": html_page("Gone", "<p>This report was retired.</p>", status=410),
        "/missing-article": soft_404,
        "/articles/moved": redirect("/"),
        "/redirect/one": redirect("/redirect/two", 301),
        "/redirect/two": redirect("/articles/water-boiling-point", 307),
        "/loop/a": redirect("/loop/b"),
        "/loop/b": redirect("/loop/a"),
        "/app": Route(
            body='<!doctype html><html><head><title>App</title><script src="/app.js"></script>'
            '</head><body><div id="root"></div></body></html>'
        ),
        "/paper.pdf": Route(
            body=minimal_pdf(
                [
                    "Cell biology notes.",
                    PDF_SENTENCE,
                    "Mitochondria produce most of the chemical energy needed to power the",
                    "biochemical reactions of the cell, stored as adenosine triphosphate.",
                    "They have their own DNA, inherited from the mother in most animals.",
                ]
            ),
            content_type="application/pdf",
        ),
        "/empty.pdf": Route(body=minimal_pdf([]), content_type="application/pdf"),
        "/logo.png": Route(body=tiny_png(), content_type="image/png"),
        "/latin1": Route(
            body=latin1_html.encode("latin-1"), content_type="text/html; charset=ISO-8859-1"
        ),
        "/meta-charset": Route(body=meta_html.encode("windows-1252"), content_type="text/html"),
        "/huge": Route(body=_huge_body, length=None),
        "/paywall": html_page("Subscribe", "<p>Subscribe to read this article.</p>", status=403),
        "/flaky": [
            Route(status=503, body="busy", content_type="text/plain", headers={"Retry-After": "0"}),
            boiling,
        ],
        "/down": Route(
            status=503, body="down", content_type="text/plain", headers={"Retry-After": "0"}
        ),
        "/slow": Route(body="<p>late</p>", delay=3.0),
        "/notes.txt": Route(body=notes, content_type="text/plain; charset=utf-8"),
    }


class WebsiteHandler(QuietHandler):
    server_version = "ExampleSite/1.0"

    def do_GET(self) -> None:
        state: WebsiteState = self.server.state  # type: ignore[attr-defined]
        route = state.next_route(self.path)
        if route is None:
            self.send(404, "<h1>Not Found</h1>", content_type="text/html; charset=utf-8")
            return
        if route.delay:
            time.sleep(route.delay)
        if callable(route.body):
            self._stream(state, route)
            return
        self.send(route.status, route.body, content_type=route.content_type, headers=route.headers)
        with state.lock:
            state.completed[self.path] += 1

    do_HEAD = do_GET

    def _stream(self, state: WebsiteState, route: Route) -> None:
        assert callable(route.body)
        self.send_response(route.status)
        self.send_header("Content-Type", route.content_type)
        for name, value in route.headers.items():
            self.send_header(name, value)
        if route.length is not None:
            self.send_header("Content-Length", str(route.length))
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        try:
            for chunk in route.body():
                self.wfile.write(chunk)
        except (BrokenPipeError, ConnectionResetError):
            return
        with state.lock:
            state.completed[self.path] += 1


def start_website(routes: dict[str, Route | list[Route]] | None = None) -> Simulator:
    """Start the site (default routes unless given) on 127.0.0.1:<free port>."""
    state = WebsiteState(routes=default_routes() if routes is None else routes)
    return Simulator(WebsiteHandler, state).start()
