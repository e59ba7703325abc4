"""The process-wide worker threads (``pytest_citations._threads``)."""

from __future__ import annotations

import asyncio
import contextvars
import threading

from pytest_citations._threads import run_blocking, run_embedding

REQUEST = contextvars.ContextVar("request", default="none")


def _where() -> tuple[str, str]:
    return threading.current_thread().name, REQUEST.get()


def test_blocking_calls_run_off_the_loop_with_the_callers_context() -> None:
    async def scenario() -> tuple[str, str]:
        REQUEST.set("claim-7")
        return await run_blocking(_where)

    name, seen = asyncio.run(scenario())
    assert name.startswith("citations-blocking") and name != threading.current_thread().name
    assert seen == "claim-7"


def test_threads_outlive_the_event_loops_that_used_them() -> None:
    # The synchronous verify runs each claim in a fresh asyncio.run loop; the
    # default executor would start and join new threads for every one of them.
    asyncio.run(run_blocking(_where))  # the pool has at least one idle thread now
    before = {thread.ident for thread in threading.enumerate()}
    names = {asyncio.run(run_blocking(_where))[0] for _ in range(20)}
    assert {thread.ident for thread in threading.enumerate()} == before  # none started
    assert all(name.startswith("citations-blocking") for name in names)


def test_every_embedding_runs_on_the_one_embedding_thread() -> None:
    async def scenario() -> set[str]:
        results = await asyncio.gather(*(run_embedding(_where) for _ in range(8)))
        return {name for name, _ in results}

    assert asyncio.run(scenario()) == {asyncio.run(run_embedding(_where))[0]}
    assert asyncio.run(run_embedding(_where))[0].startswith("citations-embed")
