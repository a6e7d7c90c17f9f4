"""A pool of persistent worker processes whose jobs can be cut off at a deadline by killing them.

Why processes, and why kill: sympy and Python's big integers can run for ever inside one C call
(`9**9**9**9`, a simplify that explodes), and no exception, signal or thread can interrupt that
from the same process (signals only reach the main thread; threads cannot be stopped). A separate
process can always be killed, so the time bound holds whatever the input and whichever thread calls.

Why persistent and forked: a fresh interpreter costs about a second to import sympy; a worker forked
from the caller starts warm in milliseconds and then serves job after job over a pipe. Workers are
started with `os.fork` rather than `multiprocessing.Process` so that a caller that is itself a
daemonic pool worker can still use them. A worker that overruns is killed and replaced at once;
a worker whose parent has gone exits by itself within a second.
"""

from __future__ import annotations

import atexit
import gc
import os
import resource
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from multiprocessing import Pipe
from multiprocessing.connection import Connection, wait

_WORKER_MEMORY_BYTES = 4 << 30  # on top of what the caller already uses: a runaway sympy job hits
# MemoryError in its worker instead of swapping the machine


class _Worker:
    def __init__(self, fn: Callable, inherited: list[Connection]):
        parent_conn, child_conn = Pipe(duplex=True)
        parent_pid = os.getpid()
        # Freezing moves every existing object out of the collector's sight in the child, so the
        # child's garbage collections do not write to (and so copy) the caller's whole heap.
        gc.freeze()
        try:
            pid = os.fork()
        except OSError:
            gc.unfreeze()
            parent_conn.close()
            child_conn.close()
            raise
        if pid != 0:
            gc.unfreeze()
        if pid == 0:  # the child never returns from here
            try:
                parent_conn.close()
                for conn in inherited:  # other workers' pipes: holding them would hide their parent's exit
                    conn.close()
                _serve(fn, child_conn, parent_pid)
            finally:
                os._exit(0)
        child_conn.close()
        self.pid, self.conn = pid, parent_conn

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        self.conn.close()


def _serve(fn: Callable, conn: Connection, parent_pid: int) -> None:
    """The worker's loop: one job in, one `("ok", result)` or `("error", message)` out."""
    # The caller's handlers (a trainer's checkpoint-on-SIGTERM, say) must not run in a worker.
    for sig in signal.valid_signals():
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError, RuntimeError):
            pass  # SIGKILL, SIGSTOP and a few others cannot be changed
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the caller, which then stops us
    _limit_memory()
    while True:
        while not conn.poll(1.0):
            if os.getppid() != parent_pid:
                return
        try:
            args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            reply = ("ok", fn(*args))
        except BaseException as exc:  # noqa: BLE001  a job's failure is reported, never fatal to the worker
            reply = ("error", f"{type(exc).__name__}: {str(exc)[:200]}")
        try:
            conn.send(reply)
        except (OSError, ValueError):
            return


def _limit_memory() -> None:
    try:
        with open("/proc/self/statm") as f:
            current = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        limit = current + _WORKER_MEMORY_BYTES
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    except (OSError, ValueError):
        pass


