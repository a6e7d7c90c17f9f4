"""The warm zygote: a clean interpreter, started once per worker inside the sandbox, that forks one runner
per job. Standard library only; it never imports the host's packages (torch stays out of the workers).

Process tree for one job (inside bubblewrap's user, pid, network, mount, ipc and uts namespaces):

    zygote ──fork──> runner R ──unshare(user, mount, pid, ipc), fork──> program P (pid 1 of its namespace)

R is trusted: it enforces the wall clock, drains and caps P's output, and for unit-test jobs it runs the test
code itself, calling into P through a pipe (see `_rpc.py`), so P's code never shares an interpreter with
the tests. P gets a fresh tmpfs as its working directory and /tmp, resource limits, no capabilities, no
environment, and dies with its whole process tree when R kills it (killing pid 1 of a pid namespace kills
every process in it).

Messages on the control pipe are a 4-byte big-endian length followed by JSON.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import select
import signal
import struct
import sys
import time

# Imported here so that forked programs find them warm.
import bisect, collections, copy, functools, heapq, itertools, math, random, re, string, typing  # noqa: E401,F401
import fractions, decimal, statistics, operator, datetime, hashlib, array, cmath  # noqa: E401,F401

if __package__:  # imported on the host, for the message helpers
    from sandbox import _rpc
else:  # run as a script inside the sandbox, with -I (so its own directory is not on sys.path)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _rpc

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x4000, 0x40000
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 4, 24, 38
PR_SET_CHILD_SUBREAPER = 36

MEMORY_EXIT = 120  # P exits with this after a MemoryError so that R can tell "memory" from "error"
WORKDIR = "/sandbox"  # a tmpfs per program when namespaced
_libc = ctypes.CDLL(None, use_errno=True)


def read_msg(fd: int):
    head = _read_exact(fd, 4)
    if head is None:
        return None
    body = _read_exact(fd, struct.unpack(">I", head)[0])
    return None if body is None else json.loads(body)


def write_msg(fd: int, obj) -> None:
    body = json.dumps(obj).encode()
    data = struct.pack(">I", len(body)) + body
    while data:
        data = data[os.write(fd, data):]


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


# ---------------------------------------------------------------------------------------------------------
# Isolation of one program


def enter_namespaces() -> None:
    """In R: new user, mount, pid and ipc namespaces for the children R forks next (the program)."""
    uid, gid = os.geteuid(), os.getegid()
    _check(_libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC), "unshare")
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"0 {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"0 {gid} 1")


def _mount_tmpfs(path: str, size_mb: int) -> None:
    opts = f"size={size_mb}m,nr_inodes=4096,mode=0777".encode()
    _check(_libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, opts), f"mount {path}")


def _drop_capabilities() -> None:
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable for both 32-bit halves: all zero
    _check(_libc.capset(header, data), "capset")


# seccomp: the program may start threads but no processes. Each process has its own address-space limit,
# so a process count is what keeps total memory bounded, and RLIMIT_NPROC does not bind a process that is
# root on the host (as CI is). Foreign ABIs (i386, x32), whose syscall numbers differ, are refused.
_SECCOMP_TABLES = {
    "x86_64": (0xC000003E, {57: 1, 58: 1, 435: 38}, 56),  # arch, {fork, vfork: EPERM, clone3: ENOSYS}, clone
    "aarch64": (0xC00000B7, {435: 38}, 220),
}
CLONE_THREAD = 0x00010000


def _seccomp_program() -> bytes | None:
    table = _SECCOMP_TABLES.get(os.uname().machine)
    if table is None:
        return None
    arch, refused, clone = table
    LD, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|{JEQ,JGE,JSET}|K, BPF_RET|K
    ALLOW, KILL, ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
    ins = [(LD, 0, 0, 4), (JEQ, 1, 0, arch), (RET, 0, 0, KILL), (LD, 0, 0, 0),
           (JGE, 0, 1, 0x40000000), (RET, 0, 0, KILL)]
    for nr, err in refused.items():
        ins += [(JEQ, 0, 1, nr), (RET, 0, 0, ERRNO | err)]
    ins += [(JEQ, 1, 0, clone), (RET, 0, 0, ALLOW),
            (LD, 0, 0, 16), (JSET, 1, 0, CLONE_THREAD), (RET, 0, 0, ERRNO | 1), (RET, 0, 0, ALLOW)]
    return b"".join(struct.pack("<HBBI", *i) for i in ins)


def _forbid_new_processes() -> None:
    code = _seccomp_program()
    if code is None:
        return
    buf = ctypes.create_string_buffer(code)
    prog = struct.pack("<HxxxxxxQ", len(code) // 8, ctypes.addressof(buf))
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    _check(_libc.prctl(22, 2, ctypes.c_char_p(prog), 0, 0), "seccomp")  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER


def confine_program(cfg: dict, namespaced: bool, workdir: str) -> None:
    """In P, before any untrusted code runs: filesystem, limits, capabilities, environment, signals."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if namespaced:
        _check(_libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
        _mount_tmpfs(WORKDIR, cfg["disk_mb"])
        _mount_tmpfs("/tmp", cfg["disk_mb"])
        try:  # kernels since 6.14 keep pid_max per pid namespace: a second cap on processes after seccomp
            with open("/proc/sys/kernel/pid_max", "w") as f:
                f.write("301")  # the smallest value the kernel accepts
        except OSError:
            pass
        _mount_tmpfs("/proc", 1)  # hides the runner and zygote; /proc of a nested pid namespace is refused
        workdir = WORKDIR
    os.chdir(workdir)
    mem = cfg["memory_mb"] * 2**20
    cpu = int(cfg["timeout_s"]) + 1
    limits = {
        resource.RLIMIT_AS: (mem, mem),
        resource.RLIMIT_CPU: (cpu, cpu + 1),
        resource.RLIMIT_FSIZE: (cfg["file_mb"] * 2**20,) * 2,
        resource.RLIMIT_NOFILE: (64, 64),
        resource.RLIMIT_CORE: (0, 0),
        resource.RLIMIT_NPROC: (cfg["nproc"],) * 2,
        resource.RLIMIT_STACK: (8 * 2**20, 8 * 2**20),  # also each thread's stack: keeps thread bombs small
    }
    for which, value in limits.items():
        try:
            resource.setrlimit(which, value)
        except (ValueError, OSError):
            pass  # a limit above the inherited hard limit stays at the hard limit
    if namespaced:
        _drop_capabilities()
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if cfg.get("forbid_processes", True):
        _forbid_new_processes()
    os.environ.clear()
    os.environ.update({"PATH": "/usr/bin:/bin", "HOME": workdir, "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"})
    for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM, signal.SIGINT, signal.SIGALRM):
        signal.signal(sig, signal.SIG_DFL)


