"""The cassette recorder on its own, against a tiny local HTTP server."""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import vcr
from simulators._server import QuietHandler, Simulator

from pytest_citations.cassettes import (
    MATCH_ON,
    CassetteRecorder,
    _Persister,
    cassette_path,
    known_secrets,
)
from pytest_citations.errors import CassetteError, CassetteMissingError, SecretInCassetteError
from pytest_citations.settings import Settings
from pytest_citations.transport import MISSING_CREDENTIAL

TOKEN = "cb-secret-token-4242"
API_KEY = "sk-test-secret-9876"
SECRETS = {"CRAWLBASE_TOKEN": TOKEN, "OPENAI_API_KEY": API_KEY}


class _State:
    def __init__(self) -> None:
        self.hits = 0
        self.version = "v1"


#: Bytes that are not UTF-8: vcrpy stores them as a ``!!binary`` YAML scalar.
BINARY_BODY = bytes(range(256)) * 4


class _Handler(QuietHandler):
    server: Any

    def do_GET(self) -> None:
        self.server.state.hits += 1
        if self.path.startswith("/gzip"):
            data = gzip.compress(b"compressed page text")
            self.send(200, data, headers={"Content-Encoding": "gzip"})
            return
        if self.path.startswith("/binary"):
            self.send(200, BINARY_BODY, content_type="application/octet-stream")
            return
        if self.path.startswith("/crawl"):
            self.send_json(
                200,
                {
                    "body": "page",
                    "storage_url": f"https://api.example/storage?token={TOKEN}&rid=r1",
                },
                headers={
                    "storage_url": f"https://api.example/storage?token={TOKEN}&rid=r1",
                    "Set-Cookie": "session=abcdef123456",
                },
            )
            return
        self.send(200, f"{self.server.state.version} {self.path}")

    def do_POST(self) -> None:
        self.server.state.hits += 1
        payload = self.read_json()
        self.send_json(200, {"echo": payload, "version": self.server.state.version})


@pytest.fixture
def server() -> Iterator[Simulator]:
    with Simulator(_Handler, _State()) as simulator:
        yield simulator


def _closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _recorder(directory: Path, mode: str = "once") -> CassetteRecorder:
    return CassetteRecorder(directory, record_mode=mode, secrets=SECRETS, allow_private_hosts=True)


async def _get(
    recorder: CassetteRecorder, url: str, key: dict[str, str] | None = None, **kw: Any
) -> httpx.Response:
    key = key or {"source": url, "fetcher": "direct"}
    async with (
        recorder.session("page", key) as transport,
        httpx.AsyncClient(transport=transport) as client,
    ):
        response = await client.get(url, **kw)
        await response.aread()
        return response


async def _post(
    recorder: CassetteRecorder, url: str, payload: Any, claim: str = "c"
) -> httpx.Response:
    key = {
        "claim": claim,
        "source": "s",
        "quote": "",
        "section": "",
        "provider": "openai",
        "model": "m",
        "pipeline": "1",
    }
    async with (
        recorder.session("judge", key) as transport,
        httpx.AsyncClient(transport=transport) as client,
    ):
        response = await client.post(
            url,
            content=json.dumps(payload),
            headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"},
        )
        await response.aread()
        return response


def _files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*.yaml"))


# -- identity --------------------------------------------------------------------------


def test_cassette_name_is_a_readable_slug_plus_short_hash(tmp_path: Path) -> None:
    path = cassette_path(
        tmp_path,
        "page",
        {"source": "https://example.com/articles/water-boiling-point", "fetcher": "direct"},
    )
    assert path.parent == tmp_path / "pages"
    assert path.name.startswith("example.com-articles-water-boiling-point-")
    assert len(path.stem.rsplit("-", 1)[1]) == 8
    judge = cassette_path(
        tmp_path, "judge", {"claim": "Water boils at 100 degrees.", "source": "x"}
    )
    assert judge.parent == tmp_path / "judge"
    assert judge.name.startswith("water-boils-at-100-degrees-")