class WorkerPool:
    """Runs `fn(*args)` for many argument tuples in worker processes, each job within `timeout_s`.

    Thread-safe: concurrent callers each take some idle workers (new ones are forked up to
    `max_workers`), so one caller's slow batch does not hold up another's single call for long.
    """

    def __init__(self, fn: Callable, max_workers: int):
        self.fn = fn
        self.max_workers = max(1, max_workers)
        self._idle: list[_Worker] = []
        self._count = 0
        self._owner_pid = os.getpid()
        self._cond = threading.Condition()
        atexit.register(self.close)

    def map(self, jobs: Sequence[tuple], timeout_s: float, parallel: int | None = None,
            groups: Sequence[object] | None = None) -> list[tuple[str, object]]:
        """`("ok", result)`, `("error", message)` or `("timeout", None)` for each job, in order.

        Each job gets `timeout_s`; the jobs that start at once get it counted from the call's start,
        so time spent waiting for a worker busy with another thread's call is part of their bound
        (a single call returns within `timeout_s` however many threads call at once).
        `groups` (one label per job): jobs with the same label share one deadline, `timeout_s` from the
        start of the first of them, so that one response's several answers together get `timeout_s`;
        a job whose group's deadline has passed before it starts is a timeout without running.
        Raises OSError only if not a single worker process can be started.
        """
        if not jobs:
            return []
        self._forget_if_forked()
        start = time.monotonic()
        free = self._acquire(min(len(jobs), parallel or self.max_workers), timeout_s)
        if not free:  # every worker busy with other threads' calls for the whole bound
            return [("timeout", None)] * len(jobs)
        first_wave_deadline = start + timeout_s
        first_wave = True
        group_deadline: dict[object, float] = {}
        results: list = [None] * len(jobs)
        pending = deque(range(len(jobs)))
        busy: dict[Connection, tuple[_Worker, int, float]] = {}
        try:
            while pending or busy:
                while pending and free:
                    i = pending.popleft()
                    group = groups[i] if groups is not None else None
                    if group is not None and group in group_deadline and time.monotonic() >= group_deadline[group]:
                        results[i] = ("timeout", None)
                        continue
                    worker = free.pop()
                    try:
                        worker.conn.send(jobs[i])
                    except (OSError, ValueError):
                        results[i] = ("error", "worker unavailable")
                        self._replace(worker, free)
                        continue
                    deadline = first_wave_deadline if first_wave else time.monotonic() + timeout_s
                    if group is not None:
                        deadline = group_deadline.setdefault(group, deadline)
                    busy[worker.conn] = (worker, i, deadline)
                first_wave = False
                if not busy:
                    if pending and not free:  # every replacement failed to start
                        for i in pending:
                            results[i] = ("error", "no worker process could be started")
                        pending.clear()
                    continue
                next_deadline = min(deadline for _, _, deadline in busy.values())
                for conn in wait(list(busy), timeout=max(0.0, next_deadline - time.monotonic())):
                    worker, i, _ = busy.pop(conn)
                    try:
                        results[i] = conn.recv()
                        free.append(worker)
                    except (EOFError, OSError):
                        results[i] = ("error", "worker died")
                        self._replace(worker, free)
                now = time.monotonic()
                for conn, (worker, i, deadline) in list(busy.items()):
                    if now >= deadline:
                        del busy[conn]
                        results[i] = ("timeout", None)
                        worker.kill()
                        if pending:
                            self._replace_killed(free)
                        else:  # nothing left to run: the next call forks a replacement, not this one
                            self._forget_one()
        finally:
            for worker, _, _ in busy.values():  # interrupted mid-batch: their replies would be stale
                worker.kill()
                self._forget_one()
            self._release(free)
        return results

    def _acquire(self, wanted: int, patience_s: float) -> list[_Worker]:
        """Up to `wanted` workers: idle ones first, then newly forked ones; waits up to `patience_s`
        for one if all are busy, and returns none if that passes."""
        deadline = time.monotonic() + patience_s
        with self._cond:
            while not self._idle and self._count >= self.max_workers:
                if not self._cond.wait(timeout=max(0.0, deadline - time.monotonic())):
                    if not self._idle and self._count >= self.max_workers:
                        return []
            taken = [self._idle.pop() for _ in range(min(wanted, len(self._idle)))]
            to_start = max(0, min(wanted - len(taken), self.max_workers - self._count))
            self._count += to_start
        started = 0
        try:
            for _ in range(to_start):
                taken.append(self._new_worker())
                started += 1
        except OSError:
            for _ in range(to_start - started):
                self._forget_one()
            if not taken:
                raise
        return taken

    def _replace(self, worker: _Worker, free: list[_Worker]) -> None:
        """Kill `worker` and put a fresh one in `free`, or shrink the pool if none can be started."""
        worker.kill()
        self._replace_killed(free)

    def _replace_killed(self, free: list[_Worker]) -> None:
        try:
            free.append(self._new_worker())
        except OSError:
            self._forget_one()

    def _forget_one(self) -> None:
        with self._cond:
            self._count -= 1
            self._cond.notify_all()

    def _new_worker(self) -> _Worker:
        with self._cond:
            inherited = [w.conn for w in self._idle]
        return _Worker(self.fn, inherited)

    def _release(self, workers: list[_Worker]) -> None:
        with self._cond:
            self._idle.extend(workers)
            self._cond.notify_all()

    def _forget_if_forked(self) -> None:
        """In a forked copy of the caller the workers belong to the original process: start afresh."""
        if os.getpid() != self._owner_pid:
            with self._cond:
                self._idle, self._count, self._owner_pid = [], 0, os.getpid()

    def close(self) -> None:
        """Stop every idle worker (busy ones are stopped by the call that is using them)."""
        if os.getpid() != self._owner_pid:
            return
        with self._cond:
            idle, self._idle = self._idle, []
            self._count -= len(idle)
        for worker in idle:
            worker.kill()
