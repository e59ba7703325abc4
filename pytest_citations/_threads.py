"""The pipeline's worker threads, created once per process and reused by every loop.

:meth:`~pytest_citations.pipeline.Verifier.verify` runs each claim in a fresh
``asyncio.run`` loop, and ``asyncio.to_thread`` uses the loop's *default*
executor: every claim would start new threads and join them when its loop
closes (measured: about 0.5 ms a claim, a tenth of a warm replay). These pools
outlive the loops, so a thread is started once per process.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

_P = ParamSpec("_P")
_T = TypeVar("_T")

#: Blocking calls (HTML and PDF extraction, local documents, the Crawlbase SDK's
#: urllib requests) run on up to this many threads: as many as asyncio's default
#: executor allows (32). An SDK call holds its thread for the whole request, and
#: a batch at concurrency 16 must not queue behind them. Threads start only when
#: needed.
BLOCKING_WORKERS = 32


def _embedding_thread() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="citations-embed")


def _blocking_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=BLOCKING_WORKERS, thread_name_prefix="citations-blocking")


#: Every ranking runs on this one thread. Embedding is CPU-bound and the model is
#: shared, so one encode at a time; and torch's OpenMP pool is per calling thread:
#: encodes spread over several threads each start a team of their own, which
#: oversubscribes the cores (measured: cold embedding ~60 % slower).
EMBEDDING_THREAD = _embedding_thread()
#: The blocking calls' threads (see :data:`BLOCKING_WORKERS`).
BLOCKING_POOL = _blocking_pool()


def _new_pools() -> None:
    """Fresh pools in a forked child.

    A child forked after a pool was used inherits an executor whose threads did
    not survive the fork: it would wait forever for them. The child gets new,
    empty pools instead (``multiprocessing``'s fork start method, for one).
    """
    global EMBEDDING_THREAD, BLOCKING_POOL
    EMBEDDING_THREAD = _embedding_thread()
    BLOCKING_POOL = _blocking_pool()


if hasattr(os, "register_at_fork"):  # not on Windows, which cannot fork
    os.register_at_fork(after_in_child=_new_pools)


async def run_blocking(function: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
    """``asyncio.to_thread`` on :data:`BLOCKING_POOL` (context variables included)."""
    loop = asyncio.get_running_loop()
    call = functools.partial(contextvars.copy_context().run, function, *args, **kwargs)
    return await loop.run_in_executor(BLOCKING_POOL, call)


async def run_embedding(function: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
    """Run ``function`` on :data:`EMBEDDING_THREAD`."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(
        EMBEDDING_THREAD, functools.partial(function, *args, **kwargs)
    )
