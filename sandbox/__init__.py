"""Run untrusted, model-written Python programs and unit tests, isolated, at high throughput.

    from sandbox import run_python
    result = run_python(source, stdin="", timeout_s=5.0, memory_mb=512)
    result.status          # "ok" | "error" | "timeout" | "memory" | "killed"
    result.exit_code, result.stdout, result.stderr, result.duration_s

Threat model
------------
The program is hostile: an RL policy rewarded for passing tests will find any hole that pays. We assume
it may run arbitrary Python, including `ctypes`, and may try to (1) hurt or read the host: exhaust CPU,
memory, processes, threads, disk or output; read files, the environment or the network; kill or outlive
its parent; or (2) fake a pass: exit with status 0 before the tests run (`sys.exit`, `os._exit`,
`atexit`, exception hooks, trace functions, signal handlers), print what a harness looks for, redefine
`check`, or return objects whose `__eq__` always says yes.

Against (1), each program runs in its own process, cloned from a warm zygote worker that was started once
under bubblewrap (Debian package `bubblewrap`) with new user, pid, network, mount, ipc and uts namespaces
and a cleared environment. Each program gets user, pid, ipc and mount namespaces of its own and is
chrooted into a jail that shows only read-only /usr, /lib*, the Python installation and a minimal /dev,
plus two tmpfs mounts of its own, capped in bytes and in files: its working directory /sandbox and /tmp.
There is no /proc or /sys (where the host runs as root, as CI does, uid 0 would otherwise get the
owner's rights on the kernel's global settings in /proc/sys). The program is pid 1 of its namespace,
holds no capabilities, may start threads but no processes and signal or trace nobody but itself
(seccomp; pid_max of its namespace is the kernel's minimum as a second cap), and has limits on CPU time,
address space, stack, file size, open files and core dumps. Its time limit counts CPU time, so that a
busy machine does not turn a correct program into a timeout, and a wall clock at twice the limit ends
one that sleeps; either kills it, and with it everything in its pid namespace. Stdout and stderr are
capped. Its only network interface is the loopback of the worker's network namespace. Network and uts
namespaces are per worker, used by its programs one after another: a program holds no capability there
and nothing of it survives its death there; one per program would cost about a third of the throughput.

Against (2), test code never runs in the program's interpreter. The worker, a separate trusted process,
executes the tests and calls the program's functions through a pipe; what comes back is decoded as plain
data (numbers, strings, containers), never unpickled, so no object of the program's making ever reaches a
comparison. Built-in and standard-library names in the tests (`abs`, `len`, `math`) are the worker's
own, and HumanEval helpers (`poly`) come from the task's prompt, not from the program. A test passes only
when the worker itself ran it to its end; the program's exit status and output count for nothing in a
unit-test job (see `_rpc.py`).

Not defended: kernel exploits (namespaces are not a VM), side channels, CPU contention with other jobs,
and a program that finds the answers some other way than computing them (for example by reading tests
it was shown). Tests that observe mutation of their arguments see copies, because values cross the pipe
by value. Where user namespaces or bubblewrap are unavailable the sandbox still runs programs with the
resource limits, seccomp, a process-group kill and a subreaper that reaps escaped daemons, as user
nobody where the host is root (or as root without capabilities where the Python installation is private
to root), but without filesystem, network or process isolation; it says so in a `RuntimeWarning` and
in every result's `isolation` and `warning` fields.

Layout: `pool.py` (host side: starts and feeds the workers), `_zygote.py` (the worker: confinement,
output capture, time limits), `_rpc.py` (unit-test jobs: the pipe between tests and program).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from sandbox.pool import DEFAULT_LIMITS, Sandbox, SandboxUnavailable, job

__all__ = ["DEFAULT_LIMITS", "RunResult", "Sandbox", "SandboxUnavailable", "run_python", "default_sandbox", "job"]

@dataclass(frozen=True)
class RunResult:
    """How one program ended."""

    status: str  # "ok" | "error" | "timeout" | "memory" | "killed"
    exit_code: int | None  # negative: killed by that signal
    stdout: str
    stderr: str
    duration_s: float
    reason: str = ""  # "exited 1", "timeout", "output limit", "killed by SIGSEGV", ...
    isolation: str = "namespaces"  # or "limits only" where namespaces are unavailable
    warning: str | None = None  # set whenever isolation is weaker than namespaces

    @classmethod
    def from_dict(cls, d: dict) -> "RunResult":
        return cls(d["status"], d.get("exit_code"), d.get("stdout", ""), d.get("stderr", ""),
                   float(d.get("duration_s") or 0.0), d.get("reason") or "", d.get("isolation", ""),
                   d.get("warning"))


_default: Sandbox | None = None
_default_lock = threading.Lock()


def default_sandbox() -> Sandbox:
    """The process-wide pool of workers, started on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Sandbox()
        return _default


def run_python(source: str, stdin: str = "", timeout_s: float = 5.0, memory_mb: int = 512) -> RunResult:
    """Run `source` as a Python program with `stdin`; never raises on anything the program does.
    `timeout_s` is CPU time; the wall clock stops the program at twice that whatever it is doing."""
    return RunResult.from_dict(default_sandbox().run(job("run", timeout_s, memory_mb, source=source, stdin=stdin)))
