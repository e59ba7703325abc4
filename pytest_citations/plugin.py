"""pytest glue for pytest-citations: options, fixtures, the ``citations`` marker, hooks.

Only the standard library and pytest are imported here: the plugin loads for
every suite through the ``pytest11`` entry point, and a suite that never verifies
a citation must not pay for httpx, pydantic, vcrpy or torch. The real work lives
in :mod:`pytest_citations.pipeline`, :mod:`~pytest_citations.cassettes` and
:mod:`~pytest_citations.report`, imported inside the fixtures and hooks that
run only once a verification happened.

Users customise it the pytest-recording way, by overriding a fixture
(``citations_settings``, ``citations_cassette_dir``, ``citations_record_mode``,
``citations_embedder``, ``citations_judge``, ``citations_recorder``,
``citations_verifier``) in a ``conftest.py``.

Under pytest-xdist each worker attaches its tests' verdicts to the teardown
report as the ``citations`` user property (which also lands in JUnit XML);
the controller reads them in ``pytest_runtest_logreport`` and is the single
source of the summary, the JSON report and the session gates.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_citations.audit import AuditLog
    from pytest_citations.judge import Judge
    from pytest_citations.models import ClaimVerdict
    from pytest_citations.pipeline import Verifier
    from pytest_citations.report import MarkerGate, SessionCitations
    from pytest_citations.retrieval import Embedder
    from pytest_citations.settings import Settings
    from pytest_citations.transport import Recorder

RECORD_MODES = ("none", "once", "new_episodes", "all")
#: Relative to the rootdir. One folder for the whole project, not one per test
#: module: cassettes are keyed by page and by citation, never by test, so a page
#: cited from three modules is recorded once, and moving a test between files
#: orphans nothing.
DEFAULT_CASSETTE_DIR = "tests/cassettes/citations"
#: Replayed cassettes are deterministic, so any precision drop against a baseline
#: is a real change (a model, a prompt, a page): default to no tolerance. Raise
#: it when baselines come from live, non-deterministic runs.
DEFAULT_BASELINE_TOLERANCE = 0.0
#: Shared by the controller and its xdist workers (they inherit the environment),
#: so every audit row of one pytest session carries the same run id.
RUN_ID_VARIABLE = "PYTEST_CITATIONS_RUN_ID"
#: Key of the settings JSON a pytest-xdist worker hands its controller.
#: (command-line flag, ini name, Settings field, help). Environment names come
#: from settings.ENV_NAMES; precedence is command line > environment > ini > default.
_SETTING_OPTIONS: tuple[tuple[str, str, str, str], ...] = (
    (
        "--citations-judge-provider",
        "citations_judge_provider",
        "judge_provider",
        "judge provider: openai, anthropic or ollama (env JUDGE_PROVIDER)",
    ),
    (
        "--citations-judge-model",
        "citations_judge_model",
        "judge_model",
        "judge model (env JUDGE_MODEL; default per provider)",
    ),
    (
        "--citations-fetcher",
        "citations_fetcher",
        "fetcher",
        "page fetcher: auto, crawlbase, direct or crawlbase-sdk (env CITATIONS_FETCHER)",
    ),
    (
        "--citations-top-k",
        "citations_top_k",
        "top_k",
        "passages sent to the judge (env CITATIONS_TOP_K; default 3)",
    ),
    (
        "--citations-auto-accept",
        "citations_auto_accept",
        "auto_accept",
        "confidence below which a verdict needs review (env CITATIONS_AUTO_ACCEPT; default 0.8)",
    ),
)

_STATE: pytest.StashKey[_SessionState] = pytest.StashKey()
_ITEM_CALLS: pytest.StashKey[_ItemCitations] = pytest.StashKey()
_ITEM_GATE: pytest.StashKey[MarkerGate] = pytest.StashKey()


class _ItemCitations:
    def __init__(self) -> None:
        self.claims: list[ClaimVerdict] = []
        self.requests: dict[str, int] = {"replayed": 0, "live": 0}
        self.configuration: str | None = None


class _SessionState:
    def __init__(self, record_mode: str) -> None:
        self.record_mode = record_mode
        self.collected: SessionCitations | None = None
        self.outcomes: dict[str, str] = {}
        self.gate_lines: list[str] = []
        self.diff_lines: list[str] = []
        self.report_path: Path | None = None
        #: Every configuration a verification used, by id, in order of first use:
        #: folders may override the settings, and the report names each test's.
        self.configurations: dict[str, dict[str, Any]] = {}
        self._configuration_ids: dict[int, tuple[Settings, str]] = {}
        #: Configurations this process already sent with a test's verdicts: each
        #: travels once, with the first test that used it (xdist workers included,
        #: so a worker that crashes later has already sent what its tests name).
        self.configurations_sent: set[str] = set()
        #: Built once per distinct configuration, not once per session: a folder's
        #: conftest may override the cassette dir or settings, and every test must
        #: get the recorder and verifier of its own folder (see the fixtures).
        self.settings: dict[tuple[Any, ...], Settings] = {}
        self.recorders: dict[tuple[Any, ...], Recorder] = {}
        self.verifiers: dict[tuple[int, ...], Verifier] = {}

    def configuration_id(self, settings: Settings, rootpath: Path) -> str:
        """The id under which ``settings`` appear in the report (registered on first use).

        Looked up by identity (the fixtures cache one Settings per configuration;
        the dict keeps each alive, so an id is never reused), not by hash: a
        ``model_copy`` may hold a value that does not hash.
        """
        known = self._configuration_ids.get(id(settings))
        if known is not None:
            return known[1]
        try:
            data = _settings_json(settings, rootpath)
        except Exception as error:  # the report must not fail a test
            data = {"error": f"{type(error).__name__}: {error}"}
        canonical = json.dumps(data, sort_keys=True, ensure_ascii=False, default=str)
        name = hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:12]
        self._configuration_ids[id(settings)] = (settings, name)
        self.configurations.setdefault(name, json.loads(canonical))
        return name

    def citations(self) -> SessionCitations:
        if self.collected is None:
            from pytest_citations.report import SessionCitations

            self.collected = SessionCitations()
        return self.collected


# -- options ----------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("citations", "citation verification (pytest-citations)")
    group.addoption(
        "--citations-record-mode",
        choices=RECORD_MODES,
        default=None,
        help="cassette record mode: none, once, new_episodes or all (env "
        "CITATIONS_RECORD_MODE; default once, none when CI is set)",
    )
    parser.addini("citations_record_mode", "default cassette record mode", default="")
    group.addoption(
        "--citations-cassette-dir",
        default=None,
        metavar="DIR",
        help=f"cassette folder (default <rootdir>/{DEFAULT_CASSETTE_DIR})",
    )
    parser.addini("citations_cassette_dir", "cassette folder, relative to the rootdir", default="")
    group.addoption(
        "--citations-report",
        default=None,
        metavar="PATH",
        help="write a JSON report of every claim and citation verdict",
    )
    group.addoption(
        "--citations-floor",
        type=float,
        default=None,
        metavar="F",
        help="fail the session when citation precision is below F",
    )
    parser.addini("citations_floor", "session citation precision floor", default="")
    group.addoption(
        "--citations-baseline",
        default=None,
        metavar="PATH",
        help="compare with an earlier --citations-report and fail on regressions",
    )
    group.addoption(
        "--citations-baseline-tolerance",
        type=float,
        default=None,
        metavar="T",
        help=f"allowed precision drop against the baseline (default {DEFAULT_BASELINE_TOLERANCE})",
    )
    parser.addini(
        "citations_baseline_tolerance",
        "allowed precision drop against the baseline",
        default="",
    )
    for flag, ini, _field, text in _SETTING_OPTIONS:
        group.addoption(flag, default=None, help=text)
        parser.addini(ini, text, default="")
    group.addoption(
        "--citations-allow-private-hosts",
        action="store_true",
        default=None,
        help="let direct fetches reach private/loopback hosts (env CITATIONS_ALLOW_PRIVATE_HOSTS)",
    )
    parser.addini(
        "citations_allow_private_hosts", "let direct fetches reach private hosts", default=""
    )
    group.addoption(
        "--citations-audit",
        default=None,
        metavar="PATH",
        help="append one row per citation to this SQLite audit index (ini citations_audit)",
    )
    parser.addini("citations_audit", "SQLite audit index, relative to the rootdir", default="")


def _ini(config: pytest.Config, name: str) -> str | None:
    value = config.getini(name)
    text = str(value).strip() if value is not None else ""
    return text or None


def _truthy(value: str | None) -> bool:
    return bool(value) and str(value).strip().lower() not in ("0", "false", "no", "off")


def resolve_record_mode(config: pytest.Config) -> str:
    """Command line > CITATIONS_RECORD_MODE > ini > ``none`` under CI, else ``once``.

    ``once`` locally records what is missing and replays the rest; under CI
    nothing may go to the network unnoticed, so a missing cassette fails.
    """
    cli = config.getoption("citations_record_mode")
    env = os.environ.get("CITATIONS_RECORD_MODE", "").strip() or None
    ini = _ini(config, "citations_record_mode")
    mode = cli or env or ini or ("none" if _truthy(os.environ.get("CI")) else "once")
    if mode not in RECORD_MODES:
        where = "CITATIONS_RECORD_MODE" if env and not cli else "citations_record_mode"
        raise pytest.UsageError(
            f"{where}={mode!r} is not a record mode; choose one of {', '.join(RECORD_MODES)}"
        )
    return mode


def _float_option(config: pytest.Config, option: str, ini: str) -> float | None:
    value = config.getoption(option)
    if value is not None:
        return float(value)
    raw = _ini(config, ini)
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:
        raise pytest.UsageError(f"ini option {ini}={raw!r} is not a number") from None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "citations(floor=None, fail_on=('contradicted', 'fabricated'), reachable_only=False): "
        "fail the test when a verified citation has a fail_on label or precision is below floor",
    )
    floor = _float_option(config, "citations_floor", "citations_floor")
    if floor is not None and not 0 <= floor <= 1:
        raise pytest.UsageError(f"--citations-floor must be in [0, 1], not {floor}")
    config.stash[_STATE] = _SessionState(resolve_record_mode(config))
    if _audit_path(config) is not None and RUN_ID_VARIABLE not in os.environ:
        from pytest_citations.audit import new_run_id

        os.environ[RUN_ID_VARIABLE] = new_run_id()  # before xdist starts its workers
    config.pluginmanager.register(_Collector(config), "citations-collector")


def _audit_path(config: pytest.Config) -> Path | None:
    raw = config.getoption("citations_audit") or _ini(config, "citations_audit")
    if raw is None:
        return None
    path = Path(raw)
    return path if path.is_absolute() else config.rootpath / path


# -- fixtures ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def citations_record_mode(pytestconfig: pytest.Config) -> str:
    """The record mode for every cassette (see :func:`resolve_record_mode`)."""
    return pytestconfig.stash[_STATE].record_mode


@pytest.fixture(scope="session")
def citations_cassette_dir(pytestconfig: pytest.Config) -> Path:
    """Where cassettes live: ``--citations-cassette-dir`` > ini ``citations_cassette_dir``
    > ``<rootdir>/tests/cassettes/citations``.

    One project-wide folder (not one per test module), because cassettes are
    keyed by page and citation: pages shared by several modules are recorded
    once, and renaming or moving a test orphans nothing. Relative paths are
    taken from the rootdir.
    """
    return _configured_cassette_dir(pytestconfig)


def _configured_cassette_dir(config: pytest.Config) -> Path:
    raw = config.getoption("citations_cassette_dir") or _ini(config, "citations_cassette_dir")
    path = Path(raw or DEFAULT_CASSETTE_DIR)
    return path if path.is_absolute() else config.rootpath / path


# The three fixtures below are function-scoped on purpose, each returning an object
# cached in the session state under the inputs it was built from. A session-scoped
# fixture is built once per definition, for whichever folder asks first: with
# ``pytest examples`` (one conftest per example, each overriding the cassette dir),
# every folder would get the first folder's recorder. Override them with function
# scope (the default) too; the objects they return may still be shared.


@pytest.fixture
def citations_settings(pytestconfig: pytest.Config, citations_cassette_dir: Path) -> Settings:
    """Pipeline settings: command line > environment > ini options > defaults.

    The embedding cache defaults to ``<cassette dir>/embeddings`` so a committed
    cassette folder replays on a fresh CI machine without loading torch.
    """
    state = pytestconfig.stash[_STATE]
    settings = state.settings.get((citations_cassette_dir,))
    if settings is None:
        settings = state.settings[(citations_cassette_dir,)] = _build_settings(
            pytestconfig, citations_cassette_dir
        )
    return settings


def _build_settings(pytestconfig: pytest.Config, citations_cassette_dir: Path) -> Settings:
    from pytest_citations.settings import Settings

    defaults: dict[str, Any] = {
        "embedding_cache_dir": citations_cassette_dir / "embeddings",
        "extraction_cache_dir": citations_cassette_dir / "extracted",
    }
    cli: dict[str, Any] = {}
    for flag, ini, field, _text in _SETTING_OPTIONS:
        ini_value = _ini(pytestconfig, ini)
        if ini_value is not None:
            defaults[field] = ini_value
        cli_value = pytestconfig.getoption(flag.lstrip("-").replace("-", "_"))
        if cli_value is not None:
            cli[field] = cli_value
    ini_private = _ini(pytestconfig, "citations_allow_private_hosts")
    if ini_private is not None:
        defaults["allow_private_hosts"] = _truthy(ini_private)
    if pytestconfig.getoption("citations_allow_private_hosts"):
        cli["allow_private_hosts"] = True
    return Settings.from_env(defaults=defaults, **cli)


@pytest.fixture(scope="session")
def citations_embedder() -> Embedder | None:
    """The embedder; None means the pipeline's MiniLM behind the on-disk cache.

    Override it (session scope) to inject a small deterministic embedder in
    tests of your own tooling.
    """
    return None


@pytest.fixture(scope="session")
def citations_judge() -> Judge | None:
    """The judge; None means the provider named by the settings."""
    return None


@pytest.fixture
def citations_recorder(
    pytestconfig: pytest.Config,
    citations_cassette_dir: Path,
    citations_record_mode: str,
    citations_settings: Settings,
) -> Recorder:
    """The cassette recorder of this test's cassette folder (one per folder and mode)."""
    from pytest_citations.cassettes import CassetteRecorder, known_secrets

    state = pytestconfig.stash[_STATE]
    secrets = known_secrets(citations_settings)
    key = (
        citations_cassette_dir,
        citations_record_mode,
        tuple(sorted(secrets.items())),
        citations_settings.allow_private_hosts,
    )
    recorder = state.recorders.get(key)
    if recorder is None:
        recorder = state.recorders[key] = CassetteRecorder(
            citations_cassette_dir,
            record_mode=citations_record_mode,
            secrets=secrets,
            allow_private_hosts=citations_settings.allow_private_hosts,
        )
    return recorder