def _close_fds_except(keep: set[int]) -> None:
    low = 3
    for fd in sorted(keep) + [65536]:
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1


# ---------------------------------------------------------------------------------------------------------
# Runner: one program with a wall clock, capped output, and optionally an RPC channel for test code


class Program:
    """A forked, confined child running `body(channel_fds)`; its stdout and stderr are drained by R."""

    def __init__(self, cfg: dict, body, stdin: bytes, rpc: bool):
        self.cfg, self.namespaced = cfg, cfg["namespaced"]
        self.limit = cfg["output_limit"]
        self.out, self.err = bytearray(), bytearray()
        self.overflow = False
        self.start = time.monotonic()
        self.deadline = self.start + cfg["timeout_s"]
        stdin_fd = os.memfd_create("stdin")
        os.write(stdin_fd, stdin)
        os.lseek(stdin_fd, 0, os.SEEK_SET)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        chan = (os.pipe(), os.pipe()) if rpc else None  # (R -> P), (P -> R)
        workdir = None
        if not self.namespaced:
            import tempfile

            workdir = tempfile.mkdtemp(prefix="sandbox-")
            os.chmod(workdir, 0o700)
        self.workdir = workdir
        self.pid = os.fork()
        if self.pid == 0:
            try:
                if not self.namespaced:
                    os.setsid()
                os.dup2(stdin_fd, 0)
                os.dup2(out_w, 1)
                os.dup2(err_w, 2)
                keep = {chan[0][0], chan[1][1]} if chan else set()
                _close_fds_except(keep)
                confine_program(cfg, self.namespaced, workdir)
                body(chan[0][0] if chan else None, chan[1][1] if chan else None)
            except BaseException:  # noqa: BLE001  (the child must never return into the runner's code)
                pass
            os._exit(1)
        for fd in (stdin_fd, out_w, err_w):
            os.close(fd)
        self.fds = {out_r: self.out, err_r: self.err}
        if chan:
            os.close(chan[0][0])
            os.close(chan[1][1])
            self.to_prog, self.from_prog = chan[0][1], chan[1][0]
        self.status: int | None = None
        self.killed_for: str | None = None

    def pump(self, until_fd: int | None = None) -> bool:
        """Drain output until P exits, the deadline passes or `until_fd` is readable (then True)."""
        while True:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                self.kill("timeout")
                return False
            watch = list(self.fds) + ([until_fd] if until_fd is not None else [])
            if not watch:
                return self._wait_exit(remaining)
            ready, _, _ = select.select(watch, [], [], remaining)
            for fd in ready:
                if fd == until_fd:
                    return True
                chunk = os.read(fd, 65536)
                if not chunk:
                    os.close(fd)
                    del self.fds[fd]
                    continue
                buf = self.fds[fd]
                buf += chunk[: max(0, self.limit - len(buf))]
                if len(buf) >= self.limit and len(chunk) > 0 and len(buf) + len(chunk) > self.limit:
                    self.overflow = True
                    self.kill("output limit")
                    return False

    def _wait_exit(self, remaining: float) -> bool:
        while True:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = status
                return False
            if time.monotonic() > self.deadline:
                self.kill("timeout")
                return False
            time.sleep(0.001)

    def kill(self, why: str) -> None:
        if self.status is not None:
            return
        self.killed_for = self.killed_for or why
        try:
            if self.namespaced:
                os.kill(self.pid, signal.SIGKILL)  # pid 1 of its namespace: the kernel kills the rest
            else:
                os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def finish(self) -> dict:
        """Wait for P, reap every orphan it left, and describe how it ended."""
        if self.status is None:
            if not self.fds:
                self._wait_exit(self.deadline - time.monotonic())
            else:
                self.pump()
                if self.status is None:
                    self.kill(self.killed_for or "finished")
        if self.status is None:
            self.status = os.waitpid(self.pid, 0)[1]
        _reap_orphans()
        for fd in self.fds:
            os.close(fd)
        self.fds = {}
        if self.workdir:
            import shutil

            shutil.rmtree(self.workdir, ignore_errors=True)
        return self.describe()

    def describe(self) -> dict:
        code = os.waitstatus_to_exitcode(self.status)
        if self.killed_for == "timeout":
            status = "timeout"
        elif self.killed_for == "finished":  # a unit-test job whose tests are over: R ends the program
            status = "ok"
        elif self.killed_for == "output limit":
            status = "killed"
        elif code == MEMORY_EXIT:
            status = "memory"
        elif code == -signal.SIGXCPU or code == -signal.SIGKILL and self.killed_for is None:
            status = "timeout" if code == -signal.SIGXCPU else "killed"
        elif code == 0:
            status = "ok"
        elif code < 0:
            status = "killed"
        else:
            status = "error"
        reason = {"timeout": "timeout", "memory": "memory limit", "ok": "exited 0"}.get(status)
        if self.killed_for == "finished":
            reason = "finished"
        if status == "killed":
            reason = "output limit" if self.killed_for == "output limit" else _signal_name(code)
        elif status == "error":
            reason = f"exited {code}"
        return {
            "status": status,
            "exit_code": code,
            "stdout": self.out.decode("utf-8", "replace"),
            "stderr": self.err.decode("utf-8", "replace"),
            "duration_s": round(time.monotonic() - self.start, 6),
            "reason": reason,
        }


