"""Local documents (a path or a ``file://`` URL) and the RFC-layout section splitter.

A local document is what the caller chose to cite, so no web rule applies: no
status, no soft-404 or thin check; the page has ``label=None``,
``original_status=None`` and ``final_url`` = the file's URI. A file that cannot
be read raises :class:`~pytest_citations.errors.SourceError` naming the path.

Text is read as UTF-8 (a BOM is dropped, undecodable bytes become U+FFFD);
``.html``/``.htm`` files go through the same main-content extraction as direct
mode and ``.pdf`` files through the same PDF text extraction.

RFC-layout documents (seed 003) — recognised by the ``Request for Comments: N``
line of the title page or by repeated ``[Page N]`` footers — lose their running
page headers and footers, and get ``sections``: "4.1.3" → that section's text.
:func:`load_rfc` and :func:`split_sections` reproduce seed 003's ``load_source``
and ``split_sections`` exactly, with the header/footer patterns generalised
from RFC 7519's authors and date to any RFC.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlsplit
from urllib.request import url2pathname

from pytest_citations.errors import SourceError
from pytest_citations.fetch import rules
from pytest_citations.fetch.rules import Page
from pytest_citations.settings import Settings

_MONTHS = "January|February|March|April|May|June|July|August|September|October|November|December"
#: The running footer of an RFC page: "Jones, et al.   Standards Track   [Page 12]".
RFC_FOOTER = re.compile(r"\S.*\s\[Page \d+\]$")
#: The running header: "RFC 7519   JSON Web Token (JWT)   May 2015".
RFC_HEADER = re.compile(rf"RFC \d+\s+.*\S\s+(?:{_MONTHS}) \d{{4}}$")
#: The title-page line every RFC carries.
RFC_MARKER = re.compile(r"(?m)^Request for Comments:\s*\d+")
#: Section header lines (seed 003): "4.1.3.  "aud" (Audience) Claim", or an
#: appendix header, which only ends the numbered section before it.
SECTION_BOUNDARY = re.compile(r"(?m)^(?:(\d+(?:\.\d+)*)\.  .+|Appendix [A-Z]\..*)$")
#: Footers needed to call a document without the title-page marker an RFC:
#: one could be a coincidence, a run of them is a page layout.
MIN_RFC_FOOTERS = 2
#: How far into a document the title-page marker is looked for.
RFC_MARKER_WINDOW = 5000


def is_local_source(source: str) -> bool:
    """A ``file://`` URL or a path (no scheme, or a Windows drive letter)."""
    try:
        scheme = urlsplit(source).scheme.lower()
    except ValueError:  # a malformed URL (bad IPv6 literal): fetch_page labels it
        return False
    return scheme == "file" or scheme == "" or (len(scheme) == 1 and scheme.isalpha())


def local_path(source: str) -> Path:
    """The filesystem path a local source names."""
    parts = urlsplit(source)
    if parts.scheme.lower() == "file":
        if parts.netloc not in ("", "localhost"):
            raise SourceError(f"cannot read {source}: file URLs on another host are not supported")
        return Path(url2pathname(unquote(parts.path)))
    return Path(source).expanduser()


def is_rfc_layout(text: str) -> bool:
    """True for the plain-text layout of an RFC (title page, or paged footers)."""
    if RFC_MARKER.search(text[:RFC_MARKER_WINDOW]):
        return True
    footers = 0
    for line in text.splitlines():
        if RFC_FOOTER.match(line.lstrip("\f")):
            footers += 1
            if footers >= MIN_RFC_FOOTERS:
                return True
    return False


def load_rfc(text: str) -> str:
    """An RFC without the page headers and footers that interrupt its paragraphs."""
    lines = []
    for line in text.splitlines():
        bare = line.lstrip("\f")
        if RFC_FOOTER.match(bare) or RFC_HEADER.match(bare):
            continue
        lines.append(bare)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines))


def split_sections(source: str) -> dict[str, str]:
    """Map each numbered section ("4.1.3") to its text, split on the RFC's header lines.

    A section runs from its header line to the next header (of any level) or
    appendix header; a repeated number keeps its last occurrence, as in seed 003.
    """
    marks = list(SECTION_BOUNDARY.finditer(source))
    sections: dict[str, str] = {}
    for index, mark in enumerate(marks):
        number = mark.group(1)
        if number is None:  # an appendix header only terminates the section before it
            continue
        end = marks[index + 1].start() if index + 1 < len(marks) else len(source)
        sections[number] = source[mark.start() : end].strip()
    return sections


def _read(path: Path, cap: int) -> tuple[bytes, bool]:
    try:
        with path.open("rb") as handle:
            data = handle.read(cap + 1)
    except FileNotFoundError:
        hint = " (a web source needs http:// or https://)" if "/" in str(path) else ""
        raise SourceError(f"cannot read local source {path}: no such file{hint}") from None
    except IsADirectoryError:
        raise SourceError(f"cannot read local source {path}: it is a directory") from None
    except OSError as error:
        raise SourceError(f"cannot read local source {path}: {error.strerror or error}") from None
    return data[:cap], len(data) > cap


def load_local(source: str, settings: Settings) -> Page:
    """Read a local document into a :class:`Page` (blocking: run it in a thread)."""
    path = local_path(source.strip())
    data, truncated = _read(path, settings.max_page_bytes)
    suffix = path.suffix.lower()
    sections: dict[str, str] | None = None
    if suffix == ".pdf":
        from pytest_citations.fetch.direct import pdf_to_text

        text = pdf_to_text(data)
    else:
        text = data.decode("utf-8-sig", errors="replace")
        if suffix in (".html", ".htm"):
            from pytest_citations.fetch.direct import html_to_markdown

            text = html_to_markdown(text) or html_to_markdown(text, readable=False)
        elif is_rfc_layout(text):
            text = load_rfc(text)
            sections = split_sections(text) or None
        else:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
    detail = f"document cut at {settings.max_page_bytes} bytes" if truncated else None
    try:
        uri = path.resolve().as_uri()
    except ValueError:  # pragma: no cover - resolve() always yields an absolute path
        uri = str(path)
    return rules.accepted(
        source, text, final_url=uri, original_status=None, detail=detail, sections=sections
    )
