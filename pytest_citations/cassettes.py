"""The cassette recorder: one vcrpy cassette on disk per unit of network work.

:class:`CassetteRecorder` implements the :class:`~pytest_citations.transport.Recorder`
seam. For each ``recorder.session(kind, key)`` it loads (or starts) the cassette
that belongs to that key and yields a :class:`CassetteTransport`, an
``httpx.AsyncBaseTransport`` that replays recorded interactions and sends the
rest to the network, recording them. It uses vcrpy's ``Cassette``, ``Request``,
YAML serializer and matcher protocol, but never vcrpy's global patching:

* several citations run concurrently in one event loop, each with its own
  cassette, which one process-wide ``vcr.use_cassette`` cannot express;
* a user's own cassette (``@pytest.mark.vcr`` of pytest-recording, or
  ``vcr.use_cassette``) may be active at the same time. vcrpy then replaces
  ``httpx.AsyncHTTPTransport.handle_async_request`` *on the class*, so a live
  call through any ``AsyncHTTPTransport`` would be captured into, or refused by,
  the user's cassette. Our live calls therefore call the original method that
  vcrpy saved when ``vcr.patch`` was imported
  (``vcr.patch._HttpxAsyncHttpTransport_handle_async_request``); see
  :func:`_send_unpatched`.

Cassette identity
-----------------
One cassette per key, never per test, so renaming or reparametrising a test
orphans nothing and every citation of one page shares its recording::

    <directory>/pages/<slug>-<hash>.yaml     key {"source", "fetcher"}
    <directory>/judge/<slug>-<hash>.yaml     key {"claim", "source", "quote", "section",
                                                  "provider", "model", "pipeline"}
    <directory>/storage/<slug>-<hash>.yaml   key {"rid"}

``slug`` is readable (the page's host and path, or the claim's first words);
``hash`` is 8 hex digits of the SHA-256 of the key as canonical JSON, with the
port of a loopback URL dropped (a local simulator listens on a random port).

Matching (:data:`MATCH_ON`) compares the method, the path and query of the URL
without secret query parameters (``token``…), and bodies as parsed JSON when both
parse (bytes otherwise); a loopback ``host:port`` inside a query or body is
compared without the port. Scheme, host and port are not compared: the cassette
file already names its unit (the page, or the claim + provider + model), so a
recording made through a local simulator, a proxy or another ``OPENAI_BASE_URL`` /
``CRAWLBASE_API_URL`` replays against the default endpoints, and requests within
one unit replay in the order they were recorded.
Headers are not compared: they carry keys and change with client versions.

Record modes (:data:`RECORD_MODES`)
-----------------------------------
``none``: replay only; a request with no recording raises
:class:`~pytest_citations.errors.CassetteMissingError`. ``once``: replay an
existing cassette, record a missing one. ``new_episodes``: replay what matches
and record (append) the rest. ``all``: send everything and rewrite the cassette.

Writes and secrets
------------------
Before anything is kept, requests lose the Crawlbase ``token`` (and other
secret query parameters), ``Authorization``, ``x-api-key``, ``api-key`` and
``Cookie`` values; responses lose ``Set-Cookie`` and the token inside
``storage_url`` (header or JSON body), and are stored decoded (gzip, deflate,
brotli) so a reviewer can read them. Every known secret value (see
:func:`known_secrets`) is replaced by ``<VARIABLE>`` wherever it appears. The
file is written to a temporary file and moved into place (``os.replace``); a new
cassette is created with ``os.link`` so two pytest-xdist workers that recorded
the same page never interleave (the second finds the first's equivalent file and
keeps it). After the write the file is read back and checked for every secret
value; a file holding one is deleted and
:class:`~pytest_citations.errors.SecretInCassetteError` names the variable.

Transport errors (DNS failure, refused connection, timeout, blocked address)
are recorded too, as an interaction whose response carries the header
``x-pytest-citations-error: <exception class>``; replay raises the same class,
so a dead link replays as the same ``unreachable`` verdict.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import json
import os
import re
import tempfile
import threading
import unicodedata
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, urlparse, urlsplit, urlunsplit

import httpx
import yaml

from pytest_citations import transport as transport_module
from pytest_citations.errors import CassetteError, CassetteMissingError, SecretInCassetteError
from pytest_citations.settings import ENV_NAMES, SECRET_FIELDS
from pytest_citations.transport import LiveTransport, PooledTransport, UnitKind

if TYPE_CHECKING:
    from pytest_citations.settings import Settings

__all__ = [
    "ERROR_HEADER",
    "MATCH_ON",
    "RECORD_MODES",
    "SECRET_ENV_VARS",
    "CassetteRecorder",
    "CassetteTransport",
    "RecorderStats",
    "cassette_path",
    "known_secrets",
    "scrub_request",
    "scrub_response",
]

#: The four record modes, as vcrpy and pytest-recording name them.
RECORD_MODES: tuple[str, ...] = ("none", "once", "new_episodes", "all")

#: Folder per unit kind under the cassette directory.
KIND_FOLDERS: dict[str, str] = {"page": "pages", "judge": "judge", "storage": "storage"}

#: Secret environment variables checked in every written file, whatever the settings say.
SECRET_ENV_VARS: tuple[str, ...] = (
    "CRAWLBASE_TOKEN",
    "CRAWLBASE_JS_TOKEN",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
)

#: Secret values shorter than this are not searched for: a 3-character "key"
#: would match ordinary page text and refuse every cassette, and no real API
#: token is that short.
MIN_SECRET_LENGTH = 6

#: Response header that marks a recorded transport error (the value is the class name).
ERROR_HEADER = "x-pytest-citations-error"
#: Status stored with a recorded transport error; never sent by a real server here.
ERROR_STATUS = 599

SCRUBBED = "<scrubbed>"
_SECRET_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "api-key", "cookie"}
)
_SECRET_RESPONSE_HEADERS = frozenset({"set-cookie", "set-cookie2"})
_SECRET_QUERY = ("token", "api_key", "apikey", "access_token", "key")
_QUERY_SECRET_RE = re.compile(
    r"([?&](?:" + "|".join(_SECRET_QUERY) + r")=)[^&#\s\"'<>]*", re.IGNORECASE
)
_STORAGE_URL_BODY_RE = re.compile(
    r"(\"storage_url\"\s*:\s*\"[^\"]*?[?&]token=)[^&\"]*", re.IGNORECASE
)
_LOOPBACK_PORT_RE = re.compile(
    r"(?<![\w.])((?:127(?:\.\d{1,3}){3})|localhost|\[::1\]):\d{1,5}", re.IGNORECASE
)


# -- identity -----------------------------------------------------------------------


def strip_loopback_ports(text: str) -> str:
    """``http://127.0.0.1:54321/x`` → ``http://127.0.0.1/x``; other hosts keep their port."""
    # The regex scans every position of a judge request's passages (tens of KB,
    # matched on every replay); a text naming no loopback host skips it.
    if "127." not in text and "[::1]" not in text and "localhost" not in text.lower():
        return text
    return _LOOPBACK_PORT_RE.sub(r"\1", text)


