"""Host side of the sandbox: a pool of warm zygote workers, one per core, each a clean interpreter.

A zygote is started once (a fresh `python -I -S` under bubblewrap, never a fork of the host, so a host
that has imported torch does not hand torch to the workers) and then clones one confined process per
program, which costs about a millisecond instead of the tens of milliseconds of a new interpreter.
"""

from __future__ import annotations

import collections
import functools
import json
import os
import queue
import select
import shutil
import struct
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from sandbox import _zygote

TMPFS_MB = 64  # the jail's /tmp and working directory, used as they are only where programs cannot mount
ZYGOTE_DIR = os.path.dirname(os.path.abspath(_zygote.__file__))
NAMESPACE_WARNING = (
    "sandbox: Linux namespaces are unavailable ({why}); as asked (--unsafe-no-isolation), programs run "
    "with resource limits, seccomp and a session of their own only: no filesystem, network or process "
    "isolation. Install bubblewrap (apt-get install bubblewrap) on a kernel that allows user namespaces."
)
UNSAFE_ENV = "REASONER_UNSAFE_NO_ISOLATION"  # "1": what `reasoner --unsafe-no-isolation` sets


class SandboxUnavailable(RuntimeError):
    """No isolation can be had here and the user did not accept running code without it."""


def _refusal(why: str) -> str:
    return (f"sandbox: Linux namespaces are unavailable ({why}), so model-written code cannot be isolated "
            f"here and is not run. Install bubblewrap (apt-get install bubblewrap) on a kernel that allows "
            f"unprivileged user namespaces, or accept resource limits without isolation with "
            f"`reasoner --unsafe-no-isolation ...` ({UNSAFE_ENV}=1, or Sandbox(unsafe_no_isolation=True)).")


def _bwrap_command(python: str) -> list[str] | None:
    """bubblewrap arguments for a zygote: the worker sees the system read-only plus its own code; the
    programs it runs are chrooted into JAIL, which has the same system directories, /dev and two
    size-capped tmpfs mounts, and no /proc."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None
    cmd = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
           "--setenv", "SANDBOX_ISOLATION", "bwrap", "--setenv", "PATH", "/usr/bin:/bin"]
    prefixes = {os.path.realpath(sys.base_prefix), os.path.dirname(os.path.dirname(python))}
    for root in ("", _zygote.JAIL):
        for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if os.path.islink(top):
                cmd += ["--symlink", os.readlink(top), root + top]
            elif os.path.isdir(top):
                cmd += ["--ro-bind", top, root + top]
        cmd += ["--ro-bind", "/usr", root + "/usr"]
        for prefix in sorted(prefixes):
            if not prefix.startswith("/usr/") and prefix != "/usr":
                cmd += ["--ro-bind", prefix, root + prefix]
    size = ["--size", str(TMPFS_MB * 2**20)] if _bwrap_has_size(bwrap) else []
    # Only the devices a program may need, each its own bind mount: every mount here is copied into each
    # program's mount namespace and torn down with it, so a full /dev (eight mounts) twice would cost.
    for device in _zygote.DEVICES:  # each program remounts the jail's read-only (see _zygote.py)
        cmd += ["--dev-bind", device, device, "--dev-bind", device, _zygote.JAIL + device]
    cmd += ["--ro-bind", ZYGOTE_DIR, "/opt/sandbox", "--proc", "/proc",
            *size, "--tmpfs", _zygote.JAIL + "/tmp", *size, "--tmpfs", _zygote.JAIL + _zygote.WORKDIR,
            # Nothing else is writable: not the root tmpfs bubblewrap builds, /dev included (no /dev/shm).
            "--remount-ro", "/", "--chdir", "/", "--"]
    return cmd



def _bwrap_error(cmd: list[str]) -> str:
    """What bubblewrap says when it cannot start a sandbox (for the warning)."""
    try:
        done = subprocess.run(cmd + ["/bin/true"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    return (done.stderr.strip() or f"exit status {done.returncode}")[:200]


@functools.lru_cache(maxsize=None)
def _bwrap_has_size(bwrap: str) -> bool:
    """bubblewrap before 0.7 has no --size; its tmpfs mounts are then capped only by RLIMIT_FSIZE per file."""
    try:
        return "--size" in subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return False


# Per program, besides the time and memory limits each job names: tmpfs size and files of its working
# directory and of /tmp, largest file, processes (where the uid is not the host's root), bytes kept of
# each of stdout and stderr (more kills the program).
DEFAULT_LIMITS = {"disk_mb": 64, "inodes": 4096, "file_mb": 16, "nproc": 64, "output_limit": 1 << 20}


def job(kind: str, timeout_s: float = 5.0, memory_mb: int = 512, **fields) -> dict:
    """A job for `Sandbox.run`/`Sandbox.map`: kind "run" (fields source, stdin) or "tests" (source and
    setup+tests, or check+entry_point+prefix); `fields` may also override DEFAULT_LIMITS."""
    return {"kind": kind, "timeout_s": float(timeout_s), "memory_mb": int(memory_mb), **DEFAULT_LIMITS, **fields}


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity, which containers narrow), not the machine's."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _encode(cfg: dict) -> bytes:
    body = json.dumps(cfg).encode()
    return struct.pack(">I", len(body)) + body


PIPELINE_BYTES = 32 << 10  # a second job is queued in a worker's pipe only if it fits there without blocking


class Zygote:
    """One warm worker process and its control pipes."""

    def __init__(self, prefer_namespaces: bool = True):
        python = os.path.realpath(sys.executable)
        args = [python, "-I", "-S", "-B"]
        bwrap = _bwrap_command(python) if prefer_namespaces else None
        if bwrap:
            cmd, env = bwrap + args + ["/opt/sandbox/_zygote.py"], {}
        else:
            cmd = args + [os.path.join(ZYGOTE_DIR, "_zygote.py")]
            env = {"SANDBOX_ISOLATION": "none", "PATH": "/usr/bin:/bin"}
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, close_fds=True)
        self.owner = os.getpid()
        hello = self._receive(30.0)
        if hello is None and bwrap:  # bubblewrap is installed but cannot run here (no user namespaces)
            self.close()
            why = _bwrap_error(bwrap)
            self.__init__(prefer_namespaces=False)
            self.problem = f"bubblewrap failed: {why}"
            return
        if hello is None:
            raise RuntimeError("sandbox: the zygote worker failed to start")
        self.namespaced = bool(hello["namespaced"])
        if bwrap:
            self.problem = hello["problem"]
        else:
            self.problem = "bubblewrap (bwrap) not found" if prefer_namespaces else "namespaces turned off"

    def send(self, message: bytes) -> None:
        data = message
        while data:
            data = data[os.write(self.proc.stdin.fileno(), data):]

    def receive(self, cfg: dict) -> dict | None:
        """The result of the oldest job sent; None if the worker died or overstayed that job's limit."""
        return self._receive(_zygote.WALL_FACTOR * cfg["timeout_s"] + 15.0)

    def _receive(self, timeout: float) -> dict | None:
        fd = self.proc.stdout.fileno()
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            return None
        try:
            return _zygote.read_msg(fd)
        except (OSError, ValueError):
            return None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.owner != os.getpid():
            return  # a forked copy of the host must not touch its parent's workers
        try:
            self.proc.kill()
            self.proc.wait(5)
        except (OSError, subprocess.TimeoutExpired):
            pass


