"""The warm zygote: a clean interpreter, started once per worker inside the sandbox, that runs one
confined process per program. Standard library only; it never imports the host's packages (torch stays
out of the workers).

Process tree (inside bubblewrap's user, pid, network, mount, ipc and uts namespaces):

    worker W (trusted: reads jobs, runs tests) ──fork, before any job──> template T
    T ──clone(CLONE_PARENT, new user, pid, ipc and mount namespaces)──> program P (a child of W)

P is cloned from T, never from W. T was forked before W read its first job and never receives anything
of one but the limits and the file descriptors P needs, so no test, expected value or earlier job exists
anywhere in P's address space, freed heap included; P reads its own source from a memfd once it is
confined. W enforces the wall clock, drains and caps P's output, and for unit-test jobs runs the test
code itself, calling into P through a pipe (see `_rpc.py`), so P's code never shares an interpreter with
the tests. P is in a session of its own, chrooted into a jail without /proc, works in /sandbox and /tmp
(tmpfs mounts of its own, capped in bytes and files, gone when it dies), has resource limits, no
capabilities, no environment, may not create processes or signal anyone but itself (seccomp), and dies
with every thread it started when W kills it.

Messages on the control pipe are a 4-byte big-endian length followed by JSON.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import time

# Imported here so that programs (and the zygote's own per-job code) find them warm.
import bisect, collections, copy, functools, heapq, itertools, math, random, re, string, typing  # noqa: E401,F401
import fractions, decimal, statistics, operator, datetime, array, cmath  # noqa: E401,F401
import ast, atexit, importlib, traceback, types  # noqa: E401,F401

if __package__:  # imported on the host, for the message helpers
    from sandbox import _rpc
else:  # run as a script inside the sandbox, with -I (so its own directory is not on sys.path)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _rpc

CLONE_PARENT, CLONE_NEWNS, CLONE_NEWIPC = 0x00008000, 0x00020000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID = 0x10000000, 0x20000000
MS_NOSUID, MS_NODEV = 0x2, 0x4
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_SECUREBITS, PR_SET_NO_NEW_PRIVS = 1, 4, 28, 38
SECURE_NOROOT_LOCKED = 0x2F  # NOROOT, NO_SETUID_FIXUP, KEEP_CAPS, each with its lock
PR_SET_CHILD_SUBREAPER = 36

NOBODY = 65534
MEMORY_EXIT = 120  # P exits with this after a MemoryError: status "memory", not "error"
CONFINEMENT_EXIT = 121  # the sandbox could not confine P, so its program never ran
WALL_FACTOR = 2.0  # the wall clock may reach this many times a job's (CPU) time limit
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
JAIL = "/jail"  # what a program sees after chroot: /usr, /lib*, Python, /dev, and two tmpfs mounts
WORKDIR = "/sandbox"  # in the jail: a tmpfs of the program's own
_libc = ctypes.CDLL(None, use_errno=True)
_pylibc = ctypes.PyDLL(None, use_errno=True)  # keeps the GIL across clone(), like os.fork()
_SYS_CLONE = {"x86_64": 56, "aarch64": 220}.get(os.uname().machine)


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


NAMESPACES = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWNS


def _clone(flags: int) -> int:
    """clone() with CPython's fork hooks: 0 in the child, the child's pid in the caller."""
    if _SYS_CLONE is None:
        raise OSError(0, f"clone: unsupported machine {os.uname().machine}")
    ctypes.pythonapi.PyOS_BeforeFork()
    pid = _pylibc.syscall(_SYS_CLONE, flags | signal.SIGCHLD, 0, 0, 0, 0)
    if pid == 0:
        ctypes.pythonapi.PyOS_AfterFork_Child()
    else:
        ctypes.pythonapi.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(ctypes.get_errno(), "clone failed")
    return pid


def _map_self(uid: int, gid: int) -> None:
    """In P: be root of the new user namespace, mapped to the zygote's ids (so files it writes are ours)."""
    _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # /proc/self is owned by us again (the zygote is not dumpable)
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")  # all of /dev a program gets
MS_RDONLY, MS_REMOUNT, MS_BIND = 0x1, 0x20, 0x1000
_KEPT_MOUNT_FLAGS = 0x2 | 0x4 | 0x8 | 0x400 | 0x800 | 0x1000  # nosuid, nodev, noexec, noatime, nodiratime, relatime