def test_cassette_name_ignores_loopback_port_but_not_content(tmp_path: Path) -> None:
    a = cassette_path(tmp_path, "page", {"source": "http://127.0.0.1:5001/a", "fetcher": "direct"})
    b = cassette_path(tmp_path, "page", {"source": "http://127.0.0.1:6002/a", "fetcher": "direct"})
    c = cassette_path(
        tmp_path, "page", {"source": "http://127.0.0.1:5001/a", "fetcher": "crawlbase"}
    )
    assert a == b
    assert a != c


# -- record and replay ------------------------------------------------------------------


def test_once_records_then_none_replays_with_the_server_stopped(tmp_path: Path) -> None:
    with Simulator(_Handler, _State()) as server:
        url = f"{server.url}/articles/water"
        recorder = _recorder(tmp_path, "once")
        live = asyncio.run(_get(recorder, url))
        assert recorder.stats.snapshot() == {"replayed": 0, "live": 1, "written": 1}
    replayer = _recorder(tmp_path, "none")
    replayed = asyncio.run(_get(replayer, url))
    assert replayed.status_code == live.status_code == 200
    assert replayed.text == live.text == "v1 /articles/water"
    assert replayer.stats.snapshot() == {"replayed": 1, "live": 0, "written": 0}


def test_replay_matches_a_simulator_on_another_port(tmp_path: Path) -> None:
    with Simulator(_Handler, _State()) as server:
        asyncio.run(_get(_recorder(tmp_path), f"{server.url}/p?q=1"))
    other = _closed_port_url()
    replayed = asyncio.run(_get(_recorder(tmp_path, "none"), f"{other}/p?q=1"))
    assert replayed.text == "v1 /p?q=1"


def test_json_bodies_match_after_parsing(tmp_path: Path, server: Simulator) -> None:
    asyncio.run(_post(_recorder(tmp_path), f"{server.url}/v1/chat", {"a": 1, "b": [1, 2]}))
    hits = server.state.hits
    replayed = asyncio.run(
        _post(_recorder(tmp_path, "none"), f"{server.url}/v1/chat", {"b": [1, 2], "a": 1})
    )
    assert replayed.json()["echo"] == {"a": 1, "b": [1, 2]}
    assert server.state.hits == hits


def test_replay_needs_no_credential(tmp_path: Path, server: Simulator) -> None:
    url = f"{server.url}/needs-key"
    asyncio.run(_get(_recorder(tmp_path), url))
    response = asyncio.run(
        _get(
            _recorder(tmp_path, "none"),
            url,
            extensions={MISSING_CREDENTIAL: ("OPENAI_API_KEY", "the judge")},
        )
    )
    assert response.status_code == 200


def test_gzip_bodies_are_stored_decoded(tmp_path: Path, server: Simulator) -> None:
    response = asyncio.run(_get(_recorder(tmp_path), f"{server.url}/gzip"))
    assert response.text == "compressed page text"
    (path,) = _files(tmp_path)
    text = path.read_text()
    assert "compressed page text" in text
    assert "content-encoding" not in text.lower()
    assert (
        asyncio.run(_get(_recorder(tmp_path, "none"), f"{server.url}/gzip")).text
        == "compressed page text"
    )


async def _error_of(recorder: CassetteRecorder, url: str) -> str:
    """The fetcher's way: a transport error is caught inside the session and becomes a label."""
    async with (
        recorder.session("page", {"source": url, "fetcher": "direct"}) as transport,
        httpx.AsyncClient(transport=transport) as client,
    ):
        try:
            await client.get(url)
        except httpx.TransportError as error:
            return type(error).__name__
    return "no error"


def test_a_transport_error_is_recorded_and_replayed(tmp_path: Path) -> None:
    url = f"{_closed_port_url()}/dead"
    assert asyncio.run(_error_of(_recorder(tmp_path), url)) == "ConnectError"
    assert len(_files(tmp_path)) == 1
    replayer = _recorder(tmp_path, "none")
    assert asyncio.run(_error_of(replayer, url)) == "ConnectError"
    assert replayer.stats.replayed == 1


def test_a_session_that_raises_keeps_no_cassette(tmp_path: Path) -> None:
    with pytest.raises(httpx.ConnectError):
        asyncio.run(_get(_recorder(tmp_path), f"{_closed_port_url()}/dead"))
    assert _files(tmp_path) == []


# -- record modes ------------------------------------------------------------------------


