"""Settings: environment names, precedence and clear errors that never show secrets."""

from __future__ import annotations

import pytest

from pytest_citations.errors import ConfigurationError, UnknownProviderError
from pytest_citations.settings import Settings


def test_defaults_follow_the_design() -> None:
    settings = Settings.from_env({})
    assert (settings.judge_provider, settings.top_k, settings.auto_accept) == ("openai", 3, 0.8)
    assert settings.resolved_fetcher == "direct"


def test_a_crawlbase_token_selects_the_crawlbase_fetcher() -> None:
    assert Settings.from_env({"CRAWLBASE_TOKEN": "t0ken"}).resolved_fetcher == "crawlbase"


def test_overrides_beat_environment_which_beats_ini_defaults() -> None:
    env = {"JUDGE_PROVIDER": "anthropic", "CITATIONS_TOP_K": "5"}
    settings = Settings.from_env(env, defaults={"top_k": 2, "auto_accept": 0.5}, top_k=7)
    assert (settings.judge_provider, settings.top_k, settings.auto_accept) == ("anthropic", 7, 0.5)


def test_an_unknown_provider_names_the_variable() -> None:
    with pytest.raises(UnknownProviderError, match="JUDGE_PROVIDER='gemini'"):
        Settings.from_env({"JUDGE_PROVIDER": "gemini"})


def test_a_malformed_number_names_the_variable() -> None:
    with pytest.raises(ConfigurationError, match="CITATIONS_AUTO_ACCEPT"):
        Settings.from_env({"CITATIONS_AUTO_ACCEPT": "high"})


def test_a_bad_boolean_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="CITATIONS_ALLOW_PRIVATE_HOSTS"):
        Settings.from_env({"CITATIONS_ALLOW_PRIVATE_HOSTS": "maybe"})


def test_secrets_never_appear_in_repr_or_errors() -> None:
    settings = Settings.from_env({"OPENAI_API_KEY": "sk-test-SECRET123"})
    assert "SECRET123" not in repr(settings)
    assert settings.secret_values() == ["sk-test-SECRET123"]
    with pytest.raises(ConfigurationError) as caught:
        Settings.from_env({"OPENAI_API_KEY": "sk-test-SECRET123", "CITATIONS_TOP_K": "0"})
    assert "SECRET123" not in str(caught.value)


def test_empty_variables_mean_unset() -> None:
    settings = Settings.from_env({"OPENAI_API_KEY": "", "JUDGE_PROVIDER": ""})
    assert settings.openai_api_key is None and settings.judge_provider == "openai"


def test_the_judge_model_defaults_per_provider() -> None:
    assert Settings.from_env({"JUDGE_PROVIDER": "ollama"}).model == "llama3.1"
    assert Settings.from_env({"JUDGE_MODEL": "gpt-4.1"}).model == "gpt-4.1"
