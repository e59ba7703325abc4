"""The /verify service, over real HTTP against a started uvicorn server on 127.0.0.1.

Pages come from the Crawlbase and website simulators and verdicts from the
OpenAI simulator's scripted brain (fixtures, not model output).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fakes import BOILING_CLAIM, BOILING_SENTENCE, FakeEmbedder, judge_env
from simulators._server import Simulator
from simulators.crawlbase import NORMAL_TOKEN
from simulators.scripted import FAKE_KEY, JudgeSimulator

pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")

from pytest_citations.pipeline import Verifier  # noqa: E402
from pytest_citations.service import create_app  # noqa: E402
from pytest_citations.settings import Settings  # noqa: E402

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
SITE = "https://example.com"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class _Served:
    """uvicorn serving an app in a background thread."""

    def __init__(self, app: Any) -> None:
        self.port = _free_port()
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> _Served:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def _crawlbase_settings(api: Simulator, **extra: Any) -> Settings:
    values: dict[str, Any] = {
        "crawlbase_token": NORMAL_TOKEN,
        "crawlbase_api_url": api.url + "/",
        "retries": 0,
    }
    values.update(extra)
    return Settings(**values)


@pytest.fixture
def service(crawlbase_api: Simulator, judge: JudgeSimulator) -> Iterator[_Served]:
    settings = _crawlbase_settings(
        crawlbase_api, openai_api_key=FAKE_KEY, openai_base_url=judge.url + "/v1"
    )
    with _Served(create_app(Verifier(settings, embedder=FakeEmbedder()))) as served:
        yield served


def test_health(service: _Served) -> None:
    response = httpx.get(service.url + "/health")
    assert response.status_code == 200
    assert response.json()["status"] == "ok"


def test_verify_returns_the_seed_shape(service: _Served) -> None:
    body = {
        "claim": BOILING_CLAIM,
        "urls": [f"{SITE}/articles/water-boiling-point", f"{SITE}/old-report"],
    }
    response = httpx.post(service.url + "/verify", json=body, timeout=30)
    assert response.status_code == 200, response.text
    data = response.json()
    assert list(data) == ["claim", "overall", "citations"]
    assert data["claim"] == BOILING_CLAIM
    assert data["overall"] == "supported"
    first, second = data["citations"]
    assert set(first) >= {
        "url", "label", "evidence_quote", "confidence", "final_url",
        "original_status", "rid", "reason",
    }  # fmt: skip
    assert first["label"] == "supported"
    assert first["evidence_quote"] == BOILING_SENTENCE
    assert first["confidence"] == pytest.approx(0.96)
    assert first["original_status"] == 200
    assert first["rid"] and first["reason"] is None
    assert first["final_url"] == f"{SITE}/articles/water-boiling-point"
    assert second["label"] == "unreachable" and second["reason"] == "http_404"
    assert second["original_status"] == 404 and second["evidence_quote"] is None
    assert NORMAL_TOKEN not in response.text and FAKE_KEY not in response.text


def test_bad_requests_are_422_with_pydantic_detail(service: _Served) -> None:
    cases: list[Any] = [
        {"claim": BOILING_CLAIM},  # urls missing
        {"claim": "", "urls": [f"{SITE}/a"]},
        {"claim": "   ", "urls": [f"{SITE}/a"]},
        {"claim": BOILING_CLAIM, "urls": []},
        {"claim": BOILING_CLAIM, "urls": "https://example.com/a"},
        {"claim": BOILING_CLAIM, "urls": ["/etc/passwd"]},  # the server's own disk
        {"claim": BOILING_CLAIM, "urls": ["file:///etc/passwd"]},
        {"claim": BOILING_CLAIM, "urls": [f"{SITE}/a"], "unexpected": 1},
    ]
    for body in cases:
        response = httpx.post(service.url + "/verify", json=body)
        assert response.status_code == 422, body
        detail = response.json()["detail"]
        assert isinstance(detail, list) and detail[0]["loc"][0] == "body"
    response = httpx.post(
        service.url + "/verify", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert response.status_code == 422


def test_openapi_schema_is_served(service: _Served) -> None:
    response = httpx.get(service.url + "/openapi.json")
    assert response.status_code == 200
    schema = response.json()
    assert set(schema["paths"]) >= {"/health", "/verify"}
    post = schema["paths"]["/verify"]["post"]
    assert "503" in post["responses"] and "422" in post["responses"]
    assert {"VerifyRequest", "VerifyResponse", "UrlVerdict"} <= set(schema["components"]["schemas"])


def test_missing_key_is_503_naming_the_variable_never_a_value(
    crawlbase_api: Simulator, judge: JudgeSimulator
) -> None:
    # the default base URL (api.openai.com) needs a key: refused before it goes out
    settings = _crawlbase_settings(crawlbase_api)
    with _Served(create_app(Verifier(settings, embedder=FakeEmbedder()))) as served:
        body = {"claim": BOILING_CLAIM, "urls": [f"{SITE}/articles/water-boiling-point"]}
        response = httpx.post(served.url + "/verify", json=body, timeout=30)
    assert response.status_code == 503
    data = response.json()
    assert data["variable"] == "OPENAI_API_KEY"
    assert "OPENAI_API_KEY" in data["detail"]
    assert NORMAL_TOKEN not in response.text  # the other secret that is set
    assert judge.brain.requests == []


def test_missing_crawlbase_token_is_503_too(judge: JudgeSimulator) -> None:
    # fetcher forced to crawlbase without a token: the request would go out without it
    settings = Settings(
        fetcher="crawlbase",
        openai_api_key=FAKE_KEY,
        openai_base_url=judge.url + "/v1",
        crawlbase_api_url="http://127.0.0.1:9/",
    )
    with _Served(create_app(Verifier(settings, embedder=FakeEmbedder()))) as served:
        body = {"claim": BOILING_CLAIM, "urls": [f"{SITE}/articles/water-boiling-point"]}
        response = httpx.post(served.url + "/verify", json=body, timeout=30)
    assert response.status_code == 503
    assert response.json()["variable"] == "CRAWLBASE_TOKEN"
    assert FAKE_KEY not in response.text


def test_default_app_reads_the_environment_on_first_request(
    monkeypatch: pytest.MonkeyPatch, website: Simulator
) -> None:
    """``create_app()`` starts without keys; a request needing one is a 503."""
    for name in ("OPENAI_API_KEY", "CRAWLBASE_TOKEN", "CRAWLBASE_JS_TOKEN", "JUDGE_PROVIDER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CITATIONS_ALLOW_PRIVATE_HOSTS", "1")
    with _Served(create_app()) as served:
        assert httpx.get(served.url + "/health").status_code == 200
        # a dead link needs neither a key nor the embedding model
        body = {"claim": BOILING_CLAIM, "urls": [website.url + "/old-report"]}
        response = httpx.post(served.url + "/verify", json=body, timeout=30)
        assert response.status_code == 200, response.text
        assert response.json()["overall"] == "unreachable"
        monkeypatch.setenv("JUDGE_PROVIDER", "bogus")  # read once: no effect any more
        assert httpx.get(served.url + "/health").status_code == 200


def test_citations_serve_runs_uvicorn_in_a_subprocess(
    tmp_path: Path, website: Simulator, judge: JudgeSimulator
) -> None:
    port = _free_port()
    env = {**os.environ, **judge_env(judge.url, FAKE_KEY), "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, str(TESTS / "fakes.py"), "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(url + "/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if child.poll() is not None or time.monotonic() > deadline:
                output = child.communicate()[0]
                pytest.fail(f"citations serve did not start: {output!r}")
            time.sleep(0.1)
        body = {
            "claim": BOILING_CLAIM,
            "urls": [website.url + "/articles/water-boiling-point", website.url + "/retired"],
        }
        response = httpx.post(url + "/verify", json=body, timeout=30)
        assert response.status_code == 200, response.text
        data = response.json()
        assert data["overall"] == "supported"
        assert [c["label"] for c in data["citations"]] == ["supported", "unreachable"]
    finally:
        child.terminate()
        output = child.communicate(timeout=10)[0]
    assert FAKE_KEY.encode() not in output