def _devices_read_only() -> None:
    """In P's mount namespace: a program's kernel uid may be the host's root, which owns the host's device
    nodes, so on a writable mount it could chmod, chown or touch them (a host without /dev/null, or a store
    that outlives the program). Read-only, a device is still read and written. The mount's other flags are
    kept (those bubblewrap set are locked here); bubblewrap's own --remount-ro would add nodev."""
    for device in DEVICES:
        path = (JAIL + device).encode()
        flags = os.statvfs(path).f_flag & _KEPT_MOUNT_FLAGS
        _check(_libc.mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags, None), "remount " + device)


def _private_directories(size_mb: int, inodes: int) -> None:
    """In P, in its own mount namespace: fresh tmpfs mounts for its working directory and /tmp, capped in
    bytes and in files, gone with the namespace when P dies."""
    options = f"size={size_mb}m,nr_inodes={inodes},mode=0755".encode()
    for path in (JAIL + WORKDIR, JAIL + "/tmp"):
        _check(_libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options), "mount " + path)


def _drop_capabilities() -> None:
    # Locked securebits: uid 0 gains no capabilities from execve, and that cannot be undone.
    _check(_libc.prctl(PR_SET_SECUREBITS, SECURE_NOROOT_LOCKED, 0, 0, 0), "securebits")
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable for both 32-bit halves: all zero
    _check(_libc.capset(header, data), "capset")


# seccomp: the program may start threads but no processes (each process has its own address-space limit,
# so a process count is what keeps total memory bounded, and RLIMIT_NPROC does not bind a process that is
# root on the host, as CI is); it may signal only its own pid (not its group, not 0 or -1) and may not
# trace anything. Beyond that, the calls Docker's default profile refuses are refused (keyrings, charged to
# the host user's quota; io_uring, bpf, perf events, userfaultfd, namespaces and mounts, modules, kexec,
# clocks, NUMA policy, handles to files by id, reading or writing other processes), and so is what would
# hold memory outside the address-space limit or be charged to the host user (SysV IPC, memfd, POSIX
# message queues, inotify, AIO contexts), file locks and leases, the page cache's state (mincore, fadvise,
# readahead, cachestat): channels or stores between programs, which share the read-only system files;
# sockets and pipes (TCP's TIME_WAIT in the worker's network namespace outlives a program and would carry
# bits to the next; a unix socket held only in flight outlives its program until the kernel's garbage
# collector runs; socket cookies and the inode numbers of new sockets and pipes come from host-wide
# counters that a program can advance and the next one, in any worker, read: the worker hands the program
# every pipe it needs), resizing pipes (pipe pages are counted per user), reading or steering the page cache
# of the shared read-only files (preadv2's RWF_NOWAIT tells whether a page is cached; madvise's
# MADV_PAGEOUT and MADV_COLD evict one, which the program's kernel uid may do to files it owns; getrusage's
# count of major faults and block reads tells whether the pages it touched were cached), pidfds
# (their inode numbers count every thread the host starts), sysinfo (host-wide counts of threads and shared
# memory) and memfd_secret, and making itself dumpable again. Foreign ABIs (i386, x32), whose syscall
# numbers differ, are refused outright.
_REFUSED_BOTH = {424: 1, 425: 1, 426: 1, 427: 1, 428: 1, 429: 1, 430: 1, 431: 1, 432: 1, 433: 1, 434: 1, 435: 38,
                 438: 1, 440: 1, 442: 1, 447: 1, 449: 1, 454: 1, 455: 1, 456: 1, 457: 1, 458: 1, 467: 1}  # pidfd_*,