@pytest.fixture
def citations_verifier(
    pytestconfig: pytest.Config,
    citations_settings: Settings,
    citations_embedder: Embedder | None,
    citations_judge: Judge | None,
    citations_recorder: Recorder,
) -> Verifier:
    """One Verifier per configuration: pages are fetched once, the model loads once."""
    from pytest_citations.pipeline import Verifier

    state = pytestconfig.stash[_STATE]
    parts = (citations_settings, citations_embedder, citations_judge, citations_recorder)
    key = tuple(id(part) for part in parts)
    verifier = state.verifiers.get(key)
    if verifier is None:
        verifier = state.verifiers[key] = Verifier(
            citations_settings,
            embedder=citations_embedder,
            judge=citations_judge,
            recorder=citations_recorder,
        )
    return verifier


@pytest.fixture(scope="session")
def citations_audit(pytestconfig: pytest.Config) -> AuditLog | None:
    """The SQLite audit index of ``--citations-audit`` (None when not asked for).

    Opt-in: a test suite is usually replayed, and the audit trail matters for
    live runs. WAL mode lets every xdist worker write to the same file.
    """
    path = _audit_path(pytestconfig)
    if path is None:
        return None
    from pytest_citations.audit import AuditLog

    return AuditLog(path)


class VerifyCitation:
    """The callable behind the ``verify_citation`` fixture."""

    def __init__(
        self,
        item: pytest.Item,
        verifier: Verifier,
        recorder: Recorder,
        audit: AuditLog | None = None,
        configuration: str | None = None,
    ) -> None:
        self._item = item
        self._verifier = verifier
        self._recorder = recorder
        self._audit = audit
        self._configuration = configuration

    def __call__(
        self,
        claim: str,
        urls: Sequence[str] | str,
        *,
        quote: str | None = None,
        section: str | None = None,
    ) -> ClaimVerdict:
        """Verify ``claim`` against each URL; the verdict compares equal to its label."""
        __tracebackhide__ = True
        return self._run(
            claim, lambda: self._verifier.verify(claim, urls, quote=quote, section=section)
        )

    async def averify(
        self,
        claim: str,
        urls: Sequence[str] | str,
        *,
        quote: str | None = None,
        section: str | None = None,
    ) -> ClaimVerdict:
        """The same, for async tests."""
        __tracebackhide__ = True
        self._before(claim)
        before = _stats(self._recorder)
        verdict = await self._verifier.averify(claim, urls, quote=quote, section=section)
        return self._after(verdict, before)

    def _before(self, claim: str) -> None:
        context = getattr(self._recorder, "context", None)
        if context is not None:
            context.nodeid = self._item.nodeid
            context.test_name = getattr(self._item, "originalname", None) or self._item.name
            context.claim = claim
        pop = getattr(self._recorder, "pop_errors", None)
        if pop is not None:
            pop()

    def _run(self, claim: str, call: Callable[[], ClaimVerdict]) -> ClaimVerdict:
        __tracebackhide__ = True
        self._before(claim)
        before = _stats(self._recorder)
        return self._after(call(), before)

    def _after(self, verdict: ClaimVerdict, before: dict[str, int]) -> ClaimVerdict:
        __tracebackhide__ = True
        after = _stats(self._recorder)
        record = self._item.stash.setdefault(_ITEM_CALLS, _ItemCitations())
        record.configuration = self._configuration
        for name in ("replayed", "live"):
            record.requests[name] += after.get(name, 0) - before.get(name, 0)
        pop = getattr(self._recorder, "pop_errors", None)
        errors = pop() if pop is not None else []
        if errors:  # a stage swallowed a cassette error: it must still fail the test
            raise errors[0]
        record.claims.append(verdict)
        if self._audit is not None:
            self._audit.record(os.environ.get(RUN_ID_VARIABLE, "unknown"), verdict)
        return verdict