def _canonical_key(key: Mapping[str, str]) -> dict[str, str]:
    return {name: strip_loopback_ports(str(value)) for name, value in sorted(key.items())}


def key_hash(key: Mapping[str, str]) -> str:
    """8 hex digits of the SHA-256 of the canonical key (sorted JSON, loopback ports dropped)."""
    text = json.dumps(_canonical_key(key), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]


def slugify(text: str, max_length: int = 60) -> str:
    """Lower-case ASCII words joined by ``-``, cut at a word boundary."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    slug = re.sub(r"[^a-z0-9.]+", "-", ascii_text.lower()).strip("-.")
    slug = re.sub(r"-{2,}", "-", slug)
    if len(slug) > max_length:
        cut = slug[:max_length]
        slug = cut.rsplit("-", 1)[0] if "-" in cut[max_length // 2 :] else cut
    return slug.strip("-.")


def _slug_for(kind: str, key: Mapping[str, str]) -> str:
    if kind == "page":
        source = strip_loopback_ports(key.get("source", ""))
        parts = urlsplit(source)
        if parts.scheme in ("http", "https"):
            text = f"{parts.hostname or ''}/{parts.path}?{parts.query}"
        else:  # a local document: its file name says enough
            text = Path(parts.path or source).name
        return slugify(text) or "page"
    if kind == "judge":
        return slugify(key.get("claim", ""), 50) or "judge"
    return slugify(" ".join(str(value) for _, value in sorted(key.items())), 50) or kind


def cassette_path(directory: Path | str, kind: str, key: Mapping[str, str]) -> Path:
    """Where the cassette of one unit of work lives (see the module docstring)."""
    folder = KIND_FOLDERS.get(kind, kind)
    return Path(directory) / folder / f"{_slug_for(kind, key)}-{key_hash(key)}.yaml"


# -- secrets ------------------------------------------------------------------------


def known_secrets(
    settings: Settings | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Variable name → value of every secret we know: the settings' and the environment's."""
    source = os.environ if environ is None else environ
    secrets: dict[str, str] = {}
    if settings is not None:
        for field_name in SECRET_FIELDS:
            value = getattr(settings, field_name)
            if value is not None and value.get_secret_value():
                secrets[ENV_NAMES[field_name]] = value.get_secret_value()
    for variable in SECRET_ENV_VARS:
        value = source.get(variable)
        if value and variable not in secrets:
            secrets[variable] = value
        elif value and secrets.get(variable) != value:
            secrets[f"{variable} (environment)"] = value
    return {name: value for name, value in secrets.items() if len(value) >= MIN_SECRET_LENGTH}