def _signal_name(code: int) -> str:
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


def _reap_orphans() -> None:
    """Without namespaces, processes that left P's group reparent to R (a subreaper): kill and reap them."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            try:
                with open("/proc/self/task/%d/children" % os.getpid()) as f:
                    kids = [int(p) for p in f.read().split()]
            except OSError:
                kids = []
            for kid in kids:
                try:
                    os.kill(kid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if not kids:
                return
            time.sleep(0.001)


def run_main(source: str, name: str = "__main__") -> None:
    """In P: run `source` as the program's __main__ and exit the way `python file.py` would."""
    import atexit
    import traceback
    import types

    module = types.ModuleType(name)
    module.__dict__["__builtins__"] = __builtins__
    sys.modules[name] = module
    sys.argv = ["main.py"]
    code = 0
    try:
        exec(compile(source, "main.py", "exec"), module.__dict__)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except MemoryError:
        code = MEMORY_EXIT
    except BaseException as exc:  # noqa: BLE001  (a program's uncaught exception is its error exit)
        try:
            traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next)  # from the program's frame on
        except MemoryError:
            code = MEMORY_EXIT
        code = code or 1
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001
        pass
    os._exit(code)


def run_job(cfg: dict) -> dict:
    """In R: one job. "run": a program with stdin. "tests": a program plus trusted test code run by R."""
    if cfg["namespaced"]:
        enter_namespaces()
    else:
        _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # the program may not read or write R's memory
    if cfg["kind"] == "run":
        source = cfg["source"]
        prog = Program(cfg, lambda _in, _out: run_main(source), cfg.get("stdin", "").encode(), rpc=False)
        return prog.finish()
    return _rpc.run_tests(cfg, Program)