def _stats(recorder: Recorder) -> dict[str, int]:
    stats = getattr(recorder, "stats", None)
    return stats.snapshot() if stats is not None else {}


@pytest.fixture
def verify_citation(
    request: pytest.FixtureRequest,
    citations_verifier: Verifier,
    citations_recorder: Recorder,
    citations_audit: AuditLog | None,
) -> VerifyCitation:
    """``verify_citation(claim, urls, *, quote=None, section=None) -> ClaimVerdict``.

    ``assert verify_citation(claim, urls) == "supported"`` shows one row per
    citation when it fails. Every call is recorded for the test's marker gate,
    the JUnit properties and the session report. ``await
    verify_citation.averify(...)`` in async tests.
    """
    state = request.config.stash[_STATE]
    configuration = state.configuration_id(citations_verifier.settings, request.config.rootpath)
    return VerifyCitation(
        request.node, citations_verifier, citations_recorder, citations_audit, configuration
    )


# -- per-test hooks ---------------------------------------------------------------------


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    marker = item.get_closest_marker("citations")
    if marker is None:
        return
    from pytest_citations.report import parse_marker

    try:
        item.stash[_ITEM_GATE] = parse_marker(marker.args, marker.kwargs)
    except ValueError as error:
        pytest.fail(f"{item.nodeid}: {error}", pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    result = yield  # a test that already failed is not gated again
    gate = item.stash.get(_ITEM_GATE, None)
    if gate is not None:
        record = item.stash.get(_ITEM_CALLS, None)
        message = gate.failures(record.claims if record is not None else [])
        if message:
            pytest.fail(message, pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    try:
        return (yield)
    finally:
        record = item.stash.get(_ITEM_CALLS, None)
        if record is not None and record.claims:
            from pytest_citations.report import encode_test_property, precision

            citations = [c for claim in record.claims for c in claim.citations]
            state = item.config.stash[_STATE]
            settings = None
            if record.configuration not in state.configurations_sent:
                settings = state.configurations.get(record.configuration or "")
                state.configurations_sent.add(record.configuration or "")
            item.user_properties.append(
                (
                    "citations",
                    encode_test_property(
                        record.claims, record.requests, record.configuration, settings
                    ),
                )
            )
            item.user_properties.append(
                ("citation_precision", precision(citations).lines()[0].split("=", 1)[1])
            )


def pytest_assertrepr_compare(
    config: pytest.Config, op: str, left: object, right: object
) -> list[str] | None:
    """``verdict == "supported"`` failing shows the claim and one row per citation."""
    models = sys.modules.get("pytest_citations.models")
    if models is None or op not in ("==", "!="):
        return None  # no ClaimVerdict can exist before the models module is imported
    if isinstance(left, models.ClaimVerdict) and isinstance(right, str):
        verdict, expected = left, right
    elif isinstance(right, models.ClaimVerdict) and isinstance(left, str):
        verdict, expected = right, left
    else:
        return None
    from pytest_citations.report import explain_comparison

    return explain_comparison(verdict, op, expected)


# -- session end: report, gates, summary ------------------------------------------------


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _settings_json(settings: Settings, rootpath: Path) -> dict[str, Any]:
    """The settings for the report: no secret field, paths relative to the rootdir
    so a committed report does not name the machine that produced it.

    Every text value is also scrubbed like a cassette's URL: an endpoint such as
    ``OPENAI_BASE_URL`` may carry ``user:password@`` or a ``?token=``, and a key
    may have been pasted into a field that is not a secret one.
    """
    from pytest_citations.cassettes import known_secrets, scrub_uri
    from pytest_citations.settings import SECRET_FIELDS

    data: dict[str, Any] = settings.model_dump(mode="json", exclude=set(SECRET_FIELDS))
    for field in ("embedding_cache_dir", "extraction_cache_dir"):
        value = getattr(settings, field)
        cache = None if value is None else Path(value)  # model_copy does not validate
        if cache is not None and cache.is_relative_to(rootpath):
            data[field] = cache.relative_to(rootpath).as_posix()
    secrets = known_secrets(settings)
    return {
        name: scrub_uri(value, secrets) if isinstance(value, str) else value
        for name, value in data.items()
    }


def _controller_settings(config: pytest.Config) -> dict[str, Any]:
    """Settings for the report when this process verified nothing itself (xdist controller)."""
    try:
        settings = _build_settings(config, _configured_cassette_dir(config))
    except Exception as error:  # the report must not fail on a settings problem
        return {"error": str(error)}
    return _settings_json(settings, config.rootpath)


class _Collector:
    """Registered per run in ``pytest_configure``: collects verdicts, writes the report,
    applies the session gates and prints the summary (controller or single process)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Collect verdicts from each test's teardown report: once per test, on the
        controller too under xdist (workers send their reports there)."""
        state = self.config.stash[_STATE]
        outcomes = state.outcomes
        if report.failed:
            outcomes[report.nodeid] = "failed"
        elif report.skipped and outcomes.get(report.nodeid) != "failed":
            outcomes[report.nodeid] = "skipped"
        elif report.when == "call" and report.nodeid not in outcomes:
            outcomes[report.nodeid] = "passed"
        if report.when != "teardown":
            return
        for name, value in report.user_properties:
            if name == "citations":
                from pytest_citations.report import decode_test_property

                claims, requests, configuration, settings = decode_test_property(str(value))
                if configuration is not None and settings is not None:
                    state.configurations.setdefault(configuration, settings)
                state.citations().add(
                    report.nodeid,
                    claims,
                    requests,
                    outcomes.get(report.nodeid, "passed"),
                    configuration,
                )

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        config = session.config
        state = config.stash.get(_STATE, None)
        if state is None or _is_worker(config) or state.collected is None:
            return
        collected = state.collected
        if not collected.tests:
            return
        from pytest_citations.pipeline import PIPELINE_VERSION
        from pytest_citations.report import compare_with_baseline, load_report

        named = [record.configuration for record in collected.tests.values()]
        used = {
            name: state.configurations[name]
            for name in dict.fromkeys(named)
            if name is not None and name in state.configurations
        }
        first = next(iter(used.values()), None)
        report = collected.to_json(
            settings=first or _controller_settings(config),
            configurations=used,
            record_mode=state.record_mode,
            pipeline_version=PIPELINE_VERSION,
        )
        path = config.getoption("citations_report")
        if path:
            target = Path(path)
            if not target.is_absolute():
                target = Path(config.invocation_params.dir) / target
            target.parent.mkdir(parents=True, exist_ok=True)
            temporary = target.with_name(f".{target.name}.tmp")
            temporary.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
            os.replace(temporary, target)
            state.report_path = target

        failed = False
        floor = _float_option(config, "citations_floor", "citations_floor")
        value = collected.precision().citation_precision
        if floor is not None and value is not None and value < floor:
            state.gate_lines.append(
                f"FAILED citations floor: {collected.precision().lines()[0]} is below "
                f"--citations-floor={floor}"
            )
            failed = True

        baseline_path = config.getoption("citations_baseline")
        if baseline_path:
            tolerance = _float_option(
                config, "citations_baseline_tolerance", "citations_baseline_tolerance"
            )
            tolerance = DEFAULT_BASELINE_TOLERANCE if tolerance is None else tolerance
            try:
                baseline = load_report(baseline_path)
            except ValueError as error:
                state.gate_lines.append(f"FAILED citations baseline: {error}")
                failed = True
            else:
                diff = compare_with_baseline(report, baseline, tolerance)
                state.diff_lines = [
                    f"baseline {baseline_path} (tolerance {tolerance}):",
                    *diff.lines,
                ]
                for line in diff.failures:
                    state.gate_lines.append(f"FAILED citations baseline: {line}")
                failed = failed or diff.failed
        if failed and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(
        self, terminalreporter: Any, exitstatus: int, config: pytest.Config
    ) -> None:
        state = config.stash.get(_STATE, None)
        if state is None or _is_worker(config) or state.collected is None:
            return
        if not state.collected.tests:
            return
        write = terminalreporter.write_line
        terminalreporter.section("citations")
        for line in state.collected.summary_lines():
            write(line)
        for line in state.diff_lines:
            write(line)
        if state.report_path is not None:
            write(f"report: {state.report_path}")
        for line in state.gate_lines:
            write(line, red=True, bold=True)