# bubblewrap's --die-with-parent follows the thread that started it, so workers are started from
# long-lived threads (an executor's threads live as long as the process) rather than from whichever
# short-lived pool thread first needed them; several at once, since each takes a few hundred milliseconds.
_spawner: ThreadPoolExecutor | None = None
_spawner_pid = 0
_spawner_lock = threading.Lock()


def _start_zygote(prefer_namespaces: bool) -> Zygote:
    global _spawner, _spawner_pid
    with _spawner_lock:
        if _spawner is None or _spawner_pid != os.getpid():
            _spawner = ThreadPoolExecutor(usable_cores(), thread_name_prefix="sandbox-spawner")
            _spawner_pid = os.getpid()
    return _spawner.submit(Zygote, prefer_namespaces).result()


class Sandbox:
    """A pool of zygotes; `run` sends one job to an idle one, `map` keeps every worker busy."""

    def __init__(self, workers: int | None = None, namespaces: bool = True, unsafe_no_isolation: bool | None = None):
        """`workers` warm processes (default: one per usable core). Where namespaces cannot be had (or
        `namespaces=False`, for tests and comparisons), programs are refused with `SandboxUnavailable`
        unless `unsafe_no_isolation` (default: the environment variable REASONER_UNSAFE_NO_ISOLATION=1)
        accepts running them with limits only."""
        self.workers = max(1, workers or usable_cores())
        self.prefer_namespaces = namespaces
        if unsafe_no_isolation is None:
            unsafe_no_isolation = os.environ.get(UNSAFE_ENV, "") not in ("", "0")
        self.unsafe_no_isolation = unsafe_no_isolation
        self._idle: queue.SimpleQueue[Zygote] = queue.SimpleQueue()
        self._started = 0
        self._lock = threading.Lock()
        self._owner = os.getpid()
        self._warned = False
        self.namespaced: bool | None = None
        self.problem: str | None = None

    def _reset_after_fork(self) -> None:
        self._idle, self._started, self._owner = queue.SimpleQueue(), 0, os.getpid()

    def _acquire(self) -> Zygote:
        if os.getpid() != self._owner:
            self._reset_after_fork()
        with self._lock:
            spawn = self._idle.empty() and self._started < self.workers
            if spawn:
                self._started += 1
        if not spawn:
            return self._idle.get()
        try:
            zygote = _start_zygote(self.prefer_namespaces)
        except BaseException:
            with self._lock:
                self._started -= 1
            raise
        self.namespaced, self.problem = zygote.namespaced, zygote.problem
        if not zygote.namespaced and not self.unsafe_no_isolation:
            self._discard(zygote)
            raise SandboxUnavailable(_refusal(zygote.problem))
        if not zygote.namespaced and not self._warned:
            self._warned = True
            warnings.warn(NAMESPACE_WARNING.format(why=zygote.problem), RuntimeWarning, stacklevel=4)
        return zygote

    def _release(self, zygote: Zygote) -> None:
        if zygote.alive():
            self._idle.put(zygote)
        else:
            self._discard(zygote)

    def _discard(self, zygote: Zygote) -> None:
        """Kill a worker and wait for it: one only signalled may still look alive, and reused, it would
        report the next job as killed."""
        zygote.close()
        with self._lock:
            self._started -= 1

    def warm_up(self) -> None:
        """Start every worker now (a few hundred milliseconds each, in parallel) rather than on first use."""
        self.map([job("run", source="")] * self.workers)

    def run(self, cfg: dict) -> dict:
        """Run one job (see `_zygote.serve`) and return its result dict."""
        return self.map([cfg])[0]

    def map(self, cfgs: Iterable[dict], workers: int | None = None) -> list[dict]:
        """Results for many jobs, in order, with every worker (or `workers` of them) busy. Each worker
        has a second job waiting in its pipe while it runs one, so it never waits for the host."""
        cfgs = list(cfgs)
        todo = collections.deque(range(len(cfgs)))
        results: list[dict | None] = [None] * len(cfgs)
        width = min(workers or self.workers, self.workers, len(cfgs))
        if width <= 1:
            self._feed(cfgs, todo, results, 1)
        else:
            with ThreadPoolExecutor(width) as pool:
                for done in [pool.submit(self._feed, cfgs, todo, results, width) for _ in range(width)]:
                    done.result()
        return results  # type: ignore[return-value]

    def _feed(self, cfgs: list[dict], todo: collections.deque, results: list, width: int) -> None:
        """One host thread driving one worker until no job is left. A second job is queued behind the
        running one only while there are jobs enough for every worker, so the tail of a batch spreads."""
        zygote: Zygote | None = self._acquire()
        inflight: collections.deque[int] = collections.deque()
        try:
            while True:
                while len(inflight) < 2 and (not inflight or len(todo) >= width):
                    try:
                        i = todo.popleft()
                    except IndexError:
                        break
                    message = _encode(cfgs[i])
                    if inflight and len(message) > PIPELINE_BYTES:
                        todo.appendleft(i)
                        break
                    try:
                        zygote.send(message)
                    except OSError:
                        todo.appendleft(i)
                        break
                    inflight.append(i)
                if not inflight:
                    if todo:  # the worker died before taking any job: get another one
                        self._release(zygote)
                        zygote = None
                        zygote = self._acquire()
                        continue
                    return
                t0 = time.monotonic()
                head = inflight.popleft()
                result = zygote.receive(cfgs[head])
                lost = result is None or "retire" in result
                if result is None:  # the worker died or hung on this job: it counts as killed, never passed
                    result = {"status": "killed", "reason": "sandbox worker died", "exit_code": None,
                              "stdout": "", "stderr": "", "duration_s": time.monotonic() - t0}
                results[head] = self._annotate(result, zygote)
                if not lost:
                    continue
                # The worker is gone, or saw something it must not outlive (it exits by itself): jobs queued
                # behind this one never started there and run elsewhere.
                todo.extendleft(reversed(inflight))
                inflight.clear()
                self._discard(zygote)
                zygote = None
                zygote = self._acquire()
        finally:
            if zygote is not None:
                if inflight:  # an exception left results in the pipe: this worker cannot be reused
                    self._discard(zygote)
                else:
                    self._release(zygote)

    @staticmethod
    def _annotate(result: dict, zygote: Zygote) -> dict:
        result["isolation"] = "namespaces" if zygote.namespaced else "limits only"
        result["warning"] = None if zygote.namespaced else NAMESPACE_WARNING.format(why=zygote.problem)
        return result

    def close(self) -> None:
        while not self._idle.empty():
            self._idle.get().close()
        self._started = 0