def serve(cfg: dict) -> dict:
    """In the zygote: fork R for one job and bring back its result, killing R if it overstays."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            result = run_job(cfg)
        except BaseException as exc:  # noqa: BLE001  (reported as a sandbox failure, never as a pass)
            result = {"status": "killed", "reason": f"sandbox error: {type(exc).__name__}: {exc}"}
        try:
            write_msg(w, result)
        finally:
            os._exit(0)
    os.close(w)
    deadline = time.monotonic() + cfg["timeout_s"] + 5.0
    result = None
    try:
        chan = _rpc.Channel(r, -1, wait=lambda fd: _wait_readable(fd, deadline))
        result = chan.recv()
    except (_rpc.ProgramGone, TimeoutError):
        os.kill(pid, signal.SIGKILL)
    os.close(r)
    _reap_runners(pid if result is None else None)
    if result is None:
        result = {"status": "killed", "reason": "sandbox runner died", "stdout": "", "stderr": "", "exit_code": None}
    return result


def _wait_readable(fd: int, deadline: float) -> None:
    if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
        raise TimeoutError


def _reap_runners(wait_for: int | None) -> None:
    """Reap finished runners without waiting for them (a runner's exit tears down its namespaces, which
    takes a few milliseconds the next job need not wait for); wait only for one that was killed."""
    if wait_for is not None:
        os.waitpid(wait_for, 0)
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


def probe_namespaces() -> str | None:
    """None if a runner can create its namespaces and mounts here, else why not."""
    pid = os.fork()
    if pid == 0:
        try:
            enter_namespaces()
            child = os.fork()
            if child == 0:
                try:
                    _mount_tmpfs(WORKDIR, 1)
                    _drop_capabilities()
                    os._exit(0)
                except BaseException:  # noqa: BLE001
                    os._exit(3)
            os._exit(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]))
        except BaseException:  # noqa: BLE001
            os._exit(2)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return None if code == 0 else {2: "cannot create namespaces", 3: "cannot mount in namespaces"}.get(code, "?")


def main() -> None:
    ctl_in, ctl_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    namespaced = os.environ.get("SANDBOX_ISOLATION") == "bwrap"
    problem = probe_namespaces() if namespaced else "not started under bubblewrap"
    write_msg(ctl_out, {"ready": True, "namespaced": problem is None, "problem": problem})
    while (cfg := read_msg(ctl_in)) is not None:
        cfg["namespaced"] = problem is None
        write_msg(ctl_out, serve(cfg))


if __name__ == "__main__":
    main()
