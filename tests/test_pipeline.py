"""The whole pipeline against the simulators: seed 000's story and seed 003's walk-through.

The judge is the scripted OpenAI simulator (fixtures, not model traces); every
deterministic part — fetch rules, quote-first check, guard, aggregation and
precision — is the real code.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeEmbedder
from simulators._server import Simulator
from simulators.crawlbase import NORMAL_TOKEN
from simulators.scripted import FAKE_KEY
from simulators.website import WebsiteHandler, WebsiteState, html_page

from pytest_citations.aggregate import Precision
from pytest_citations.errors import (
    ConfigurationError,
    InvalidCitationError,
    MissingCredentialError,
    SourceError,
)
from pytest_citations.models import Label
from pytest_citations.pipeline import Verifier
from pytest_citations.settings import Settings

SITE = "https://example.com"
BOILING = f"{SITE}/articles/water-boiling-point"
BOILING_SENTENCE = "Water boils at 100 degrees Celsius at sea level."
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "rfc7519"


@pytest.fixture
def settings(crawlbase_api: Any, openai_sim: Any) -> Settings:
    """Pages from the Crawlbase simulator, verdicts from the OpenAI simulator."""
    return Settings(
        fetcher="crawlbase",
        crawlbase_token=NORMAL_TOKEN,
        crawlbase_api_url=crawlbase_api.url + "/",
        openai_api_key=FAKE_KEY,
        openai_base_url=openai_sim.url + "/v1",
    )


@pytest.fixture
def verifier(settings: Settings) -> Verifier:
    return Verifier(settings, embedder=FakeEmbedder())


def test_seed_000_dry_run_supported_despite_a_dead_link(
    verifier: Verifier, openai_sim: Any
) -> None:
    openai_sim.brain.reply(BOILING_SENTENCE, "supported", BOILING_SENTENCE, 0.96)
    verdict = verifier.verify(BOILING_SENTENCE, [BOILING, f"{SITE}/old-report"])
    assert verdict == "supported"
    live, dead = verdict.citations
    assert (live.label, live.evidence_quote, live.confidence) == (
        Label.supported,
        BOILING_SENTENCE,
        0.96,
    )
    assert (dead.label, dead.reason, dead.original_status, dead.confidence) == (
        Label.unreachable,
        "http_404",
        404,
        1.0,
    )
    assert len(openai_sim.brain.requests) == 1  # the dead link never reached the judge


def test_a_live_page_that_says_otherwise_contradicts_the_claim(
    verifier: Verifier, openai_sim: Any
) -> None:
    claim = "Water boils at 50 degrees Celsius at sea level."
    openai_sim.brain.reply(claim, "contradicted", BOILING_SENTENCE, 0.97)
    verdict = verifier.verify(claim, [BOILING])
    assert verdict == "contradicted"
    assert verdict.citations[0].evidence_quote == BOILING_SENTENCE
    assert verdict.citations[0].rid  # stored page id kept, token dropped
    assert NORMAL_TOKEN not in verdict.model_dump_json()


def test_homepage_redirect_and_soft_404_never_reach_the_judge(
    verifier: Verifier, openai_sim: Any
) -> None:
    verdict = verifier.verify(
        BOILING_SENTENCE, [f"{SITE}/articles/moved", f"{SITE}/missing-article"]
    )
    assert verdict == "not_found"
    assert [c.reason for c in verdict.citations] == ["redirected_to_homepage", "soft_404"]
    assert openai_sim.brain.requests == []


def test_a_judge_quote_that_is_not_on_the_page_is_downgraded(
    verifier: Verifier, openai_sim: Any
) -> None:
    openai_sim.brain.reply(BOILING_SENTENCE, "supported", "Water always boils at 100 C.", 0.99)
    citation = verifier.verify(BOILING_SENTENCE, [BOILING]).citations[0]
    assert (citation.label, citation.confidence, citation.reason, citation.needs_review) == (
        Label.not_found,
        0.0,
        "evidence_quote_not_in_source",
        True,
    )


def test_a_callers_quote_absent_from_the_page_is_fabricated_without_a_model(
    verifier: Verifier, openai_sim: Any
) -> None:
    citation = verifier.verify(
        BOILING_SENTENCE, [BOILING], quote="Water boils at 100 degrees Celsius everywhere."
    ).citations[0]
    assert (citation.label, citation.reason, citation.confidence) == (
        Label.fabricated,
        "quote_not_in_source",
        None,
    )
    assert citation.closest_passage and BOILING_SENTENCE in citation.closest_passage
    assert citation.closest_similarity is not None and citation.closest_similarity > 0.6
    assert openai_sim.brain.requests == []


def test_a_page_cited_twice_is_fetched_once(verifier: Verifier, crawlbase_api: Any) -> None:
    verifier.verify("Ice is cold.", [BOILING, BOILING])
    verifier.verify("Steam is hot.", [BOILING])
    assert sum(crawlbase_api.state.calls_for(BOILING).values()) == 1


def test_a_missing_judge_key_names_the_variable(crawlbase_api: Any, openai_sim: Any) -> None:
    settings = Settings(
        fetcher="crawlbase",
        crawlbase_token=NORMAL_TOKEN,
        crawlbase_api_url=crawlbase_api.url + "/",
    )  # the default OpenAI endpoint: the live transport refuses before connecting
    with pytest.raises(MissingCredentialError, match="OPENAI_API_KEY"):
        Verifier(settings, embedder=FakeEmbedder()).verify(BOILING_SENTENCE, [BOILING])
    assert openai_sim.brain.requests == []


def test_seed_000_batch_precision_comes_out_of_the_pipeline(
    verifier: Verifier, openai_sim: Any
) -> None:
    claim = BOILING_SENTENCE
    openai_sim.brain.reply(claim, "supported", BOILING_SENTENCE, 0.96)
    wrong = "Water boils at 50 degrees Celsius at sea level."
    openai_sim.brain.reply(wrong, "contradicted", BOILING_SENTENCE, 0.97)
    batch = [
        (claim, [BOILING, f"{SITE}/old-report", f"{SITE}/short-note"]),
        (wrong, [BOILING, f"{SITE}/retired"]),
        ("Salt lowers the boiling point of water.", [BOILING, f"{SITE}/articles/moved"]),
        (
            "Water boils at 100 degrees Celsius on Everest.",
            [f"{SITE}/old-report", f"{SITE}/missing-article"],
        ),
    ]
    verdicts = [verifier.verify(c, urls) for c, urls in batch]
    citations = [citation for verdict in verdicts for citation in verdict.citations]
    assert Precision.from_verdicts(citations).lines() == [
        "citation_precision=0.2222 (2/9)",
        "reachable_precision=0.3333 (2/6)",
    ]
    assert [v.label for v in verdicts] == ["supported", "contradicted", "not_found", "not_found"]


@pytest.mark.parametrize(("claim", "sources"), [("", ["x"]), ("claim", [1]), ("claim", None)])
def test_malformed_input_is_a_clear_error(verifier: Verifier, claim: str, sources: Any) -> None:
    with pytest.raises(InvalidCitationError):
        verifier.verify(claim, sources)


def test_seed_003_rfc7519_walk_through(openai_sim: Any, tmp_path: Path) -> None:
    citations = json.loads((EXAMPLE / "citations.json").read_text())
    script = json.loads((EXAMPLE / "judge_script.json").read_text())
    for citation in citations:
        reply = script.get(citation["id"])
        if reply:
            openai_sim.brain.reply(
                citation["claim"], reply["label"], reply["evidence_quote"], reply["confidence"]
            )
    settings = Settings(openai_api_key=FAKE_KEY, openai_base_url=openai_sim.url + "/v1")
    verifier = Verifier(settings, embedder=FakeEmbedder())
    source = str(EXAMPLE / "rfc7519.txt")
    results = {
        c["id"]: verifier.verify(
            c["claim"], [source], quote=c["quote"], section=c["section"]
        ).citations[0]
        for c in citations
    }
    table = {key: [v.label.value, v.confidence, v.needs_review] for key, v in results.items()}
    seed_table = json.loads((EXAMPLE / "seed_table.json").read_text())
    assert table == {key: row for key, row in seed_table.items() if not key.startswith("_")}
    # The judge read exactly the section holding each quote (seed 003's sizes).
    sent = {
        json.loads(r.body)["messages"][1]["content"].split("\n", 2)[1]: r
        for r in openai_sim.brain.requests
    }
    assert len(sent) == 7  # every citation but the fabricated one
    exp_request = sent[next(c["claim"] for c in citations if c["id"] == "exp_required")]
    assert (
        "Use of this claim is OPTIONAL." in json.loads(exp_request.body)["messages"][1]["content"]
    )


def test_the_sdk_fetcher_refuses_replay_only_mode(tmp_path: Path) -> None:
    from pytest_citations.cassettes import CassetteRecorder
    from pytest_citations.errors import ConfigurationError

    settings = Settings(fetcher="crawlbase-sdk", crawlbase_token=NORMAL_TOKEN)
    with pytest.raises(ConfigurationError, match="crawlbase-sdk"):
        Verifier(settings, recorder=CassetteRecorder(tmp_path, record_mode="none"))


def test_a_quote_from_an_rfc_abstract_is_found_outside_the_numbered_sections(
    openai_sim: Any,
) -> None:
    settings = Settings(openai_api_key=FAKE_KEY, openai_base_url=openai_sim.url + "/v1")
    verifier = Verifier(settings, embedder=FakeEmbedder())
    quote = "JSON Web Token (JWT) is a compact, URL-safe means of representing claims"
    citation = verifier.verify(
        "JWTs are compact.", [str(EXAMPLE / "rfc7519.txt")], quote=quote
    ).citations[0]
    assert citation.label is not Label.fabricated
    (request,) = openai_sim.brain.requests
    assert quote in " ".join(json.loads(request.body)["messages"][1]["content"].split())


def test_a_quote_copied_from_a_rendered_page_matches_its_markdown(
    verifier: Verifier, crawlbase_api: Any, openai_sim: Any
) -> None:
    from simulators.crawlbase import Target

    url = f"{SITE}/articles/bold"
    crawlbase_api.state.targets[url] = Target(
        markdown="# Bold\n\nPure water boils at **100 degrees Celsius** at sea level, "
        "which is the figure every textbook gives for the boiling point of water.\n" * 3
    )
    quote = "Pure water boils at 100 degrees Celsius at sea level"
    citation = verifier.verify(BOILING_SENTENCE, [url], quote=quote).citations[0]
    assert citation.label is not Label.fabricated
    assert len(openai_sim.brain.requests) == 1


@pytest.mark.parametrize("quote", ["", "   "])
def test_an_empty_quote_is_no_quote(verifier: Verifier, openai_sim: Any, quote: str) -> None:
    openai_sim.brain.reply(BOILING_SENTENCE, "supported", BOILING_SENTENCE, 0.96)
    assert verifier.verify(BOILING_SENTENCE, [BOILING], quote=quote) == "supported"


@pytest.mark.parametrize(
    "url", ["http://a..b/x", "http://[1:2]/", "http://example.com:99999/", "http://" + "a" * 300]
)
def test_a_malformed_url_is_unreachable_not_a_crash(verifier: Verifier, url: str) -> None:
    citation = verifier.verify(BOILING_SENTENCE, [url]).citations[0]
    assert (citation.label, citation.reason) == (Label.unreachable, "invalid_url")


def test_a_claims_pages_are_ranked_in_one_embedding_call(
    settings: Settings, openai_sim: Any
) -> None:
    embedder = FakeEmbedder()
    sources = [BOILING, f"{SITE}/articles/http-404-explained", f"{SITE}/old-report"]
    verdict = Verifier(settings, embedder=embedder).verify(BOILING_SENTENCE, sources)
    # two pages ranked together; the dead link needed no ranking and held nobody up
    assert embedder.calls == 1
    assert [c.label for c in verdict.citations][2] == Label.unreachable
    # each citation as it would be alone: a vector depends on its text only
    alone = Verifier(settings, embedder=FakeEmbedder())
    singly = [alone.verify(BOILING_SENTENCE, [source]).citations[0] for source in sources]

    def without_rid(citations: Sequence[Any]) -> list[dict[str, Any]]:
        return [c.model_dump(exclude={"rid"}) for c in citations]  # a new crawl, a new rid

    assert without_rid(singly) == without_rid(verdict.citations)
    sent = [json.dumps(r.json, sort_keys=True) for r in openai_sim.brain.requests]
    assert len(sent) == 4 and sorted(sent[:2]) == sorted(sent[2:])  # the same passages judged


def test_a_ranking_failure_reaches_every_citation_waiting_for_it(settings: Settings) -> None:
    class Broken(FakeEmbedder):
        def embed(self, texts: Sequence[str]) -> list[list[float]]:
            raise ConfigurationError("the embedding model weights are not installed")

    verifier = Verifier(settings, embedder=Broken())
    with pytest.raises(ConfigurationError, match="weights are not installed"):
        verifier.verify(BOILING_SENTENCE, [BOILING, f"{SITE}/articles/http-404-explained"])
    # a quote needs no ranking: nothing waits for the broken model
    quoted = verifier.verify(
        BOILING_SENTENCE,
        [BOILING, f"{SITE}/articles/http-404-explained"],
        quote="Water boils at 100 degrees Celsius at sea level.",
    )
    assert quoted.citations[1].label == Label.fabricated  # the quote is not on that page
    assert quoted.citations[0].reason != "judge_error"  # the page holding it was judged


class _SlowEmbedder(FakeEmbedder):
    """FakeEmbedder that takes ``seconds`` per call and notes when each call began."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.started: list[float] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.started.append(time.monotonic())
        time.sleep(self.seconds)
        return super().embed(texts)