# io_uring_*, new mount API, clone3, memfd_secret, futex_waitv and the futex2 calls, statmount, listmount,
# open_tree_attr (mount ids count host-wide), ...
# mmap's flags: MAP_SHARED (and MAP_SHARED_VALIDATE) mappings take inode numbers from a host-wide counter
# (the one the worker's memfds come from), and so does MAP_HUGETLB (even when it fails): refused.
MMAP_REFUSED_FLAGS = 0x01 | 0x40000
# futex: a shared (non-private) futex on a page of a read-only system file is keyed by the file, so every
# program on the host shares it; only private operations, and the shared waits glibc's pthread_join makes,
# are allowed (FUTEX_WAIT, FUTEX_WAIT_BITSET, each with or without FUTEX_CLOCK_REALTIME).
FUTEX_PRIVATE, FUTEX_SHARED_WAITS = 128, (0, 9, 256, 265)
MADV_PAGE_CACHE = (20, 21, 22, 23)  # MADV_COLD, MADV_PAGEOUT, MADV_POPULATE_READ, MADV_POPULATE_WRITE
# fcntl F_GETLK, F_SETLK, F_SETLKW, their OFD forms, and F_SETLEASE, F_GETLEASE, F_NOTIFY: a program's
# kernel uid owns the shared read-only system files, so it could lease them (and block a host writer);
# and F_SETPIPE_SZ.
FCNTL_REFUSED = (5, 6, 7, 36, 37, 38, 1024, 1025, 1026, 1031)
# Per machine: arch, {syscall: errno when refused}, clone, syscalls whose first argument must be our pid,
# {syscall: (argument index, values, allowed?, errno)} for calls judged by one argument, mmap and futex.
_SECCOMP_TABLES = {
    "x86_64": (0xC000003E, {**_REFUSED_BOTH, **dict.fromkeys(
        (57, 58, 101, 103, 135, 153, 155, 159, 161, 163, 164, 165, 166, 167, 168, 169, 172, 173, 175, 176, 179,
         200, 212, 227, 237, 238, 246, 248, 249, 250, 256, 272, 279, 298, 300, 303, 304, 305, 308, 310, 311,
         312, 313, 320, 321, 323,
         29, 30, 31, 64, 65, 66, 67, 68, 69, 70, 71, 220,  # SysV shm, semaphores, message queues
         319, 240, 253, 294, 73,  # memfd_create, mq_open, inotify_init, inotify_init1, flock
         27, 221, 187, 451, 206,  # mincore, fadvise64, readahead, cachestat, io_setup
         41, 53, 22, 293, 327, 328, 99, 98,  # socket, socketpair, pipe, pipe2, preadv2, pwritev2, sysinfo, getrusage
         162, 306, 277), 1)},  # sync, syncfs, sync_file_range: host-wide writeback
        56, (62, 234, 129, 297),  # kill, tgkill, rt_sigqueueinfo, rt_tgsigqueueinfo
        {72: (1, FCNTL_REFUSED, False, 1), 28: (2, MADV_PAGE_CACHE, False, 1),
         157: (0, (PR_SET_DUMPABLE,), False, 1)},  # fcntl, madvise, prctl
        9, 202),  # mmap, futex
    "aarch64": (0xC00000B7, {**_REFUSED_BOTH, **dict.fromkeys(
        (18, 39, 40, 41, 51, 58, 60, 89, 92, 97, 104, 105, 106, 112, 116, 117, 130, 142, 170, 171, 217, 218,
         219, 224, 225, 235, 237, 238, 239, 241, 262, 264, 265, 266, 268, 270, 271, 272, 273, 280, 282, 294,
         186, 187, 188, 189, 190, 191, 192, 193, 194, 195, 196, 197,  # SysV message queues, semaphores, shm
         279, 180, 26, 32,  # memfd_create, mq_open, inotify_init1, flock
         232, 223, 213, 451, 0,  # mincore, fadvise64, readahead, cachestat, io_setup
         198, 199, 59, 286, 287, 179, 165,  # socket, socketpair, pipe2, preadv2, pwritev2, sysinfo, getrusage
         81, 267, 84), 1)},  # sync, syncfs, sync_file_range
        220, (129, 131, 138, 240),
        {25: (1, FCNTL_REFUSED, False, 1), 233: (2, MADV_PAGE_CACHE, False, 1),
         167: (0, (PR_SET_DUMPABLE,), False, 1)},
        222, 98),  # mmap, futex
}
CLONE_THREAD = 0x00010000
# The flags a thread library's clone uses (glibc, musl): the exit signal's byte, VM, FS, FILES, SIGHAND,
# THREAD, SYSVSEM, SETTLS, PARENT_SETTID, CHILD_CLEARTID, DETACHED, CHILD_SETTID. Any other flag is refused:
# CLONE_PIDFD (kernel 6.9 on, with CLONE_THREAD) would hand back a pidfd, whose inode number counts threads
# host-wide, a channel between programs that an attacker review used to pass HumanEval/52 unsolved.
CLONE_THREAD_FLAGS = 0xFF | 0x100 | 0x200 | 0x400 | 0x800 | 0x10000 | 0x40000 | 0x80000 | 0x100000 | 0x200000 \
    | 0x400000 | 0x1000000


