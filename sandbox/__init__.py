"""Run untrusted, model-written Python programs and unit tests, isolated, at high throughput.

    from sandbox import run_python
    result = run_python(source, stdin="", timeout_s=5.0, memory_mb=512)
    result.status          # "ok" | "error" | "timeout" | "memory" | "killed"
    result.exit_code, result.stdout, result.stderr, result.duration_s

Threat model
------------
The program is hostile: an RL policy rewarded for passing tests will find any hole that pays. We assume
it may run arbitrary Python, including `ctypes` and raw system calls, and may try to (1) hurt or read the
host: exhaust CPU, memory, processes, threads, disk or output; read files, the environment or the
network; kill, freeze or outlive its parent; (2) fake a pass: exit with status 0 before the tests run,
print what a harness looks for, redefine `check`, return objects whose `__eq__` always says yes, raise
StopIteration into a test's `all(map(...))`; (3) read the answers: find the tests or the expected values
anywhere in its own memory (objects, frames, freed heap) and answer from a lookup table; (4) tamper with
the trusted side: use a handle on a test's object to reach the worker's builtins, or send messages that
make it misbehave for this or a later job.

Against (1), each program runs in its own process, cloned from a warm worker that was started once under
bubblewrap (Debian package `bubblewrap`) with new user, pid, network, mount, ipc and uts namespaces and a
cleared environment. Each program gets user, pid, ipc and mount namespaces of its own, a session and
process group of its own, and is chrooted into a jail that shows only read-only /usr, /lib*, the Python
installation and a minimal /dev, plus two tmpfs mounts of its own, capped in bytes and in files: its
working directory /sandbox and /tmp. There is no /proc or /sys (where the host runs as root, as CI does,
uid 0 would otherwise get the owner's rights on the kernel's global settings in /proc/sys). The program is
pid 1 of its namespace, holds no capabilities, and under seccomp may start threads but no processes,
signal nobody but its own pid (not its group, not 0 or -1), trace nobody, and make none of the calls
Docker's default profile refuses (keyrings, io_uring, bpf, perf events, userfaultfd, namespaces, mounts,
modules, clocks), nor any that would hold memory outside its address-space limit or charge the host user
(SysV IPC, memfd and memfd_secret, POSIX message queues, inotify), nor take file locks or leases or
read or steer the page cache (mincore, fadvise, readahead, cachestat, preadv2's RWF_NOWAIT, madvise's
MADV_PAGEOUT and MADV_COLD: channels and stores between programs, which share the read-only system files),
nor set up AIO (a host-wide counter), nor create sockets or pipes at all (TCP's TIME_WAIT outlives a
program in the worker's network namespace; a unix socket held only in flight outlives its program until
the kernel's garbage collector runs; socket cookies and the inode numbers of new sockets and pipes come
from host-wide counters a program can advance and another read: the worker hands the program every pipe
it needs), nor resize pipes (pipe pages are counted per user), nor open pidfds (their inode numbers count
the host's threads; `clone` takes only the flags a thread library uses, so no thread comes with one), nor call sysinfo (host-wide counts), nor map shared or huge-page memory (inode numbers
again), nor use a shared futex except to wait (a futex on a page of a system file is keyed by the file),
nor sync (host-wide writeback), nor make itself dumpable. Its kernel uid may be the host's root (bubblewrap maps the worker to the caller's
uid), so the only host files it could own and change, the four device nodes it is given, are mounted read-
only; pid_max of its namespace is the kernel's minimum as a second cap. It has limits on CPU time, address
space, stack, file size, open files, queued signals and core dumps. Its time limit counts CPU time, so
that a busy machine does not turn a correct program into a timeout, and a wall clock at twice the limit
ends one that sleeps; either kills it, and with it everything in its pid namespace. Stdout and stderr are
capped. It has no network at all: no socket. Network and
uts namespaces are per worker, used by its programs one after another: a program holds no capability there
and nothing of it survives its death there, because the worker waits for that death (the kernel's teardown
included) before it takes the next job; one namespace per program would cost about a third of the
throughput.

Against (2) and (4), test code never runs in the program's interpreter. The worker, a separate trusted
process, executes the tests and calls the program's functions through a pipe; what comes back is decoded
as plain data (numbers, strings, containers), never unpickled, within size caps, so no object of the
program's making ever reaches a comparison. The program receives plain data too; a callable or iterator a
test passes to it becomes a proxy it may call or advance and nothing else, and any other request, or a
malformed message, is a protocol violation that fails the job. What the program passes to such a function,
and what it gives back, must be plain data as well, and only functions the tests define (and iterators)
are proxied, never a builtin, a class or a bound method: otherwise a call could build objects in the
worker whose methods the program chose. Built-in and standard-library names in the tests (`abs`, `len`,
`math`) are the worker's own, except one that every test calls and that must be the function under test
(MBPP task 126 is called `sum`): only where every test is one comparison whose expected side names nothing of
the program's, never one called on an expected side (`set` in `assert set(copy(x)) == set(y)`), never more
than one; a HumanEval `check` receives the program's function as its argument, and a builtin of the same
name inside `check` stays the builtin. HumanEval helpers (`poly`) come from the task's prompt, not from the
program: a HumanEval `check` takes nothing but the entry point from it. A test passes only when the worker
itself ran it to its end, without catching the program's exit, violation or timeout on the way (a check's
bare `except:` can catch them, so the worker records each one and fails the test that swallowed it); the program's exit status and output count for nothing in a unit-test job (see
`_rpc.py`). While tests run, the worker may grow by what the program itself may use (its address-space
limit), no more, and its CPU time is capped at the job's wall clock, so work no signal can interrupt (one
long C call) ends the worker, not the host's patience. A worker that saw anything unexpected (a protocol
violation, a MemoryError of its own, a wall clock that ran out while it was busy, an error of the sandbox)
answers that job as failed and exits; the pool starts a fresh one. Integrity over throughput.

Against (3), the program is cloned not from the worker but from a template process that the worker
forked at start, before it read any job, and that only ever receives limits and file descriptors; the
program then reads its own source from a memfd. Tests, expected values and earlier jobs therefore never
exist in the program's address space, not even as freed memory: deleting variables could not have
given that guarantee. What the program can learn of the tests is only what they pass to its functions.

Not defended: kernel exploits (namespaces are not a VM), timing side channels (a strong one: a page of a
shared file that an earlier program read faults in about 2 us, an uncached one in 60-85 us, so bits can be
stored in the page cache of the jail's files for a later program to time; closing it needs a jail whose
files are all in memory), CPU contention with other
jobs, memory the kernel charges to no limit we set (a cgroup per worker would bound it; we do not create
one),
and a program that finds the answers some other way than computing them (for example by reading tests
it was shown in its prompt). Tests that observe mutation of their arguments see copies, because values
cross the pipe by value. The reference's `setup` code runs in the program's process, after the program, so
it must hold nothing secret, and nothing it defines or imports can be trusted: a program can replace what
a setup helper calls (`math.isclose`, `builtins.abs`), so a comparison helper belongs in the tests, which
run in the worker (MBPP's setup code only builds the inputs).

Without namespaces (no bubblewrap, or a kernel that forbids unprivileged user namespaces) nothing is
isolated from the host, so the sandbox refuses to run programs (`SandboxUnavailable`, saying what to
install) unless the user accepts the risk: `reasoner --unsafe-no-isolation ...`, the environment variable
REASONER_UNSAFE_NO_ISOLATION=1, or `Sandbox(unsafe_no_isolation=True)`. Then programs run with the
resource limits, seccomp, a session of their own and a subreaper that reaps escaped daemons, as user
nobody where the host is root and the Python installation is readable by others (else as root without
capabilities, which still owns root's files), with no filesystem, network or process isolation; every
result says so in its `isolation` and `warning` fields, and a `RuntimeWarning` is raised once.

Layout: `pool.py` (host side: starts and feeds the workers), `_zygote.py` (the worker and the template:
confinement, output capture, time limits), `_rpc.py` (unit-test jobs: the pipe between tests and program).
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