def _article(tmp_path: Path) -> Path:
    path = tmp_path / "article.md"
    path.write_text("# Boiling\n\n" + "Water boils at 100 degrees Celsius at sea level. " * 30)
    return path


def test_a_claim_that_fails_leaves_no_ranking_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One citation waits for the model while its sibling raises: when the error
    reaches the caller, nothing of the claim is still running in the caller's loop."""
    from pytest_citations._threads import EMBEDDING_THREAD

    embedder = _SlowEmbedder(0.5)
    verifier = Verifier(Settings(), embedder=embedder)
    fetch = verifier._pages.get

    async def get(source: str, *args: Any) -> Any:
        if source == "goes-away":  # fails once its sibling's ranking is under way
            await asyncio.sleep(0.2)
            raise SourceError("the source went away")
        return await fetch(source, *args)

    monkeypatch.setattr(verifier._pages, "get", get)
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(SourceError, match="went away"):
            loop.run_until_complete(
                verifier.averify(BOILING_SENTENCE, [str(_article(tmp_path)), "goes-away"])
            )
        assert embedder.started  # the ranking had started
        assert not [task for task in asyncio.all_tasks(loop) if not task.done()]
    finally:
        loop.close()
        EMBEDDING_THREAD.submit(lambda: None).result()  # the model call cannot be interrupted


def test_a_slow_sibling_fetch_does_not_hold_a_ready_page_for_long(
    tmp_path: Path, openai_sim: Any
) -> None:
    slow = html_page("Slow", "<p>Too short.</p>")
    slow.delay = 2.5
    routes = {"/slow": slow}
    with Simulator(WebsiteHandler, WebsiteState(routes=routes)) as site:
        embedder = _SlowEmbedder(0.0)
        settings = Settings(
            fetcher="direct",
            allow_private_hosts=True,
            openai_api_key=FAKE_KEY,
            openai_base_url=openai_sim.url + "/v1",
        )
        started = time.monotonic()
        verdict = Verifier(settings, embedder=embedder).verify(
            BOILING_SENTENCE, [str(_article(tmp_path)), site.url + "/slow"]
        )
    assert time.monotonic() - started >= 2.5  # the slow page was waited for, by itself
    assert embedder.started and embedder.started[0] - started < 1.5  # the ready page was not
    assert verdict.citations[1].reason == "thin_page"