def _secret_forms(value: str) -> set[str]:
    return {value, quote(value, safe=""), quote(value, safe="/:")}


def _replace_secrets_text(text: str, secrets: Mapping[str, str]) -> str:
    for name, value in secrets.items():
        for form in _secret_forms(value):
            if form in text:
                text = text.replace(form, f"<{name.split(' ')[0]}>")
    return text


def _replace_secrets_bytes(data: bytes, secrets: Mapping[str, str]) -> bytes:
    for name, value in secrets.items():
        for form in _secret_forms(value):
            encoded = form.encode("utf-8")
            if encoded in data:
                data = data.replace(encoded, f"<{name.split(' ')[0]}>".encode())
    return data


def _scrub_body(body: Any, secrets: Mapping[str, str]) -> Any:
    if isinstance(body, bytes):
        return _replace_secrets_bytes(body, secrets)
    if isinstance(body, str):
        return _replace_secrets_text(body, secrets)
    return body


def _strip_userinfo(uri: str) -> str:
    """``https://user:pass@host/x`` → ``https://host/x``: credentials in a URL are secrets."""
    parts = urlsplit(uri)
    if "@" not in parts.netloc:
        return uri
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def scrub_uri(uri: str, secrets: Mapping[str, str]) -> str:
    """The URI without userinfo, secret query parameters or any known secret value."""
    cleaned = _QUERY_SECRET_RE.sub(lambda m: m.group(1) + SCRUBBED, _strip_userinfo(uri))
    return _replace_secrets_text(cleaned, secrets)


def scrub_headers(headers: Mapping[str, Any], secrets: Mapping[str, str]) -> dict[str, str]:
    """Credential headers replaced by a marker, known secret values masked."""
    return {
        name: SCRUBBED
        if name.lower() in _SECRET_HEADERS
        else _replace_secrets_text(str(value), secrets)
        for name, value in headers.items()
    }


def scrub_request(request: Any, secrets: Mapping[str, str]) -> Any:
    """A copy of a vcrpy request without credentials (idempotent)."""
    request = copy.deepcopy(request)
    request.uri = scrub_uri(request.uri, secrets)
    request.headers = scrub_headers(request.headers, secrets)
    request.body = _scrub_body(request.body, secrets)
    return request


def scrub_response(response: dict[str, Any], secrets: Mapping[str, str]) -> dict[str, Any]:
    """A decoded copy of a vcrpy response dict without cookies, storage tokens or secrets."""
    from vcr.filters import decode_response

    response = decode_response(response)  # deep-copies
    headers: dict[str, list[str]] = {}
    for name, values in response.get("headers", {}).items():
        if name.lower() in _SECRET_RESPONSE_HEADERS:
            continue
        cleaned = []
        for value in values:
            text = str(value)
            if name.lower() in ("storage_url", "storage-url", "location", "url"):
                text = _QUERY_SECRET_RE.sub(lambda m: m.group(1) + SCRUBBED, text)
            cleaned.append(_replace_secrets_text(text, secrets))
        headers[name] = cleaned
    response["headers"] = headers
    body = response.get("body", {}).get("string")
    if isinstance(body, bytes) and b"storage_url" in body:
        with contextlib.suppress(UnicodeDecodeError):
            body = _STORAGE_URL_BODY_RE.sub(
                lambda m: m.group(1) + SCRUBBED, body.decode("utf-8")
            ).encode("utf-8")
    response["body"] = {"string": _scrub_body(body, secrets)}
    return response


# -- matching -----------------------------------------------------------------------


#: Query parameters that say *how* a request was authorised, not what it asks for:
#: a Crawlbase JavaScript escalation sends ``javascript=true`` on the normal token,
#: or nothing with ``CRAWLBASE_JS_TOKEN``. A recording made one way replays the other.
_UNMATCHED_QUERY = frozenset({*_SECRET_QUERY, "javascript"})


def _normal_query(request: Any) -> list[tuple[str, str]]:
    pairs = parse_qsl(request.parsed_uri.query, keep_blank_values=True)
    return sorted(
        (name, strip_loopback_ports(value))
        for name, value in pairs
        if name.lower() not in _UNMATCHED_QUERY
    )


