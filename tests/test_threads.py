"""The process-wide worker threads (``pytest_citations._threads``)."""

from __future__ import annotations

import asyncio
import contextvars
import multiprocessing
import sys
import threading

import pytest

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
    # default executor would start threads for each loop and join them when it
    # closes. Ours are still alive after their loops are gone.
    used = [asyncio.run(run_blocking(threading.current_thread)) for _ in range(20)]
    assert all(thread.name.startswith("citations-blocking") for thread in used)
    assert all(thread.is_alive() for thread in used)
    assert len({thread.ident for thread in used}) < len(used)  # reused, not one per loop


@pytest.mark.skipif(sys.platform == "win32", reason="no fork on Windows")
def test_a_forked_child_gets_pools_of_its_own() -> None:
    # Threads do not survive a fork: a child that reused the parent's executors
    # would wait forever for workers that are not there.
    asyncio.run(run_blocking(_where))
    asyncio.run(run_embedding(_where))
    context = multiprocessing.get_context("fork")
    child = context.Process(target=_use_both_pools)
    child.start()
    child.join(timeout=20)
    if child.is_alive():
        child.kill()
        pytest.fail("the forked child hung waiting for its parent's worker threads")
    assert child.exitcode == 0


def _use_both_pools() -> None:
    assert asyncio.run(run_blocking(_where))[0].startswith("citations-blocking")
    assert asyncio.run(run_embedding(_where))[0].startswith("citations-embed")


def test_every_embedding_runs_on_the_one_embedding_thread() -> None:
    async def scenario() -> set[str]:
        results = await asyncio.gather(*(run_embedding(_where) for _ in range(8)))
        return {name for name, _ in results}

    assert asyncio.run(scenario()) == {asyncio.run(run_embedding(_where))[0]}
    assert asyncio.run(run_embedding(_where))[0].startswith("citations-embed")