def _seccomp_program(pid: int) -> bytes | None:
    table = _SECCOMP_TABLES.get(os.uname().machine)
    if table is None:
        return None
    arch, refused, clone, own_pid, by_argument, mmap, futex = table
    LD, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|{JEQ,JGE,JSET}|K, BPF_RET|K
    ALLOW, KILL = 0x7FFF0000, 0x80000000

    def errno(code: int) -> int:
        return 0x00050000 | code  # SECCOMP_RET_ERRNO

    def argument(index: int) -> int:
        return 16 + 8 * index  # low 32 bits of args[index] in struct seccomp_data (little-endian)

    def judged_by(nr: int, index: int, values, allowed: bool, code: int) -> list:
        """If the call is `nr`: return at once, ALLOW or the errno, by whether args[index] is one of `values`."""
        block = [(LD, 0, 0, argument(index))]
        for k, value in enumerate(values):
            block.append((JEQ, len(values) - k, 0, value))  # a match jumps to the last return
        on_match, otherwise = (ALLOW, errno(code)) if allowed else (errno(code), ALLOW)
        block += [(RET, 0, 0, otherwise), (RET, 0, 0, on_match)]
        return [(JEQ, 0, len(block), nr)] + block

    ins = [(LD, 0, 0, 4), (JEQ, 1, 0, arch), (RET, 0, 0, KILL), (LD, 0, 0, 0),
           (JGE, 0, 1, 0x40000000), (RET, 0, 0, KILL)]
    for nr, code in refused.items():
        ins += [(JEQ, 0, 1, nr), (RET, 0, 0, errno(code))]
    # Each block below ends in a return on every path: after loading an argument nothing falls through.
    ins += [(JEQ, 0, 5, clone), (LD, 0, 0, argument(0)), (JSET, 2, 0, 0xFFFFFFFF & ~CLONE_THREAD_FLAGS),
            (JSET, 0, 1, CLONE_THREAD), (RET, 0, 0, ALLOW), (RET, 0, 0, errno(1))]
    for nr in own_pid:  # the first argument is a pid (or 0 / negative for a group): ours only
        ins += judged_by(nr, 0, (pid,), True, 1)
    for nr, rule in by_argument.items():
        ins += judged_by(nr, *rule)
    ins += [(JEQ, 0, 4, mmap), (LD, 0, 0, argument(3)), (JSET, 0, 1, MMAP_REFUSED_FLAGS), (RET, 0, 0, errno(1)),
            (RET, 0, 0, ALLOW)]
    waits = [(JEQ, len(FUTEX_SHARED_WAITS) - k, 0, op) for k, op in enumerate(FUTEX_SHARED_WAITS)]
    block = [(LD, 0, 0, argument(1)), (JSET, len(waits) + 1, 0, FUTEX_PRIVATE)] + waits
    block += [(RET, 0, 0, errno(1)), (RET, 0, 0, ALLOW)]
    ins += [(JEQ, 0, len(block), futex)] + block
    ins.append((RET, 0, 0, ALLOW))
    return b"".join(struct.pack("<HBBI", *i) for i in ins)


_SECCOMP_AS_PID_1 = _seccomp_program(1)  # built once: a namespaced program is always pid 1