def match_url(r1: Any, r2: Any) -> None:
    """Path and query without secrets; scheme, host and port are the unit's, not compared."""
    left = (r1.path or "/", _normal_query(r1))
    right = (r2.path or "/", _normal_query(r2))
    if left != right:
        raise AssertionError(f"{r1.uri} != {r2.uri} (port and secret parameters ignored)")


#: Attribute under which a vcrpy request keeps its parsed body: vcrpy runs the
#: matchers twice per replayed request (``can_play_response_for``, then
#: ``play_response``), and a judge request's body is kilobytes of JSON.
_BODY_VALUE_ATTRIBUTE = "_pytest_citations_body_value"


def _body_value(request: Any) -> Any:
    """The request's body as compared (see :func:`match_body`), parsed once per body."""
    body = request.body
    cached = getattr(request, _BODY_VALUE_ATTRIBUTE, None)
    if cached is not None and cached[0] is body:
        return cached[1]
    value = _parse_body(body)
    with contextlib.suppress(AttributeError):  # a request type that takes no new attributes
        setattr(request, _BODY_VALUE_ATTRIBUTE, (body, value))
    return value


def _parse_body(body: Any) -> Any:
    if hasattr(body, "read"):
        body = body.read()
    if isinstance(body, str):
        body = body.encode("utf-8")
    if not body:
        return b""
    try:
        return json.loads(strip_loopback_ports(body.decode("utf-8")))
    except (UnicodeDecodeError, ValueError):
        return body


def match_body(r1: Any, r2: Any) -> None:
    """Bodies equal after JSON parsing (key order and spacing ignored), else byte-equal."""
    if _body_value(r1) != _body_value(r2):
        raise AssertionError("the request bodies differ")


def match_method(r1: Any, r2: Any) -> None:
    if r1.method != r2.method:
        raise AssertionError(f"{r1.method} != {r2.method}")


#: vcrpy matchers for every cassette (see the module docstring).
MATCH_ON: tuple[Callable[[Any, Any], None], ...] = (match_method, match_url, match_body)


# -- persistence --------------------------------------------------------------------