def test_none_mode_without_cassette_names_citation_and_command(tmp_path: Path) -> None:
    recorder = _recorder(tmp_path, "none")
    recorder.context.claim = "Water boils at 100 °C."
    recorder.context.test_name = "test_water"
    recorder.context.nodeid = "tests/test_x.py::test_water"
    with pytest.raises(CassetteMissingError) as caught:
        asyncio.run(_get(recorder, "http://127.0.0.1:9/articles/water"))
    message = str(caught.value)
    assert "'Water boils at 100 °C.'" in message
    assert "http://127.0.0.1:9/articles/water" in message
    assert "pytest --citations-record-mode=once -k test_water" in message
    assert "tests/test_x.py::test_water" in message
    assert recorder.pop_errors() and not recorder.errors
    assert _files(tmp_path) == []


def test_once_mode_refuses_a_new_request_in_an_existing_cassette(
    tmp_path: Path, server: Simulator
) -> None:
    key = {"source": "k", "fetcher": "direct"}
    asyncio.run(_get(_recorder(tmp_path), f"{server.url}/a", key))
    with pytest.raises(CassetteMissingError, match="new_episodes"):
        asyncio.run(_get(_recorder(tmp_path), f"{server.url}/b", key))


def test_new_episodes_appends_and_all_rerecords(tmp_path: Path, server: Simulator) -> None:
    key = {"source": "k", "fetcher": "direct"}
    asyncio.run(_get(_recorder(tmp_path), f"{server.url}/a", key))
    asyncio.run(_get(_recorder(tmp_path, "new_episodes"), f"{server.url}/b", key))
    (path,) = _files(tmp_path)
    assert "/a" in path.read_text() and "/b" in path.read_text()

    server.state.version = "v2"
    recorder = _recorder(tmp_path, "all")
    assert asyncio.run(_get(recorder, f"{server.url}/a", key)).text == "v2 /a"
    assert recorder.stats.live == 1
    text = path.read_text()
    assert "v2 /a" in text and "v1" not in text
    assert asyncio.run(_get(_recorder(tmp_path, "none"), f"{server.url}/a", key)).text == "v2 /a"


def test_two_recorders_of_one_unit_keep_one_valid_file(tmp_path: Path, server: Simulator) -> None:
    url = f"{server.url}/shared"

    async def both() -> None:
        await asyncio.gather(_get(_recorder(tmp_path), url), _get(_recorder(tmp_path), url))

    asyncio.run(both())
    assert len(_files(tmp_path)) == 1
    assert not list(tmp_path.rglob("*.tmp"))
    assert asyncio.run(_get(_recorder(tmp_path, "none"), url)).text == "v1 /shared"


def test_an_unknown_record_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="new_episodes"):
        CassetteRecorder(tmp_path, record_mode="sometimes")


# -- secrets ------------------------------------------------------------------------------


def test_secrets_are_scrubbed_from_requests_and_responses(
    tmp_path: Path, server: Simulator
) -> None:
    key = {"source": "https://example.com/x", "fetcher": "crawlbase"}
    asyncio.run(_get(_recorder(tmp_path), f"{server.url}/crawl?token={TOKEN}&url=x", key))
    asyncio.run(_post(_recorder(tmp_path), f"{server.url}/v1/chat", {"note": f"key {API_KEY}"}))
    text = "".join(path.read_text() for path in _files(tmp_path))
    assert TOKEN not in text and API_KEY not in text
    assert "abcdef123456" not in text  # the cookie
    assert "rid=r1" in text  # the rid survives
    assert "<OPENAI_API_KEY>" in text
    # and the scrubbed cassette still replays (token ignored in matching)
    replay = asyncio.run(
        _get(_recorder(tmp_path, "none"), f"{server.url}/crawl?token=other&url=x", key)
    )
    assert replay.json()["body"] == "page"


def test_credentials_in_a_url_are_not_kept(tmp_path: Path, server: Simulator) -> None:
    url = server.url.replace("http://", "http://alice:s3cr3tPW@") + "/crawl?url=x"
    asyncio.run(_get(_recorder(tmp_path), url, {"source": url, "fetcher": "direct"}))
    text = "".join(path.read_text() for path in _files(tmp_path))
    assert "s3cr3tPW" not in text and "alice" not in text