def _forbid_new_processes() -> None:
    pid = os.getpid()
    code = _SECCOMP_AS_PID_1 if pid == 1 else _seccomp_program(pid)
    if code is None:
        return
    filt = ctypes.create_string_buffer(code)
    fprog = ctypes.create_string_buffer(struct.pack("<HxxxxxxQ", len(code) // 8, ctypes.addressof(filt)))
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    _check(_libc.prctl(22, 2, fprog, 0, 0), "seccomp")  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER


def _enter_namespaces(uid: int, gid: int) -> None:
    """In P, just cloned into its namespaces (before its job arrives): its ids, a cap on processes, and the
    jail's devices read-only."""
    _map_self(uid, gid)
    _devices_read_only()
    try:  # kernels since 6.14 keep pid_max per pid namespace: a second cap on processes after seccomp
        with open("/proc/sys/kernel/pid_max", "w") as f:
            f.write("301")  # the smallest value the kernel accepts
    except OSError:
        pass


def confine_program(cfg: dict, namespaced: bool, workdir: str) -> None:
    """In P, once its job has arrived and before any untrusted code runs: filesystem, limits,
    capabilities, environment, signals."""
    if namespaced:
        # The jail has no /proc: a process whose uid is the host's root (CI runs as root) could otherwise
        # write global sysctls there, since the kernel gives uid 0 the owner's permission bits on them.
        _private_directories(cfg["disk_mb"], cfg["inodes"])
        os.chroot(JAIL)
        workdir = WORKDIR
    os.chdir(workdir)
    if not namespaced and os.geteuid() == 0:  # degraded mode on a root host: not root, if Python allows
        if _readable_by_others(os.path.dirname(os.__file__)):
            os.chown(workdir, NOBODY, NOBODY)
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
        else:  # the standard library is private to root (pyenv under /root): root, without capabilities
            _drop_capabilities()
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
        # Charged to the host user (the kernel's uid of P is the worker's): queued signals, message queues.
        resource.RLIMIT_SIGPENDING: (64, 64),
        resource.RLIMIT_MSGQUEUE: (0, 0),
    }
    for which, value in limits.items():
        try:
            resource.setrlimit(which, value)
        except (ValueError, OSError):
            pass  # a limit above the inherited hard limit stays at the hard limit
    if namespaced:
        _drop_capabilities()
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # no core dump handed to a host helper; seccomp keeps it so
    if cfg.get("forbid_processes", True):
        _forbid_new_processes()
    os.environ.clear()
    os.environ.update({"PATH": "/usr/bin:/bin", "HOME": workdir, "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"})
    for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM, signal.SIGINT, signal.SIGALRM):
        signal.signal(sig, signal.SIG_DFL)


def _readable_by_others(path: str) -> bool:
    """Whether a user with no relation to the owner can read `path` (and search every directory above)."""
    path = os.path.realpath(path)
    if os.stat(path).st_mode & 0o005 != 0o005:
        return False
    while path != "/":
        path = os.path.dirname(path)
        if not os.stat(path).st_mode & 0o001:
            return False
    return True


def _close_fds_except(keep: set[int]) -> None:
    low = 3
    for fd in sorted(keep) + [65536]:
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


# ---------------------------------------------------------------------------------------------------------
# Runner: one program with a wall clock, capped output, and optionally an RPC channel for test code


LIMIT_FIELDS = ("timeout_s", "memory_mb", "disk_mb", "inodes", "file_mb", "nproc", "forbid_processes")
# ... all of a job that P receives besides its own source; the template process sees nothing of a job


class Template:
    """The process programs are cloned from: forked from the worker before the worker read any job. It
    clones each P with CLONE_PARENT, so that P is the worker's child, and hands the worker P's pid and a
    socket on which P waits for its job (limits and file descriptors only: its source comes in a memfd).
    With namespaces, the next P is cloned while the worker runs the current job."""

    def __init__(self, ids: dict, namespaced: bool):
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.pid = os.fork()
        if self.pid == 0:
            try:
                self.sock.close()
                _close_fds_except({theirs.fileno()})
                _template_main(theirs, ids, namespaced)
            finally:
                os._exit(1)
        theirs.close()
        # Without namespaces the worker reaps its children between jobs (daemons a program left behind),
        # so a waiting P would be among them: there P is cloned when its job comes.
        self.ahead = namespaced
        self.asked = False

    def take(self) -> tuple[int, socket.socket]:
        """A fresh P, waiting for its job: (pid, the socket to send the job on)."""
        if not self.asked:
            self.sock.send(b"next")
        self.asked = False
        msg, fds, _, _ = socket.recv_fds(self.sock, 4096, 1)
        answer = json.loads(msg) if msg else {"error": "the template process is gone"}
        if "pid" not in answer or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise OSError(0, f"template: {answer.get('error')}")
        if self.ahead:
            self.sock.send(b"next")
            self.asked = True
        return answer["pid"], socket.socket(fileno=fds[0])