class _Persister:
    """vcrpy persister: atomic writes, create-if-absent, and the secret check."""

    def __init__(self, secrets: Mapping[str, str], *, overwrite: bool) -> None:
        self.secrets = secrets
        self.overwrite = overwrite
        self.written: list[Path] = []

    def load_cassette(self, cassette_path: str | Path, serializer: Any) -> Any:
        # FilesystemPersister.load_cassette, minus its Path round trip and the
        # stat before the open.
        from vcr.persisters.filesystem import CassetteDecodeError, CassetteNotFoundError
        from vcr.serialize import deserialize

        try:
            with open(cassette_path, encoding="utf-8") as stream:
                data = stream.read()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise CassetteNotFoundError() from None
        except UnicodeDecodeError as error:
            raise CassetteDecodeError("Can't read Cassette, Encoding is broken") from error
        return deserialize(data, serializer)

    def _leaks(self, text: str) -> list[str]:
        return sorted(
            name
            for name, value in self.secrets.items()
            if any(form in text for form in _secret_forms(value))
        )

    def save_cassette(self, cassette_path: Path, cassette_dict: Any, serializer: Any) -> None:
        from vcr.serialize import serialize

        path = Path(cassette_path)
        data = serialize(cassette_dict, serializer)
        leaked = self._leaks(data) or self._leaks(serialize(cassette_dict, _Unfolded))
        if leaked:
            raise _secret_error(path, leaked, written=False)
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(
            dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp"
        )
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                stream.write(data)
            if self.overwrite or not _link_if_absent(temporary, path):
                os.replace(temporary, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
        text = path.read_text(encoding="utf-8")
        leaked = self._leaks(text)
        if leaked:
            path.unlink(missing_ok=True)
            raise _secret_error(path, leaked, written=True)
        self.written.append(path)


class _Unfolded:
    """A vcrpy serializer for the secret search only: one line per string.

    YAML folds long lines, so a secret could straddle a line break in the file;
    this form cannot. Bytes (a PDF, an image) are read as Latin-1, one character
    per byte, so an ASCII secret inside them is still found (vcrpy's JSON
    serializer, used before, refuses such bodies: a binary page could not be
    recorded).
    """

    @staticmethod
    def serialize(data: Any) -> str:
        def text(value: Any) -> str:
            if isinstance(value, bytes | bytearray):
                return bytes(value).decode("latin-1")
            raise TypeError(f"{type(value).__name__} in a cassette")

        return json.dumps(data, default=text, ensure_ascii=False)


def _link_if_absent(temporary: str, path: Path) -> bool:
    """Create ``path`` from ``temporary`` only if absent. True when handled.

    ``os.link`` fails atomically when the target exists: another worker
    recorded the same unit, with equivalent content, and its file is kept. On a
    filesystem without hard links this returns False and the caller replaces.
    """
    try:
        os.link(temporary, path)
    except FileExistsError:
        return True
    except OSError:
        return False
    return True


def _secret_error(path: Path, variables: Iterable[str], *, written: bool) -> SecretInCassetteError:
    names = ", ".join(sorted({name.split(" ")[0] for name in variables}))
    action = "was deleted" if written else "was not written"
    return SecretInCassetteError(
        f"the cassette {path} would contain the value of {names}; it {action}. "
        "Report this: a request or response carries the secret where the scrubber "
        "does not look."
    )


# -- replay -------------------------------------------------------------------------

#: libyaml's safe loader when PyYAML was built with it (the wheels are), else PyYAML's.
_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class ReplayRequest:
    """A request as the matchers see it, in the shape of vcrpy's ``Request``.

    ``uri`` is parsed with ``urlparse`` and a text body becomes UTF-8 bytes,
    exactly as vcrpy does, so :data:`MATCH_ON` compares the same values whichever
    reader loaded the cassette. Headers keep each name's first value (vcrpy's
    ``HeadersDict`` does the same); they are never compared.
    """

    def __init__(self, method: str, uri: str, body: Any, headers: Mapping[str, Any]) -> None:
        self.method = method
        self.uri = uri
        self.parsed_uri = urlparse(uri)
        self.body = body.encode("utf-8") if isinstance(body, str) else body
        self.headers = {
            name: value[0] if isinstance(value, list) and value else value
            for name, value in headers.items()
        }

    @property
    def path(self) -> str:
        return self.parsed_uri.path

    def __repr__(self) -> str:
        return f"<Request ({self.method}) {self.uri}>"


def _failures(request: Any, stored: Any) -> list[tuple[str, str]]:
    """(matcher name, message) for each matcher of :data:`MATCH_ON` that does not match."""
    failures = []
    for matcher in MATCH_ON:
        try:
            matcher(request, stored)
        except AssertionError as error:
            failures.append((matcher.__name__, str(error)))
    return failures


def _checked_response(response: Any) -> dict[str, Any]:
    """A recorded response in the shape replay reads, its body as bytes (as vcrpy gives it).

    Raises ``ValueError`` for anything else, so a hand-edited or damaged file is
    reported as a corrupt cassette instead of failing half-way through a replay.
    """
    status = response.get("status") if isinstance(response, dict) else None
    if not isinstance(status, dict) or not isinstance(status.get("code"), int):
        raise ValueError("an interaction without a response status code")
    headers = response.get("headers", {})
    if not isinstance(headers, dict) or not all(
        isinstance(values, list) and all(isinstance(value, str) for value in values)
        for values in headers.values()
    ):
        raise ValueError("response headers that are not lists of strings")
    body = response.get("body", {})
    text = body.get("string") if isinstance(body, dict) else 0
    if not isinstance(text, str | bytes | None):
        raise ValueError("a response body that is not text or bytes")
    if isinstance(text, str):
        response = {**response, "body": {**body, "string": text.encode("utf-8")}}
    return dict(response)


class ReplayCassette:
    """A vcrpy cassette file read for replay only: record mode ``none``, or ``once``
    with the file present (vcrpy write-protects both).

    vcrpy records every cassette; replaying one needs only its YAML, the
    matchers and vcrpy's rule that each recorded interaction answers once, in
    order. Reading it here skips importing vcrpy (which imports every HTTP
    library it can patch) and vcrpy's per-interaction deep copies, the larger
    share of a warm replay's cost. A file that uses a YAML tag only vcrpy's
    loader knows (an old cassette with Python tags) is left to vcrpy's
    ``Cassette``; ``tests/test_cassettes.py`` checks both readers agree.
    """

    write_protected = True
    request_type = ReplayRequest

    def __init__(self, path: Path, interactions: list[tuple[ReplayRequest, dict[str, Any]]]):
        self.path = str(path)
        self.interactions = interactions
        self._played = [False] * len(interactions)

    @classmethod
    def read(cls, path: Path, *, missing_ok: bool) -> ReplayCassette | None:
        """The cassette at ``path``; None when vcrpy must load it.

        A missing file is an empty cassette when ``missing_ok`` (record mode
        ``none``: nothing will be recorded), else None (``once`` records it).
        Raises ``yaml.YAMLError``, ``ValueError``, ``KeyError`` or ``TypeError``
        for a file that is not a cassette.
        """
        try:
            with open(path, encoding="utf-8") as stream:
                text = stream.read()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return cls(path, []) if missing_ok else None
        except UnicodeDecodeError as error:
            raise ValueError(f"not UTF-8 text ({error})") from None
        try:
            data = yaml.load(text, Loader=_SAFE_LOADER)
        except yaml.constructor.ConstructorError:
            return None  # a Python tag: vcrpy's loader knows the ones it wrote
        if not isinstance(data, dict) or not isinstance(data.get("interactions"), list):
            raise ValueError("no 'interactions' list: not a vcrpy cassette")
        interactions = []
        for interaction in data["interactions"]:
            recorded = interaction["request"]
            request = ReplayRequest(
                recorded["method"], recorded["uri"], recorded.get("body"), recorded["headers"]
            )
            interactions.append((request, _checked_response(interaction["response"])))
        return cls(path, interactions)

    def __len__(self) -> int:
        return len(self.interactions)

    def _next_unplayed(self, request: Any) -> int | None:
        for index, (stored, _) in enumerate(self.interactions):
            if not self._played[index] and not _failures(request, stored):
                return index
        return None

    def can_play_response_for(self, request: Any) -> bool:
        return self._next_unplayed(request) is not None

    def play_response(self, request: Any) -> dict[str, Any]:
        index = self._next_unplayed(request)
        if index is None:
            raise CassetteMissingError(f"{self.path} has no unplayed recording of {request!r}")
        self._played[index] = True
        return self.interactions[index][1]

    def find_requests_with_most_matches(
        self, request: Any
    ) -> list[tuple[Any, list[str], list[tuple[str, str]]]]:
        """vcrpy's hint for a miss: the stored requests that pass the most matchers."""
        scored = []
        for stored, _ in self.interactions:
            failures = _failures(request, stored)
            successes = [m.__name__ for m in MATCH_ON if m.__name__ not in dict(failures)]
            scored.append((len(successes), stored, successes, failures))
        best = max((score for score, *_ in scored), default=0)
        return [(stored, ok, failed) for score, stored, ok, failed in scored if score == best > 0]


# -- the recorder -------------------------------------------------------------------


@dataclass
class RecorderStats:
    """Requests answered from cassettes vs sent to the network, and cassettes written."""

    replayed: int = 0
    live: int = 0
    written: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, *, replayed: int = 0, live: int = 0, written: int = 0) -> None:
        with self._lock:
            self.replayed += replayed
            self.live += live
            self.written += written

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {"replayed": self.replayed, "live": self.live, "written": self.written}