def test_the_token_never_reaches_vcrpys_log(
    tmp_path: Path, server: Simulator, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    key = {"source": "https://example.com/x", "fetcher": "crawlbase"}
    asyncio.run(_get(_recorder(tmp_path), f"{server.url}/crawl?token={TOKEN}&url=x", key))
    assert "Appending request" in caplog.text  # vcrpy did log the interaction
    assert TOKEN not in caplog.text


@pytest.mark.parametrize(
    "body",
    [API_KEY.encode(), b"\x89PNG\r\n\x1a\n\xff\xfe" + API_KEY.encode() + bytes(range(256))],
    ids=["text", "binary"],
)
def test_a_cassette_holding_a_secret_is_refused_and_deleted(tmp_path: Path, body: bytes) -> None:
    from vcr.request import Request
    from vcr.serializers import yamlserializer

    persister = _Persister({"OPENAI_API_KEY": API_KEY}, overwrite=True)
    target = tmp_path / "judge" / "x.yaml"
    request = Request("GET", "http://h/", b"", {})
    response = {
        "status": {"code": 200, "message": "OK"},
        "headers": {},
        "body": {"string": body},  # binary: stored base64 by YAML, found by the unfolded form
    }
    with pytest.raises(SecretInCassetteError) as caught:
        persister.save_cassette(
            target, {"requests": [request], "responses": [response]}, yamlserializer
        )
    assert "OPENAI_API_KEY" in str(caught.value)
    assert API_KEY not in str(caught.value)
    assert not target.exists()


def test_known_secrets_reads_settings_and_environment() -> None:
    settings = Settings(openai_api_key="sk-from-settings-1")  # type: ignore[arg-type]
    secrets = known_secrets(settings, {"CRAWLBASE_TOKEN": "cb-env-token", "ANTHROPIC_API_KEY": "x"})
    assert secrets == {"OPENAI_API_KEY": "sk-from-settings-1", "CRAWLBASE_TOKEN": "cb-env-token"}


# -- coexistence -------------------------------------------------------------------------


def test_live_calls_bypass_a_users_active_vcrpy_cassette(tmp_path: Path, server: Simulator) -> None:
    user_cassette = tmp_path / "user" / "theirs.yaml"
    with vcr.use_cassette(str(user_cassette), record_mode="none"):
        # With a user cassette active in "none" mode, a patched transport would refuse.
        response = asyncio.run(_get(_recorder(tmp_path / "ours"), f"{server.url}/ours"))
    assert response.text == "v1 /ours"
    assert not user_cassette.exists()
    assert len(_files(tmp_path / "ours")) == 1


def test_a_request_body_is_parsed_once_for_every_match(monkeypatch: pytest.MonkeyPatch) -> None:
    from vcr.request import Request as VcrRequest

    from pytest_citations import cassettes

    parsed: list[object] = []
    real = cassettes._parse_body

    def counting(body: object) -> object:
        parsed.append(body)
        return real(body)

    monkeypatch.setattr(cassettes, "_parse_body", counting)
    stored = VcrRequest("POST", "https://api.example/v1/x", b'{"b": 1, "a": [2]}', {})
    incoming = VcrRequest("POST", "https://api.example/v1/x", b'{"a": [2], "b": 1}', {})
    for _ in range(3):  # vcrpy matches twice per replayed request
        cassettes.match_body(incoming, stored)
    assert len(parsed) == 2
    incoming.body = b'{"a": [3], "b": 1}'  # a new body is parsed anew
    with pytest.raises(AssertionError, match="bodies differ"):
        cassettes.match_body(incoming, stored)
    assert len(parsed) == 3


EXAMPLE_CASSETTES = sorted(
    path
    for path in (Path(__file__).resolve().parent.parent / "examples").rglob("*.yaml")
    if path.parent.name in ("pages", "judge", "storage")
)


@pytest.mark.parametrize("path", EXAMPLE_CASSETTES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_replay_reader_plays_what_vcrpy_plays(path: Path) -> None:
    """Every committed cassette: each recorded request gets the same answer from
    vcrpy's ``Cassette`` and from ``ReplayCassette``, in recording order."""
    from vcr.cassette import Cassette
    from vcr.record_mode import RecordMode
    from vcr.serializers import yamlserializer

    from pytest_citations.cassettes import ReplayCassette

    vcr_cassette = Cassette.load(
        path=str(path), serializer=yamlserializer, record_mode=RecordMode.NONE, match_on=MATCH_ON
    )
    replay = ReplayCassette.read(path, missing_ok=False)
    assert replay is not None and len(replay) == len(vcr_cassette) > 0
    for stored, _ in vcr_cassette.data:
        incoming = replay.request_type(stored.method, stored.uri, stored.body, stored.headers)
        assert replay.can_play_response_for(incoming)
        ours = replay.play_response(incoming)
        theirs = vcr_cassette.play_response(stored)
        body = ours["body"]["string"]
        assert (body.encode() if isinstance(body, str) else body) == theirs["body"]["string"]
        assert (ours["status"], ours["headers"]) == (theirs["status"], theirs["headers"])
    assert not replay.can_play_response_for(incoming)  # each recording answers once


def test_a_cassette_with_python_tags_is_left_to_vcrpy(tmp_path: Path, server: Simulator) -> None:
    from pytest_citations.cassettes import ReplayCassette

    asyncio.run(_get(_recorder(tmp_path), server.url + "/page"))
    (path,) = tmp_path.rglob("*.yaml")
    # Older vcrpy versions wrote header values as !!python/tuple; vcrpy still reads them.
    path.write_text(
        path.read_text(encoding="utf-8").replace(
            "interactions:", "extra: !!python/tuple [1]\ninteractions:", 1
        ),
        encoding="utf-8",
    )
    assert ReplayCassette.read(path, missing_ok=False) is None
    replayed = _recorder(tmp_path, "none")
    assert asyncio.run(_get(replayed, server.url + "/page")).status_code == 200
    assert replayed.stats.snapshot()["replayed"] == 1


@pytest.mark.parametrize(
    "content",
    [
        "just text",
        "interactions: 3",
        "interactions:\n- request: {}\n",
        "interactions:\n- 7\n",
        # a request that matches, with a response replay could not use
        "interactions:\n- request: {method: GET, uri: 'https://example.com/', body: null,"
        " headers: {}}\n  response: {status: {code: 200}, headers: {}, body: {string: 3}}\n",
        "interactions:\n- request: {method: GET, uri: 'https://example.com/', body: null,"
        " headers: {}}\n  response: {status: {code: 200}, headers: {a: 1}, body: {}}\n",
    ],
)
def test_a_file_that_is_not_a_cassette_is_a_clear_error(tmp_path: Path, content: str) -> None:
    recorder = CassetteRecorder(tmp_path, record_mode="none")
    path = recorder.path_for("page", {"source": "https://example.com/", "fetcher": "direct"})
    path.parent.mkdir(parents=True)
    path.write_text(content, encoding="utf-8")
    with pytest.raises(CassetteError, match="is corrupt"):
        asyncio.run(_get(recorder, "https://example.com/"))


def test_a_missing_recording_says_what_differs_from_the_closest_one(
    tmp_path: Path, server: Simulator
) -> None:
    asyncio.run(_post(_recorder(tmp_path), server.url + "/v1/chat", {"q": "first"}))
    with pytest.raises(CassetteMissingError) as caught:
        asyncio.run(_post(_recorder(tmp_path, "none"), server.url + "/v1/chat", {"q": "other"}))
    message = str(caught.value)
    assert "has no recording of this request" in message
    assert "differs:  the request bodies differ" in message


def test_a_binary_body_replays_byte_for_byte(tmp_path: Path, server: Simulator) -> None:
    recorded = asyncio.run(_get(_recorder(tmp_path), server.url + "/binary"))
    (path,) = tmp_path.rglob("*.yaml")
    assert "!!binary" in path.read_text(encoding="utf-8")
    replayed = asyncio.run(_get(_recorder(tmp_path, "none"), server.url + "/binary"))
    assert recorded.content == replayed.content == BINARY_BODY


def test_a_folder_where_a_cassette_should_be_is_a_missing_cassette(tmp_path: Path) -> None:
    recorder = CassetteRecorder(tmp_path, record_mode="none")
    path = recorder.path_for("page", {"source": "https://example.com/", "fetcher": "direct"})
    path.mkdir(parents=True)
    with pytest.raises(CassetteMissingError, match="no page cassette for this citation"):
        asyncio.run(_get(recorder, "https://example.com/"))