def _template_main(sock: socket.socket, ids: dict, namespaced: bool) -> None:
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    while sock.recv(16) == b"next":
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            pid = _clone(CLONE_PARENT | (NAMESPACES if namespaced else 0))
        except OSError as exc:
            ours.close()
            theirs.close()
            sock.send(json.dumps({"error": f"clone: {exc}"[:300]}).encode())
            continue
        if pid == 0:
            try:
                _program_main(theirs, ids, namespaced)
            finally:  # the child must never return into the template's loop
                os._exit(CONFINEMENT_EXIT)
        theirs.close()
        socket.send_fds(sock, [json.dumps({"pid": pid}).encode()], [ours.fileno()])
        ours.close()


def _program_main(job_sock: socket.socket, ids: dict, namespaced: bool) -> None:
    """In P, just cloned from the template: a session of its own, its namespaces set up, then it waits for
    its job (limits, and stdin, stdout, stderr, a memfd holding its source, and for a unit-test job the two
    ends of its pipe to the worker). Confined, it reads its source and runs."""
    try:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the worker is P's parent
        os.setsid()
        _close_fds_except({job_sock.fileno()})
        if namespaced:
            _enter_namespaces(ids["uid"], ids["gid"])
        msg, fds, _, _ = socket.recv_fds(job_sock, 1 << 16, 8)
        if not msg:
            os._exit(0)  # the worker went away before giving P a job
        limits = json.loads(msg)
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 16) for fd in fds]  # out of the way of 0-5
        for target, fd in enumerate(high):
            os.dup2(fd, target)
        _close_fds_except(set(range(3, len(high))))
        confine_program(limits, namespaced, limits.get("workdir"))
    except BaseException as exc:  # noqa: BLE001  (no program runs unconfined)
        os.write(2, f"sandbox: confinement failed: {type(exc).__name__}: {exc}\n".encode())
        os._exit(CONFINEMENT_EXIT)
    try:
        with os.fdopen(3, "rb") as f:
            payload = json.loads(f.read())
        if payload["kind"] == "run":
            run_main(payload["source"])
        else:
            _rpc.program_side(payload, 4, 5)
    except BaseException:  # noqa: BLE001
        pass
    os._exit(1)