async def _send_unpatched(pool: httpx.AsyncHTTPTransport, request: httpx.Request) -> httpx.Response:
    """Send through ``pool`` bypassing a user's active vcrpy cassette.

    vcrpy saves the original ``AsyncHTTPTransport.handle_async_request`` in
    ``vcr.patch`` before it patches the class; calling that function directly
    sends our request to the network whatever cassette the user has open.
    """
    response: httpx.Response = await _original_handle_async_request()(pool, request)
    return response


@functools.cache
def _original_handle_async_request() -> Callable[..., Any]:
    try:
        from vcr import patch as vcr_patch
    except ImportError:  # pragma: no cover - vcrpy is a dependency
        return httpx.AsyncHTTPTransport.handle_async_request
    original = getattr(vcr_patch, "_HttpxAsyncHttpTransport_handle_async_request", None)
    return original or httpx.AsyncHTTPTransport.handle_async_request


def _live_transport(allow_private_hosts: bool) -> LiveTransport:
    # LiveTransport keeps its checks (credentials, SSRF guard) and delegates the
    # send to ``inner``: the shared connection pool, reached around vcrpy's patch
    # so a user's cassette cannot capture it.
    return LiveTransport(
        allow_private_hosts=allow_private_hosts,
        inner=PooledTransport(send=_send_unpatched),
    )


class CassetteTransport(httpx.AsyncBaseTransport):
    """Replays from one vcrpy cassette, or sends live and records (per the record mode)."""

    def __init__(
        self, recorder: CassetteRecorder, kind: str, key: Mapping[str, str], cassette: Any
    ) -> None:
        self._recorder = recorder
        self._kind = kind
        self._key = dict(key)
        self.cassette = cassette
        self._live: LiveTransport | None = None
        self.replayed = 0
        self.live = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        # vcrpy sees (and logs) only the scrubbed request: matching ignores secrets
        # anyway, and its DEBUG log prints every URI it is given.
        secrets = self._recorder.secrets
        cassette = self.cassette
        vcr_request = cassette.request_type(
            request.method,
            scrub_uri(str(request.url), secrets),
            _scrub_body(body, secrets),
            scrub_headers(dict(request.headers), secrets),
        )
        if cassette.can_play_response_for(vcr_request):
            recorded = cassette.play_response(vcr_request)
            self.replayed += 1
            self._recorder.stats.add(replayed=1)
            return _replayed_response(recorded, request)
        if cassette.write_protected:
            error = self._recorder.missing_error(self._kind, self._key, cassette, vcr_request)
            self._recorder.errors.append(error)
            raise error
        if self._live is None:
            self._live = _live_transport(self._recorder.allow_private_hosts)
        self.live += 1
        self._recorder.stats.add(live=1)
        try:
            response = await self._live.handle_async_request(request)
        except httpx.TransportError as error:
            cassette.append(vcr_request, _error_interaction(error, self._recorder.secrets))
            raise
        try:
            raw = b"".join([part async for part in response.aiter_raw()])
        finally:
            await response.aclose()
        # Scrubbed before vcrpy sees it: vcrpy logs the response it is given (INFO)
        # before applying before_record_response, and storage_url holds the token.
        recorded = {
            "status": {"code": response.status_code, "message": response.reason_phrase},
            "headers": _headers_dict(response.headers),
            "body": {"string": raw},
        }
        cassette.append(vcr_request, scrub_response(recorded, self._recorder.secrets))
        return httpx.Response(
            response.status_code,
            headers=response.headers.multi_items(),
            stream=httpx.ByteStream(raw),
            extensions={k: v for k, v in response.extensions.items() if k in ("reason_phrase",)},
            request=request,
        )

    async def aclose(self) -> None:
        if self._live is not None:
            await self._live.aclose()
            self._live = None


def _headers_dict(headers: httpx.Headers) -> dict[str, list[str]]:
    result: dict[str, list[str]] = {}
    for name, value in headers.multi_items():
        result.setdefault(name, []).append(value)
    return result


def _error_interaction(error: httpx.TransportError, secrets: Mapping[str, str]) -> dict[str, Any]:
    message = _replace_secrets_text(str(error), secrets)
    return {
        "status": {"code": ERROR_STATUS, "message": "transport error"},
        "headers": {ERROR_HEADER: [type(error).__name__]},
        "body": {"string": message.encode("utf-8")},
    }


def _error_class(name: str) -> type[httpx.TransportError]:
    for namespace in (transport_module, httpx):
        candidate = getattr(namespace, name, None)
        if isinstance(candidate, type) and issubclass(candidate, httpx.TransportError):
            return candidate
    return httpx.TransportError


def _replayed_response(recorded: dict[str, Any], request: httpx.Request) -> httpx.Response:
    headers = recorded.get("headers", {})
    lowered = {name.lower(): values for name, values in headers.items()}
    body = recorded.get("body", {}).get("string") or b""
    if isinstance(body, str):
        body = body.encode("utf-8")
    if ERROR_HEADER in lowered:
        raise _error_class(lowered[ERROR_HEADER][0])(
            body.decode("utf-8", "replace"), request=request
        )
    message = recorded.get("status", {}).get("message")
    extensions = {"reason_phrase": message.encode("ascii", "replace")} if message else {}
    return httpx.Response(
        recorded["status"]["code"],
        headers=[(name, value) for name, values in headers.items() for value in values],
        stream=httpx.ByteStream(body),
        extensions=extensions,
        request=request,
    )


@dataclass
class CitationContext:
    """What the recorder says in a missing-cassette message: the test and its claim."""

    nodeid: str = ""
    test_name: str = ""
    claim: str = ""