class Program:
    """A confined child process running a job's program; the worker drains its stdout and stderr."""

    def __init__(self, cfg: dict, template: Template, stdin: bytes, rpc: bool):
        self.cfg, self.namespaced = cfg, cfg["namespaced"]
        self.limit = cfg["output_limit"]
        self.out, self.err = bytearray(), bytearray()
        self.start = time.monotonic()
        # The time limit is CPU time, so that a busy machine does not turn a correct program into a
        # timeout; the wall clock is checked against it and may stretch to twice the limit for a program
        # that was kept waiting (or sleeps), never further.
        self.timeout = cfg["timeout_s"]
        self.deadline = self.start + self.timeout
        self.hard_deadline = self.start + WALL_FACTOR * self.timeout
        payload = {"kind": cfg["kind"], "source": cfg["source"], "setup": cfg.get("setup") or ""}
        stdin_fd = _memfd("stdin", stdin)
        payload_fd = _memfd("program", json.dumps(payload).encode())
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        chan = (os.pipe(), os.pipe()) if rpc else None  # (worker -> P), (P -> worker)
        limits = {key: cfg[key] for key in LIMIT_FIELDS if key in cfg}
        self.workdir = None
        if not self.namespaced:
            import tempfile

            # Under bubblewrap without nested namespaces only the jail's directories are writable.
            parent = JAIL + WORKDIR if os.path.isdir(JAIL + WORKDIR) else None
            self.workdir = limits["workdir"] = tempfile.mkdtemp(prefix="sandbox-", dir=parent)
            os.chmod(self.workdir, 0o700)
        given = [stdin_fd, out_w, err_w, payload_fd] + ([chan[0][0], chan[1][1]] if chan else [])
        try:
            self.pid, job_sock = template.take()
            with job_sock:
                socket.send_fds(job_sock, [json.dumps(limits).encode()], given)
        finally:
            for fd in given:
                os.close(fd)
        try:
            self.pidfd: int | None = os.pidfd_open(self.pid)
        except (AttributeError, OSError):  # kernels before 5.3: poll for P's exit instead
            self.pidfd = None
        self.fds = {out_r: self.out, err_r: self.err}
        if chan:
            self.to_prog, self.from_prog = chan[0][1], chan[1][0]
        self.template_pid = template.pid
        self.status: int | None = None
        self.killed_for: str | None = None

    def pump(self, until_fd: int | None = None) -> bool:
        """Drain output until P has exited and closed its output, the deadline passes, the output limit
        is crossed, or `until_fd` is readable (then True)."""
        while self.fds or self.status is None:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                if not self._stretch():
                    self.kill("timeout")
                    return False
                continue
            waiting = self.status is None
            watch = list(self.fds) + ([self.pidfd] if waiting and self.pidfd is not None else [])
            if until_fd is not None:
                watch.append(until_fd)
            if waiting and self.pidfd is None:
                remaining = min(remaining, 0.01)
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                if pid:
                    self.status = status
                    continue
            ready, _, _ = select.select(watch, [], [], remaining)
            for fd in ready:
                if fd == until_fd:
                    return True
                if fd == self.pidfd:
                    self.status = os.waitpid(self.pid, 0)[1]
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    os.close(fd)
                    del self.fds[fd]
                    continue
                buf = self.fds[fd]
                if len(buf) + len(chunk) > self.limit:
                    buf += chunk[: self.limit - len(buf)]
                    self.kill("output limit")
                    return False
                buf += chunk
        return False

    def _drain(self) -> None:
        """Keep what P wrote before it was ended (up to the output limit), without waiting for more."""
        for fd, buf in self.fds.items():
            while len(buf) < self.limit and select.select([fd], [], [], 0)[0]:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                buf += chunk[: self.limit - len(buf)]

    def _stretch(self) -> bool:
        """At the deadline: move it later if P has used less CPU time than the limit, up to the hard one."""
        now = time.monotonic()
        if self.status is not None or now >= self.hard_deadline:
            return False
        spare = self.timeout - self.cpu_seconds()
        if spare <= 0.05 * self.timeout:
            return False
        self.deadline = min(self.hard_deadline, now + spare)
        return True

    def cpu_seconds(self) -> float:
        """CPU time P has used so far, all its threads together (0.0 once it is gone)."""
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime

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
        """Wait for P (killing it at the deadline), reap every orphan it left, and describe how it ended."""
        if self.status is None and self.killed_for is None:
            self.pump()
        if self.status is None:
            self.kill(self.killed_for or "finished")
            # Wait for it to be gone, even when its tests are over: until the kernel has torn it down, what
            # it holds (an abstract unix socket in the worker's network namespace, say) is there for the
            # next program on this worker to find, and a program could pass what it learned to the next.
            self.status = os.waitpid(self.pid, 0)[1]
        _reap_orphans(self.namespaced, self.template_pid)
        self._drain()
        for fd in list(self.fds) + ([self.pidfd] if self.pidfd is not None else []):
            os.close(fd)
        self.fds = {}
        if self.workdir:
            import shutil

            shutil.rmtree(self.workdir, ignore_errors=True)
        return self.describe()

    def describe(self) -> dict:
        code = os.waitstatus_to_exitcode(self.status)
        if self.killed_for in ("timeout", "output limit", "finished"):  # we ended it
            status, reason = {"timeout": ("timeout", "timeout"), "output limit": ("killed", "output limit"),
                              "finished": ("ok", "finished")}[self.killed_for]  # "finished": tests are over
        elif code == -signal.SIGXCPU:
            status, reason = "timeout", "CPU time limit"
        elif code == MEMORY_EXIT:
            status, reason = "memory", "memory limit"
        elif code == CONFINEMENT_EXIT:
            status, reason = "killed", "sandbox: confinement failed"
        elif code < 0:
            status, reason = "killed", _signal_name(code)
        else:
            status, reason = ("ok" if code == 0 else "error"), f"exited {code}"
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


def _reap_orphans(namespaced: bool, template_pid: int) -> None:
    """Reap children that have exited. Without namespaces, also kill the processes that left P's group and
    reparented to the worker (a subreaper), and wait for them; the template is the one child to keep."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid:
            continue
        if namespaced:  # programs still dying are in their own pid namespaces: nothing escaped
            return
        try:
            with open("/proc/self/task/%d/children" % os.getpid()) as f:
                kids = [int(p) for p in f.read().split() if int(p) != template_pid]
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


def serve(cfg: dict, template: Template) -> dict:
    """One job. "run": a program with stdin. "tests": a program plus trusted test code run right here.
    A result with "retire" set means this worker saw something it must not outlive (see `main`)."""
    try:
        if cfg["kind"] == "run":
            return Program(cfg, template, cfg.get("stdin", "").encode(), rpc=False).finish()
        _bound_self(cfg)
        try:
            return _rpc.run_tests(cfg, lambda: Program(cfg, template, b"", rpc=True))
        finally:
            _bound_self(None)
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001  (reported as a sandbox failure, never as a pass)
        reason = f"sandbox error: {type(exc).__name__}: {exc}"[:300]
        return {"status": "killed", "reason": reason, "stdout": "", "stderr": "", "exit_code": None,
                "duration_s": 0.0, "retire": reason}


_BASELINE_BYTES = 0  # the worker's address space once warm, before any job (set in `main`)
_OWN_SLACK = 64 << 20  # for the test code's own values and the messages in flight


def _bound_self(cfg: dict | None) -> None:
    """While tests run here, this worker may grow by what the program itself may use, and no more: values
    a program returns (a huge range that a test turns into a tuple) then end in a MemoryError here, which
    retires the worker, instead of taking the host's memory. Its CPU time is bounded too, by the job's wall
    clock: work that no signal handler can interrupt (one C call, such as a set of colliding hashes) ends
    with SIGXCPU, whose default action ends the worker. `None` lifts both bounds after the job."""
    if cfg is None:
        memory, cpu = resource.RLIM_INFINITY, resource.RLIM_INFINITY
    else:
        memory = _BASELINE_BYTES + (cfg["memory_mb"] << 20) + _OWN_SLACK
        used = resource.getrusage(resource.RUSAGE_SELF)
        cpu = int(used.ru_utime + used.ru_stime + WALL_FACTOR * cfg["timeout_s"]) + 2
    for which, soft in ((resource.RLIMIT_AS, memory), (resource.RLIMIT_CPU, cpu)):
        hard = resource.getrlimit(which)[1]
        resource.setrlimit(which, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))


def _address_space_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def probe_namespaces(cfg: dict) -> str | None:
    """None if programs can get their namespaces here, else why not."""
    if _SYS_CLONE is None:
        return f"unsupported machine {os.uname().machine}"
    try:
        pid = _clone(NAMESPACES)
    except OSError as exc:
        return f"cannot create namespaces ({exc.strerror or exc})"
    if pid == 0:
        try:
            _map_self(cfg["uid"], cfg["gid"])
            _private_directories(1, 16)
            os.chroot(JAIL)
            _drop_capabilities()
            with open(os.path.join(WORKDIR, "probe"), "w") as f:
                f.write("ok")
            os._exit(0)
        except BaseException:  # noqa: BLE001
            os._exit(3)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return None if code == 0 else "cannot set up a user namespace"


def main() -> None:
    global _BASELINE_BYTES
    ctl_in, ctl_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # programs may not read or write the worker's memory
    ids = {"uid": os.getuid(), "gid": os.getgid()}
    import gc

    gc.freeze()  # the collector in a program then leaves the warm objects (and their pages) alone
    if os.environ.get("SANDBOX_ISOLATION") == "bwrap":
        problem = probe_namespaces(ids)
    else:
        problem = "not started under bubblewrap"
    if problem is not None:
        _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # daemons that leave P's group come back to us
    template = Template(ids, problem is None)  # before the first job is read: P's origin has never seen one
    _BASELINE_BYTES = _address_space_bytes()
    write_msg(ctl_out, {"ready": True, "namespaced": problem is None, "problem": problem})
    while (cfg := read_msg(ctl_in)) is not None:
        cfg.update(ids, namespaced=problem is None)
        result = serve(cfg, template)
        write_msg(ctl_out, result)
        if result.get("retire"):  # integrity over throughput: the host starts a fresh worker
            return


if __name__ == "__main__":
    main()