class CassetteRecorder:
    """The :class:`~pytest_citations.transport.Recorder` that reads and writes cassettes.

    ``secrets`` maps variable names to values (:func:`known_secrets`); they are
    scrubbed from everything written and searched for in every file kept.
    ``context`` is set by the pytest plugin before each verification so a
    missing cassette names the test and the command that records it.
    """

    def __init__(
        self,
        directory: Path | str,
        *,
        record_mode: str = "once",
        secrets: Mapping[str, str] | None = None,
        allow_private_hosts: bool = False,
    ) -> None:
        if record_mode not in RECORD_MODES:
            raise ValueError(f"record mode {record_mode!r} is not one of {', '.join(RECORD_MODES)}")
        self.directory = Path(directory)
        self.record_mode = record_mode
        self.secrets: dict[str, str] = {
            name: value
            for name, value in (secrets or {}).items()
            if value and len(value) >= MIN_SECRET_LENGTH
        }
        self.allow_private_hosts = allow_private_hosts
        self.stats = RecorderStats()
        self.context = CitationContext()
        #: Cassette errors raised in a transport, kept in case a stage swallowed them.
        self.errors: list[Exception] = []

    def path_for(self, kind: str, key: Mapping[str, str]) -> Path:
        return cassette_path(self.directory, kind, key)

    def _cassette(self, path: Path) -> Any:
        try:
            if self.record_mode in ("none", "once"):
                replay = ReplayCassette.read(path, missing_ok=self.record_mode == "none")
                if replay is not None:
                    return replay
            return self._load(path)
        except (yaml.YAMLError, TypeError, KeyError, ValueError, AttributeError) as error:
            raise CassetteError(
                f"cassette {path} is corrupt ({type(error).__name__}: {error}); "
                "delete it and re-record (--citations-record-mode=once)"
            ) from None

    def _load(self, path: Path) -> Any:
        """vcrpy's own ``Cassette``: for every mode that may record."""
        from vcr.cassette import Cassette
        from vcr.record_mode import RecordMode
        from vcr.request import Request
        from vcr.serializers import yamlserializer

        mode = RecordMode(self.record_mode)
        cassette = Cassette.load(
            path=str(path),
            serializer=yamlserializer,
            persister=_Persister(
                self.secrets, overwrite=mode in (RecordMode.ALL, RecordMode.NEW_EPISODES)
            ),
            record_mode=mode,
            match_on=MATCH_ON,
            # No before_record hooks: CassetteTransport hands vcrpy only scrubbed
            # requests and responses, and vcrpy runs these hooks on every lookup and
            # on every interaction it loads (a deep copy each): they cost a replay
            # more than parsing the YAML. The file is still checked after each write.
            allow_playback_repeats=False,
            # ``all`` rewrites the cassette with what this run sent, nothing older.
            drop_unused_requests=mode is RecordMode.ALL,
        )
        cassette.request_type = Request
        return cassette

    @asynccontextmanager
    async def _session(
        self, kind: UnitKind, key: Mapping[str, str]
    ) -> AsyncIterator[httpx.AsyncBaseTransport]:
        path = self.path_for(kind, key)
        cassette = self._cassette(path)
        transport = CassetteTransport(self, kind, key, cassette)
        try:
            yield transport
        finally:
            await transport.aclose()
        if isinstance(cassette, ReplayCassette):
            return  # read only: nothing was recorded
        # Reached only without an exception: a half-recorded unit is never kept.
        persister = cassette._persister
        before = len(persister.written)
        cassette._save()
        self.stats.add(written=len(persister.written) - before)

    def session(
        self, kind: UnitKind, key: Mapping[str, str]
    ) -> AbstractAsyncContextManager[httpx.AsyncBaseTransport]:
        """The transport for one unit of work, backed by its cassette."""
        return self._session(kind, key)

    def pop_errors(self) -> list[Exception]:
        errors, self.errors = self.errors, []
        return errors

    def missing_error(
        self, kind: str, key: Mapping[str, str], cassette: Any, request: Any
    ) -> CassetteMissingError:
        """The message that says which citation lacks a recording and how to record it."""
        path = Path(cassette.path)
        context = self.context
        claim = key.get("claim") or context.claim
        source = key.get("source") or key.get("rid", "")
        shown = scrub_request(request, self.secrets)
        if self.record_mode == "none":
            if len(cassette) == 0:
                problem = (
                    f"no {kind} cassette for this citation, and record mode 'none' only replays"
                )
            else:
                problem = (
                    f"the {kind} cassette has no recording of this request (record mode "
                    "'none' only replays)"
                )
        else:
            problem = (
                f"the {kind} cassette exists but has no recording of this request, and "
                "record mode 'once' does not add to an existing cassette"
            )
        lines = [problem]
        if claim:
            lines.append(f"  claim:    {claim!r}")
        if source:
            lines.append(f"  source:   {source}")
        lines.append(f"  request:  {shown.method} {shown.uri}")
        lines.append(f"  cassette: {path}")
        if len(cassette):
            hint = _closest_mismatch(cassette, request)
            if hint:
                lines.append(f"  differs:  {hint}")
        name = context.test_name or "<test name>"
        mode = "once" if self.record_mode == "none" else "new_episodes"
        if self.record_mode == "none":
            lines.append(f"record it: pytest --citations-record-mode=once -k {name}")
        else:
            lines.append(
                f"record it: pytest --citations-record-mode={mode} -k {name}  "
                "(or --citations-record-mode=all to re-record from scratch)"
            )
        if context.nodeid:
            lines.append(f"  test:     {context.nodeid}")
        lines.append(f"then commit the new files under {self.directory}")
        return CassetteMissingError("\n".join(lines))


def _closest_mismatch(cassette: Any, request: Any) -> str:
    try:
        matches = cassette.find_requests_with_most_matches(request)
    except Exception:  # a hint only: never hide the real error behind a failing hint
        return ""
    for _stored, _successes, failures in matches[:1]:
        return "; ".join(str(message).splitlines()[0] for _name, message in failures)
    return ""
