"""One test per attack on the sandbox: each comes back not correct, quickly, and leaves the host untouched.

The attacks are written the way a policy would write them: as the "solution" to an MBPP-style task whose
tests it cannot pass honestly (`add(1, 2) == 3` from a program that returns the wrong value), or as a
program run with `run_python`.
"""

from __future__ import annotations

import json
import os
import socket
import textwrap
import threading
import time
from pathlib import Path

import pytest

from sandbox import RunResult, Sandbox, SandboxUnavailable, job
from verifiers.code_tests import CodeVerifier

TIMEOUT = 0.5  # CPU seconds; the wall clock allows twice that
QUICK = 4.0  # seconds: an attack must be over well within this
REFERENCE = {"tests": ["assert add(1, 2) == 3", "assert add(2, 2) == 4"]}
WRONG = "def add(a, b):\n    return a - b\n"


@pytest.fixture(scope="module")
def verifier(sandbox):
    return CodeVerifier(timeout_s=TIMEOUT, memory_mb=256, sandbox=sandbox)


@pytest.fixture(scope="module")
def isolated(sandbox):
    """For attacks only namespaces stop (files, network, processes of the host): skip, and say why, where
    the machine has none (the sandbox then runs in its degraded mode, tested at the end of this file)."""
    run(sandbox, "pass")
    if not sandbox.namespaced:
        pytest.skip(f"no namespaces on this machine ({sandbox.problem}): isolation is not available")


def run(sandbox: Sandbox, source: str, timeout_s: float = TIMEOUT, **fields) -> RunResult:
    return RunResult.from_dict(sandbox.run(job("run", timeout_s, 256, source=textwrap.dedent(source), **fields)))


def attack(verifier: CodeVerifier, source: str, reference: dict = REFERENCE, quick: float = QUICK):
    """Verify `source` as a solution; it must not be correct and must be over quickly (within `quick`
    seconds; a verifier with a longer time limit than TIMEOUT needs a bound past its own wall clock)."""
    t0 = time.monotonic()
    verdict = verifier.verify(f"```python\n{textwrap.dedent(source)}\n```", reference)
    elapsed = time.monotonic() - t0
    assert not verdict.correct and verdict.reward == 0.0, verdict
    assert elapsed < quick, f"took {elapsed:.1f}s: {verdict.reason}"
    return verdict


def still_works(sandbox: Sandbox) -> None:
    result = run(sandbox, "print(6 * 7)")
    assert result.stdout == "42\n", result


def processes_named(name: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if Path(f"/proc/{entry}/comm").read_text().strip() == name:
                    found.append(int(entry))
            except OSError:
                pass
    return found


def test_isolation_is_reported(sandbox):
    result = run(sandbox, "print('hi')")
    assert result.status == "ok" and result.stdout == "hi\n"
    if result.isolation != "namespaces":
        assert result.warning and "namespaces" in result.warning  # degraded, and says so
        pytest.skip(f"no namespaces on this machine: {result.warning}")


def test_workers_hold_nothing_of_the_host(sandbox):
    """Workers are fresh interpreters, not forks of the host: no torch, no pytest, no project code."""
    result = run(sandbox, """
    import sys
    host = {"torch", "numpy", "pytest", "verifiers", "reasoner", "sandbox", "pipelines"}
    print(sorted(m for m in sys.modules if m.split(".")[0] in host))
    """)
    assert result.stdout == "[]\n", result


def test_programs_run_in_parallel_on_every_worker(sandbox):
    sandbox.warm_up()
    t0 = time.monotonic()
    results = sandbox.map([job("run", 5.0, 256, source="import time\ntime.sleep(1.5)")] * 2)
    assert [r["status"] for r in results] == ["ok", "ok"]
    assert time.monotonic() - t0 < 2.9  # side by side, not one after the other (3 s); 1.4 s for a slow start


def test_dead_workers_are_replaced(sandbox):
    sandbox.warm_up()
    idle = []
    while not sandbox._idle.empty():
        idle.append(sandbox._idle.get())
    for zygote in idle:  # as if the OOM killer had taken every worker
        zygote.proc.kill()
        zygote.proc.wait()
        sandbox._idle.put(zygote)
    time.sleep(0.3)  # bubblewrap's children follow it
    results = sandbox.map([job("run", 5.0, 256, source="print('back')")] * 4)
    assert [r["stdout"] for r in results] == ["back\n"] * 4


# -- CPU, memory, processes, output, disk ------------------------------------------------------------------


def test_infinite_loop(verifier, sandbox):
    verdict = attack(verifier, WRONG + "while True:\n    pass\n")
    assert verdict.timed_out
    assert run(sandbox, "while True: pass").status == "timeout"


def test_loop_that_ignores_signals(verifier, sandbox):
    source = """
    import signal
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM, signal.SIGXCPU, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    while True:
        try:
            pass
        except BaseException:
            pass
    """
    assert attack(verifier, WRONG + textwrap.dedent(source)).timed_out
    assert run(sandbox, source).status == "timeout"


def test_memory_bomb(verifier, sandbox):
    source = "x = []\nwhile True:\n    x.append(bytearray(50 * 2**20))\n"
    attack(verifier, WRONG + source)
    # Time enough that memory, not time, runs out first even where page faults are slow (a loaded machine
    # has taken over a second of wall clock to fill 256 MB)
    assert run(sandbox, source, timeout_s=5.0).status == "memory"


def test_fork_bomb(verifier, sandbox):
    source = "import os\nwhile True:\n    os.fork()\n"
    attack(verifier, WRONG + source)
    assert run(sandbox, source).status != "ok"
    still_works(sandbox)


def test_thread_bomb(verifier, sandbox):
    source = "import threading, time\nwhile True:\n    threading.Thread(target=time.sleep, args=(60,)).start()\n"
    attack(verifier, WRONG + source)
    assert run(sandbox, source).status != "ok"


def test_stdout_flood(verifier, sandbox):
    source = "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n"
    attack(verifier, WRONG + source)
    t0 = time.monotonic()
    result = run(sandbox, source)
    assert result.status == "killed" and result.reason == "output limit"
    assert len(result.stdout) <= 1 << 20 and time.monotonic() - t0 < QUICK


def test_disk_fill(verifier, sandbox):
    source = """
    import os
    with open("big", "wb") as f:
        while True:
            f.write(b"x" * 2**20)
            f.flush()
    """
    attack(verifier, WRONG + textwrap.dedent(source))
    result = run(sandbox, source)
    assert result.status in ("error", "killed")  # ENOSPC or SIGXFSZ, never a full host disk
    files = run(sandbox, "n = 0\nwhile True:\n    open(str(n), 'w').close()\n    n += 1\n")
    if files.isolation == "namespaces":  # a tmpfs of its own, with a cap on files too
        assert files.status == "error" and "No space left" in files.stderr


def test_deep_recursion(verifier, sandbox):
    attack(verifier, "def add(a, b):\n    return add(a, b)\n")
    result = run(sandbox, """
    import json, sys
    sys.setrecursionlimit(10**8)
    json.loads("[" * 10**6 + "]" * 10**6)  # recursion in C: overflows the 8 MiB stack
    """, timeout_s=3.0)
    assert result.status == "killed" and "SIGSEGV" in result.reason


def test_ctypes_segfault(verifier, sandbox):
    source = "import ctypes\nctypes.string_at(0)\n"
    attack(verifier, WRONG + source)
    result = run(sandbox, source)
    assert result.status == "killed" and "SIGSEGV" in result.reason
    still_works(sandbox)


# -- the host: files, processes, environment, network -------------------------------------------------------


def test_writes_outside_its_directory(isolated, verifier, sandbox, tmp_path):
    targets = [tmp_path / "pwned", Path("/usr/pwned"), Path.home() / "pwned", Path("/opt/sandbox/pwned")]
    source = f"""
    import os
    ok = []
    for path in {[str(t) for t in targets]!r} + ["/pwned", "/proc/pwned", "../pwned"]:
        try:
            with open(path, "w") as f:
                f.write("x")
            ok.append(path)
        except OSError:
            pass
    print(ok)
    """
    attack(verifier, WRONG + textwrap.dedent(source))
    run(sandbox, source)
    for target in targets:
        assert not target.exists(), target


def test_kernel_settings_and_shared_memory_are_out_of_reach(isolated, verifier, sandbox):
    """A program whose uid is the host's root (CI runs as root) must not reach /proc/sys, /dev/shm or any
    writable place outside its two capped directories."""
    source = """
    import os
    reached = []
    for path in ["/proc/sys/vm/drop_caches", "/proc/sysrq-trigger", "/proc/sys/kernel/core_pattern",
                 "/dev/shm/x", "/dev/x", "/x", "/usr/x", "/sys/kernel/x"]:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT)  # opened, never written
            os.close(fd)
            reached.append(path)
        except OSError:
            pass
    print(reached)
    """
    attack(verifier, WRONG + textwrap.dedent(source))
    result = run(sandbox, source)
    assert result.stdout == "[]\n", result


def test_private_working_directory_and_tmp(isolated, sandbox):
    first = run(sandbox, "open('left-behind', 'w').write('x'); open('/tmp/left-behind', 'w').write('x')")
    assert first.status == "ok"
    second = run(sandbox, "import os; print(os.listdir('.'), os.listdir('/tmp'))")
    assert second.stdout == "[] []\n"


def test_double_forked_daemon_does_not_outlive_the_run(isolated, verifier, sandbox):
    source = """
    import ctypes, os, time
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            ctypes.CDLL(None).prctl(15, b"sbx-daemon", 0, 0, 0)
            time.sleep(30)
        os._exit(0)
    """
    attack(verifier, WRONG + textwrap.dedent(source))
    result = run(sandbox, source, forbid_processes=False)  # even where fork is allowed
    assert result.status == "ok"
    time.sleep(0.2)
    assert processes_named("sbx-daemon") == []


def test_killing_its_parent(isolated, verifier, sandbox):
    source = """
    import os, signal
    for pid in (os.getppid(), 1, -1, 2, 3):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    """
    attack(verifier, WRONG + textwrap.dedent(source))
    run(sandbox, source)
    still_works(sandbox)


def test_reading_the_parents_environment(isolated, monkeypatch):
    monkeypatch.setenv("REASONER_TEST_SECRET", "hunter2-env")
    sb = Sandbox(workers=1)  # started after the secret is in the host's environment
    try:
        result = run(sb, """
        import os
        print(dict(os.environ))
        for pid in ["self", "1", "2", "3", str(os.getppid())]:
            try:
                print(open(f"/proc/{pid}/environ").read())
            except OSError:
                pass
        """)
        assert result.status == "ok"
        assert "hunter2-env" not in result.stdout + result.stderr
    finally:
        sb.close()


def test_connecting_to_a_server_on_loopback(isolated, verifier, sandbox):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    accepted = []
    thread = threading.Thread(target=lambda: accepted.append(_accept(server)))
    thread.start()
    source = f"""
    import socket
    s = socket.create_connection(("127.0.0.1", {port}), timeout=0.5)
    s.sendall(b"stolen")
    """
    attack(verifier, WRONG + textwrap.dedent(source))
    result = run(sandbox, source)
    thread.join()
    server.close()
    assert result.status == "error" and accepted == [None]


def _accept(server: socket.socket):
    try:
        return server.accept()
    except OSError:
        return None


def test_reading_a_host_file(isolated, verifier, sandbox, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2-file")
    source = f"""
    found = []
    for path in [{str(secret)!r}, "/etc/passwd", "/etc/shadow", "/root/.bash_history", "/proc/1/cmdline"]:
        try:
            found.append(open(path).read())
        except OSError:
            pass
    print(found)
    """
    attack(verifier, WRONG + textwrap.dedent(source))
    result = run(sandbox, source)
    assert "hunter2-file" not in result.stdout and "root:" not in result.stdout


# -- the harness: early exits, fake output, redefinitions ---------------------------------------------------

EARLY_EXITS = {
    "sys.exit": "import sys\nsys.exit(0)\n",
    "os._exit": "import os\nos._exit(0)\n",
    "raise SystemExit": "raise SystemExit(0)\n",
    "atexit": "import atexit, os\natexit.register(lambda: os._exit(0))\n",
    "excepthook": "import sys, os\nsys.excepthook = lambda *a: os._exit(0)\n",
    "trace function": textwrap.dedent("""
        import sys, os
        def tracer(frame, event, arg):
            if event == "exception":
                os._exit(0)
            return tracer
        sys.settrace(tracer)
        """),
    "signal handler": textwrap.dedent("""
        import signal, os
        signal.signal(signal.SIGALRM, lambda *a: os._exit(0))
        signal.setitimer(signal.ITIMER_REAL, 0.001)
        """),
    "exit inside the function": "def add(a, b):\n    import os\n    os._exit(0)\n",
    "kill itself": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
}


@pytest.mark.parametrize("trick", sorted(EARLY_EXITS))
def test_early_exit_with_status_zero(verifier, trick):
    verdict = attack(verifier, WRONG + EARLY_EXITS[trick])
    assert not any(t["passed"] for t in verdict.details["tests"]), verdict


def test_fake_pass_output(verifier):
    source = """
    import os
    print("passed 2/2 tests")
    print("All tests passed")
    print('{"passed": true, "status": "ok"}')
    os._exit(0)
    """
    attack(verifier, WRONG + textwrap.dedent(source))
    attack(verifier, "def add(a, b):\n    print('passed 2/2 tests')\n    return 0\n")


def test_redefining_check(verifier):
    humaneval = {"test": "def check(candidate):\n    assert candidate(1, 2) == 3\n", "entry_point": "add"}
    attack(verifier, WRONG + "def check(candidate):\n    pass\n", humaneval)
    attack(verifier, WRONG + "import builtins\nbuiltins.check = lambda c: None\n", humaneval)


def test_always_equal_return_value(verifier):
    source = """
    class Anything:
        def __eq__(self, other):
            return True
        __ne__ = lambda self, other: False
        __hash__ = object.__hash__
    def add(a, b):
        return Anything()
    """
    attack(verifier, source)


def test_redefining_builtins_and_modules_the_tests_use(verifier):
    reference = {"tests": ["assert abs(add(1, 2) - 3) < 1e-9", "assert math.isclose(add(2, 2), 4)"]}
    source = """
    import builtins
    def abs(x):
        return 0
    builtins.abs = abs
    class math:
        isclose = staticmethod(lambda *a, **k: True)
    def add(a, b):
        return -1
    """
    attack(verifier, source, reference)


def test_handing_the_tests_a_builtin_with_effects(verifier):
    """`add = exit` must not make the worker call its own `exit` (nor `exec`, `open`, ...)."""
    for name in ("exit", "exec", "setattr"):
        attack(verifier, f"add = {name}\n")
    attack(verifier, "import builtins\nadd = builtins.__import__\n")


def test_patching_the_harness_through_shared_state(verifier):
    source = """
    import sys
    for name, module in list(sys.modules.items()):
        for attr in ("run_tests", "Channel", "TestNamespace", "describe"):
            if hasattr(module, attr):
                setattr(module, attr, None)
    """
    attack(verifier, WRONG + textwrap.dedent(source))


# -- what the program may know: never the tests -------------------------------------------------------------

# A generic cheat, as a policy would write it: it solves nothing, it looks for the tests. It reads every
# string it can reach (containers the collector tracks, frames, code constants) and the raw heap pages
# around every object, freed memory included, parses `assert f(args) == expected` lines and answers from
# that table. Where the tests are in its memory, it passes (see the control below); the sandbox must make
# sure they never are.
LOOKUP_SOURCE = r'''
import ast, builtins, ctypes, gc, re, sys

_ASSERT = re.compile(r"assert\s+(?:abs\()?\s*([A-Za-z_]\w*)\((.*)\)\s*==\s*(.+)")

def _texts():
    seen, out, addresses = set(), [], []
    def take(x):
        if isinstance(x, str) and len(x) > 10 and id(x) not in seen:
            seen.add(id(x))
            out.append(x)
    for obj in gc.get_objects():
        addresses.append(id(obj))
        if isinstance(obj, dict):
            for k, v in list(obj.items()):
                take(k)
                take(v)
        elif isinstance(obj, (list, tuple, set, frozenset)):
            for v in list(obj):
                take(v)
        elif type(obj).__name__ == "code":
            for v in obj.co_consts:
                take(v)
    frame = sys._getframe()
    while frame is not None:
        for v in list(frame.f_locals.values()) + list(frame.f_globals.values()):
            take(v)
        frame = frame.f_back
    pages = []
    for page in sorted({a >> 12 for a in addresses}):
        pages.append(ctypes.string_at(page << 12, 4096))
    out.append(b"\n".join(pages).decode("latin-1"))
    return out

def table():
    if "_answers" not in builtins.__dict__:
        rows = {}
        for text in _texts():
            for line in re.split(r"[\n\x00]", text) if "assert" in text else []:
                m = _ASSERT.search(line.strip())
                if m:
                    name, args, expected = m.groups()
                    expected = expected.strip()
                    if expected.count(")") > expected.count("("):
                        expected = expected[:expected.rindex(")")]
                    try:
                        rows.setdefault(name, {})[repr(ast.literal_eval("(" + args + ",)"))] = ast.literal_eval(expected)
                    except Exception:
                        pass
        builtins._answers = rows
    return builtins._answers

def lookup(args, name):
    rows = table()
    for table_name in [name] if name in rows else list(rows):
        if repr(tuple(args)) in rows[table_name]:
            return rows[table_name][repr(tuple(args))]
    return None
'''


def lookup_body() -> str:
    """The cheat as the body of a HumanEval function (the prompt supplies the `def` line)."""
    return ("    _args = tuple(locals().values())\n    _g = {}\n    exec(" + repr(LOOKUP_SOURCE) + ", _g)\n"
            "    return _g['lookup'](_args, 'candidate')\n")


def lookup_program() -> str:
    """The cheat as an MBPP program: it defines whatever names the tests it finds call."""
    return ("_g = {}\nexec(" + repr(LOOKUP_SOURCE) + ", _g)\nfor _name in list(_g['table']()):\n"
            "    globals()[_name] = (lambda n: lambda *a: _g['lookup'](a, n))(_name)\n")


def test_the_lookup_table_cheat_works_where_the_tests_are_in_memory(verifier):
    """The control: handed its tests (as a program that could read them would be), the cheat passes, so the
    tests below measure the sandbox, not a broken cheat."""
    tests = ["assert add(1, 2) == 3", "assert add(2, 2) == 4"]
    leaked = f"_SEEN = {chr(10).join(tests)!r}\n"
    assert verifier.verify(f"```python\n{leaked}{lookup_program()}\n```", {"tests": tests}).correct


def test_the_tests_are_nowhere_in_the_programs_memory(verifier):
    """Neither this job's tests nor an earlier job's, in any object, frame or heap page the program can
    read: it is cloned from a process that never saw a job."""
    marker = "7f3a9c-expected-value"
    earlier = {"tests": [f"assert add(1, 2) == 3  # {marker}-earlier"]}
    verifier.verify("def add(a, b):\n    return a + b\n", earlier)
    reference = {"tests": [f"assert add(1, 2) == 3  # {marker}", "assert add(2, 2) == 4"]}
    # The needles are written backwards and turned round only after the snapshot, so that the program's
    # own source cannot be what it finds.
    scan = LOOKUP_SOURCE + textwrap.dedent(f"""
        texts = _texts()
        needles = [{marker[::-1]!r}[::-1], {"add(2, 2)"[::-1]!r}[::-1]]
        found = [t for t in texts if any(n in t for n in needles)]
        print("found", len(found), flush=True)
        def add(a, b):
            return a - b
    """)
    for _ in range(2):  # on both workers
        verdict = attack(verifier, scan, reference)
        assert verdict.details["tests"][0]["error"].startswith("AssertionError")
    assert verifier.sandbox.run(job("tests", TIMEOUT, 256, source=scan, **reference))["stdout"] == "found 0\n"


def test_the_lookup_table_cheat_passes_nothing(verifier, shared_data):
    rows = [json.loads(line) for line in (shared_data / "humaneval.jsonl").read_text().splitlines()][:12]
    pairs = [(row["prompt"] + lookup_body(),
              {"test": row["test"], "entry_point": row["entry_point"], "prompt_prefix": row["prompt"]}) for row in rows]
    assert not any(v.correct for v in verifier.verify_batch(pairs))
    rows = [json.loads(line) for line in (shared_data / "mbpp.jsonl").read_text().splitlines()][:12]
    pairs = [(f"```python\n{lookup_program()}\n```", {"tests": row["test_list"], "setup": row["test_setup_code"]})
             for row in rows]
    assert not any(v.correct for v in verifier.verify_batch(pairs))


@pytest.mark.slow
def test_the_lookup_table_cheat_passes_no_public_task(shared_data):
    """Every HumanEval and MBPP task: the cheat passes 0 of 164 and 0 of 974."""
    verifier = CodeVerifier(timeout_s=5.0)
    rows = [json.loads(line) for line in (shared_data / "humaneval.jsonl").read_text().splitlines()]
    pairs = [(row["prompt"] + lookup_body(),
              {"test": row["test"], "entry_point": row["entry_point"], "prompt_prefix": row["prompt"]}) for row in rows]
    passed = [row["task_id"] for row, v in zip(rows, verifier.verify_batch(pairs)) if v.correct]
    assert (len(rows), passed) == (164, [])
    rows = [json.loads(line) for line in (shared_data / "mbpp.jsonl").read_text().splitlines()]
    pairs = [(f"```python\n{lookup_program()}\n```", {"tests": row["test_list"], "setup": row["test_setup_code"]})
             for row in rows]
    passed = [row["task_id"] for row, v in zip(rows, verifier.verify_batch(pairs)) if v.correct]
    assert (len(rows), passed) == (974, [])


# -- what crosses from the tests to the program: plain data, or a proxy to call or advance --------------------

CALLBACKS = {"tests": [
    "assert apply(lambda x: x * 2, 3) == 6",
    "assert total((i for i in range(4))) == 6",
    "assert total(iter([1, 2, 3])) == 6",
    "assert Seq([1, 2, 3, 4])[1:3] == [2, 3]",
    "assert 3 in Seq([1, 2, 3])",
]}
HONEST_CALLBACKS = """
def apply(f, x):
    return f(x)
def total(it):
    return sum(it)
class Seq:
    def __init__(self, items):
        self.items = list(items)
    def __getitem__(self, key):
        return self.items[key]
    def __iter__(self):
        return iter(self.items)
"""


def test_callables_iterators_and_slices_still_cross(verifier):
    verdict = verifier.verify(HONEST_CALLBACKS, CALLBACKS)
    assert verdict.correct, verdict


@pytest.mark.parametrize("reach", [
    "f.__globals__['__builtins__']['exec']", "f.__code__", "f.__closure__", "f.__dict__",
    "getattr(f, '__self__', None)", "str(f)", "f[0]", "len(f)", "iter(f)",
    "it.gi_frame.f_globals", "it.gi_code", "it.throw", "it.send(None)", "it[0]", "len(it)", "it()",
])
def test_a_handle_on_a_test_object_gives_nothing_but_calls(verifier, sandbox, reach):
    """A lambda or generator the tests pass is a proxy: any use other than calling or advancing it (or
    asking its truth) is a protocol violation that fails the job and retires the worker; later jobs pass
    and fail as they should."""
    source = HONEST_CALLBACKS.replace("    return f(x)", f"    it = f\n    {reach}\n    return f(x)").replace(
        "    return sum(it)", f"    f = it\n    {reach}\n    return sum(it)")
    verdict = attack(verifier, source, CALLBACKS)
    assert "protocol violation" in verdict.reason, verdict
    assert verifier.verify(HONEST_CALLBACKS, CALLBACKS).correct
    assert not verifier.verify("def apply(f, x) return", CALLBACKS).correct
    still_works(sandbox)


def test_a_test_object_that_is_neither_data_nor_callable_is_refused(verifier):
    reference = {"setup": "", "tests": ["class Box:\n    pass\nassert apply(lambda b: 1, Box()) == 1"]}
    verdict = verifier.verify(HONEST_CALLBACKS, reference)
    assert not verdict.correct and "plain data, functions the tests define and iterators" in verdict.details["tests"][0]["error"]


def test_forged_messages_retire_the_worker(verifier, sandbox):
    source = WRONG + "import os\nos.write(5, b'\\x00\\x00\\x00\\x0b{\"re\": 999}')\n"
    verdict = attack(verifier, source)
    garbage = attack(verifier, WRONG + "import os\nos.write(5, b'\\xff' * 64)\n")
    assert "protocol violation" in verdict.reason + garbage.reason or "program exited" in verdict.reason
    assert verifier.verify(WRONG.replace("-", "+"), REFERENCE).correct


def test_stop_iteration_from_the_program_does_not_end_a_test(verifier):
    reference = {"tests": ["assert all(map(lambda x: add(x, 1) == x + 1, [1, 2, 3]))",
                           "assert list(add(x, 1) for x in [1, 2]) == [2, 3]"]}
    verdict = attack(verifier, "def add(a, b):\n    raise StopIteration\n", reference)
    assert not any(t["passed"] for t in verdict.details["tests"]), verdict


# -- signals, keyrings and other kernel surface ----------------------------------------------------------------


def test_signals_reach_no_one_but_the_program(verifier, sandbox):
    """Its own session and process group, and seccomp: kill(0), killpg, kill(-1) are refused, so neither
    SIGTERM nor SIGSTOP reaches the worker."""
    source = """
    import os, signal
    refused = []
    print(os.getsid(0) == os.getpid(), os.getpgrp() == os.getpid())
    for sig in (signal.SIGSTOP, signal.SIGTERM):
        for target in (lambda: os.kill(0, sig), lambda: os.killpg(os.getpgrp(), sig), lambda: os.kill(-1, sig)):
            try:
                target()
            except PermissionError:
                refused.append(sig)
    print(len(refused))
    """
    t0 = time.monotonic()
    attack(verifier, WRONG + textwrap.dedent(source))
    result = run(sandbox, source)
    assert result.stdout == "True True\n6\n", result
    assert time.monotonic() - t0 < QUICK
    still_works(sandbox)


def test_keyrings_io_uring_and_other_kernel_surface_are_refused(sandbox):
    numbers = {"x86_64": {"add_key": 248, "keyctl": 250, "io_uring_setup": 425, "bpf": 321,
                          "perf_event_open": 298, "userfaultfd": 323, "unshare": 272, "setns": 308, "mount": 165,
                          "ptrace": 101, "process_vm_readv": 310, "pidfd_getfd": 438, "kcmp": 312},
               "aarch64": {"add_key": 217, "keyctl": 219, "io_uring_setup": 425, "bpf": 280,
                           "perf_event_open": 241, "userfaultfd": 282, "unshare": 97, "setns": 268, "mount": 40,
                           "ptrace": 117, "process_vm_readv": 270, "pidfd_getfd": 438, "kcmp": 272}}
    table = numbers.get(os.uname().machine)
    if table is None:
        pytest.skip("no syscall table for this machine")
    source = f"""
    import ctypes, errno
    libc = ctypes.CDLL(None, use_errno=True)
    allowed = []
    for name, nr in {table!r}.items():
        args = (b"user", b"k", b"x", 1, -3) if name == "add_key" else (0, 0, 0, 0, 0)
        if libc.syscall(nr, *args) != -1 or ctypes.get_errno() != errno.EPERM:
            allowed.append((name, ctypes.get_errno()))
    print(allowed)
    """
    result = run(sandbox, source)
    assert result.stdout == "[]\n", result


# -- the worker's own memory -----------------------------------------------------------------------------------


def test_values_cannot_grow_the_worker_past_the_programs_limit(verifier, sandbox):
    """A range is cheap to send and dear to expand: the worker may grow by what the program may use (256 MB
    here) and no more; past that the test fails and the worker is retired. Absurd lengths do not cross."""
    patient = CodeVerifier(timeout_s=5.0, memory_mb=256, sandbox=sandbox)  # so that memory, not time, runs out
    huge = "def add(a, b):\n    return range(10**7)\n"
    verdict = attack(patient, huge, {"tests": ["assert tuple(add(1, 2)) == (3,)"]}, quick=2 * 5.0 + 2)
    assert "memory" in verdict.reason, verdict
    absurd = attack(verifier, "def add(a, b):\n    return range(10**12)\n", {"tests": ["assert len(add(1, 2)) == 3"]})
    assert "protocol violation" in absurd.reason
    assert verifier.verify("def add(a, b):\n    return range(a, b + 1)\n",
                           {"tests": ["assert tuple(add(1, 3)) == (1, 2, 3)"]}).correct
    still_works(sandbox)


# -- without namespaces ------------------------------------------------------------------------------------


def test_without_namespaces_nothing_runs_unless_the_user_accepts_it():
    """No isolation, no untrusted code: the sandbox refuses, and says what to install or which flag to pass."""
    sb = Sandbox(workers=1, namespaces=False, unsafe_no_isolation=False)
    try:
        with pytest.raises(SandboxUnavailable, match="--unsafe-no-isolation"):
            run(sb, "print('hi')")
    finally:
        sb.close()


def test_without_namespaces_when_accepted_it_still_limits_and_says_so(tmp_path):
    """Machines without bubblewrap or user namespaces, where the user passed --unsafe-no-isolation: limits,
    a session of its own, seccomp, and a warning in every result."""
    sb = Sandbox(workers=1, namespaces=False, unsafe_no_isolation=True)
    try:
        with pytest.warns(RuntimeWarning, match="namespaces"):
            first = run(sb, "print('hi')")
        assert first.stdout == "hi\n" and first.isolation == "limits only" and "namespaces" in first.warning
        assert run(sb, "while True: pass").status == "timeout"
        assert run(sb, "x = bytearray(2**33)").status == "memory"
        assert run(sb, "import os\nos.fork()").status == "error"
        assert run(sb, "while True: print('x' * 99999)").reason == "output limit"
        assert run(sb, "import os, signal\nos.kill(-1, signal.SIGKILL)").status == "error"  # seccomp: EPERM
        capabilities = run(sb, "print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])")
        assert capabilities.stdout == "0000000000000000\n"  # root on the host keeps no capabilities
        verifier = CodeVerifier(timeout_s=TIMEOUT, sandbox=sb)
        for trick in EARLY_EXITS.values():
            attack(verifier, WRONG + trick)
        attack(verifier, "class A:\n    __eq__ = lambda s, o: True\ndef add(a, b):\n    return A()\n")
        assert verifier.verify(WRONG.replace("-", "+"), REFERENCE).correct
    finally:
        sb.close()


def test_a_bubblewrap_that_cannot_start_is_reported(tmp_path, monkeypatch):
    """As on kernels without unprivileged user namespaces: bwrap exists but fails; the sandbox says why."""
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr("sandbox.pool.shutil.which", lambda name: str(fake) if name == "bwrap" else None)
    with pytest.raises(SandboxUnavailable, match="No permissions to create new namespace"):
        Sandbox(workers=1, unsafe_no_isolation=False).run(job("run", source="print(1)"))
    sb = Sandbox(workers=1, unsafe_no_isolation=True)
    try:
        with pytest.warns(RuntimeWarning, match="No permissions to create new namespace"):
            result = run(sb, "print(1)")
        assert result.stdout == "1\n" and result.isolation == "limits only"
        assert "No permissions" in result.warning
    finally:
        sb.close()


def test_a_worker_given_up_on_is_not_reused(monkeypatch):
    """When the host stops waiting for a worker (it died or overstayed), that worker is killed and never
    handed the next job, even in the instant after the kill when it may still look alive."""
    from sandbox import pool

    sb = Sandbox(workers=1)
    try:
        run(sb, "pass")  # a warm worker, alive
        real_receive = pool.Zygote.receive
        monkeypatch.setattr(pool.Zygote, "receive", lambda self, cfg: None)
        result = run(sb, "print(1)")
        assert result.status == "killed" and result.reason == "sandbox worker died"
        monkeypatch.setattr(pool.Zygote, "receive", real_receive)
        for _ in range(3):
            still_works(sb)
    finally:
        sb.close()


def test_the_command_line_flag_accepts_running_without_isolation(monkeypatch, capsys):
    from pipelines.cli import main
    from sandbox.pool import UNSAFE_ENV

    monkeypatch.setenv(UNSAFE_ENV, "")
    assert Sandbox(workers=1).unsafe_no_isolation is False
    assert main(["--unsafe-no-isolation", "verifiers"]) == 0
    assert os.environ[UNSAFE_ENV] == "1" and Sandbox(workers=1).unsafe_no_isolation is True


# -- found by an outside red team (each class, not each case) ----------------------------------------------------


def test_a_builtin_or_class_the_tests_pass_is_not_a_handle(verifier, sandbox):
    """`getattr`, `type` or a bound method handed to the program would have let it build classes and run
    code in the worker: only functions the tests define (and iterators) become proxies."""
    for given in ("getattr", "type", "str.upper", "object"):
        reference = {"tests": [f"assert apply({given}, 3) == 3"]}
        verdict = attack(verifier, "def apply(f, x):\n    return f\n", reference)
        assert "TypeError" in verdict.details["tests"][0]["error"], verdict
    still_works(sandbox)


def test_a_lambda_called_with_a_handle_or_a_builtin_is_a_violation(verifier, sandbox):
    """What the program passes to a test's function, and what that function gives back, is plain data:
    `type` by name into `lambda t: t[1]` (which would build a class in the worker) ends the job."""
    reference = {"tests": ["assert apply(lambda t: t[1], 3) == 3", "assert apply(lambda t: t[1], 4) == 4"]}
    verdict = attack(verifier, "def apply(f, x):\n    alias = f(type)\n    return alias\n", reference)
    assert "protocol violation" in verdict.reason, verdict
    verdict = attack(verifier, "class Box:\n    pass\ndef apply(f, x):\n    return f(Box())\n", reference)
    assert "protocol violation" in verdict.reason, verdict
    honest = "def apply(f, x):\n    return f((0, x))\n"
    assert verifier.verify(honest, reference).correct
    still_works(sandbox)


def test_memory_outside_the_address_space_limit_is_refused(sandbox):
    """SysV shared memory, memfds and POSIX message queues would hold host memory past RLIMIT_AS (and past
    the program's death); inotify instances and queued signals are charged to the host user."""
    source = """
    import ctypes, errno, os, resource, signal
    libc = ctypes.CDLL(None, use_errno=True)
    refused = []
    if libc.shmget(0, 1 << 20, 0o1600) == -1 and ctypes.get_errno() == errno.EPERM:
        refused.append("shmget")
    try:
        os.memfd_create("x")
    except PermissionError:
        refused.append("memfd")
    if libc.inotify_init1(0) == -1 and ctypes.get_errno() == errno.EPERM:
        refused.append("inotify")
    if libc.syscall(240 if os.uname().machine == "x86_64" else 180, b"/q", 0o102, 0o600, None) == -1:
        refused.append("mq_open")
    print(refused, resource.getrlimit(resource.RLIMIT_SIGPENDING), resource.getrlimit(resource.RLIMIT_MSGQUEUE))
    """
    result = run(sandbox, source)
    assert result.stdout == "['shmget', 'memfd', 'inotify', 'mq_open'] (64, 64) (0, 0)\n", result


def test_no_channel_through_host_wide_kernel_state(sandbox):
    """Sockets, pipes, pidfds, sysinfo, the page cache's state and memfd_secret are refused: each reached
    kernel state shared by every program on the host, which a program could write and the next one, in any
    worker, read. An attacker review passed HumanEval/52 in 14 of 16 samples without computing it, through
    the host-wide socket-cookie counter; inode numbers of new pipes (a host-wide counter), a unix socket
    held only in flight (it outlived its program until the kernel's garbage collector ran), pipe pages (per
    user), the page cache of the shared read-only files (preadv2's RWF_NOWAIT reads it, MADV_PAGEOUT clears
    it), sysinfo's host-wide thread count, shared and huge-page mappings (inode numbers again) and a shared
    futex on a page of a system file (keyed by the file) were channels too; sync slows the whole host. File locks and leases (a channel between
    programs running at once on the shared read-only files) and making itself dumpable stay refused."""
    source = """
    import ctypes, errno, fcntl, mmap, os, socket, sys
    libc = ctypes.CDLL(None, use_errno=True)
    out = []
    def attempt(name, call):
        try:
            call()
            out.append(name)
        except OSError as exc:
            out.append(errno.errorcode[exc.errno])
    for family in (socket.AF_UNIX, socket.AF_INET, 40):  # unix, TCP/UDP, vsock
        attempt("socket", lambda: socket.socket(family, socket.SOCK_STREAM))
    attempt("socketpair", socket.socketpair)
    attempt("pipe", os.pipe)
    attempt("resized", lambda: fcntl.fcntl(1, 1031, 1 << 20))  # F_SETPIPE_SZ on its own stdout
    with open(sys.executable, "rb") as f:  # read-only, and shared by every program
        attempt("nowait", lambda: os.preadv(f.fileno(), [bytearray(4096)], 0, os.RWF_NOWAIT))
        for lock in (lambda: fcntl.flock(f, fcntl.LOCK_SH), lambda: fcntl.lockf(f, fcntl.LOCK_SH | fcntl.LOCK_NB),
                     lambda: fcntl.fcntl(f, fcntl.F_SETLEASE, fcntl.F_RDLCK)):
            attempt("locked", lock)
        mapped = mmap.mmap(f.fileno(), 4096, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
        attempt("paged out", lambda: mapped.madvise(21))  # MADV_PAGEOUT
        attempt("cold", lambda: mapped.madvise(20))  # MADV_COLD
    attempt("shared map", lambda: mmap.mmap(-1, 4096))  # MAP_SHARED: its inode number is a host-wide count
    attempt("huge map", lambda: mmap.mmap(-1, 2 << 20, flags=mmap.MAP_PRIVATE | 0x40000))  # MAP_HUGETLB too
    word = ctypes.c_int(0)
    x86 = os.uname().machine == "x86_64"  # pidfd_open, sysinfo, memfd_secret, sync, a shared FUTEX_WAKE
    calls = (434, 99 if x86 else 179, 447, 162 if x86 else 81, 202 if x86 else 98)
    for number, args in zip(calls, ((os.getpid(), 0), (ctypes.create_string_buffer(128),), (0,), (),
                                    (ctypes.byref(word), 1, 1, None, None, 0))):
        out.append(errno.errorcode[ctypes.get_errno()] if libc.syscall(number, *args) == -1 else "allowed")
    out.append(libc.prctl(4, 1, 0, 0, 0))  # PR_SET_DUMPABLE
    print(out)
    """
    result = run(sandbox, source)
    assert result.stdout == str(["EPERM"] * 19 + [-1]) + "\n", result


def test_no_count_of_the_programs_page_faults(sandbox):
    """getrusage's major faults (`ru_majflt`, after touching a mapped page) and block reads (`ru_inblock`,
    after a read) said exactly whether a page of a shared read-only file was in the host's page cache, which
    an earlier program's read puts there: an attacker review stored bits in it and passed HumanEval/52 with a
    chain of samples. The call is refused; the new mount API's host-wide mount ids too."""
    source = """
    import ctypes, errno, resource
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        resource.getrusage(resource.RUSAGE_SELF)
        print("allowed")
    except OSError as exc:
        print(errno.errorcode[exc.errno])
    print([errno.errorcode[ctypes.get_errno()] if libc.syscall(number, 0, 0, 0, 0) == -1 else "allowed"
           for number in (457, 458)])  # statmount, listmount
    """
    result = run(sandbox, source)
    assert result.stdout == "EPERM\n['EPERM', 'EPERM']\n", result


def test_a_thread_comes_with_no_pidfd(sandbox):
    """clone(CLONE_THREAD | CLONE_PIDFD) (kernel 6.9 on) handed back a pidfd for the new thread without
    pidfd_open: its inode number counts every thread on the host, and an attacker review passed HumanEval/52
    in 7 of 16 samples through it. Only the flags a thread library uses are allowed; threads still start."""
    source = """
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.clone.restype = ctypes.c_int
    libc.clone.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    exit_at_once = ctypes.cast(libc.syscall, ctypes.c_void_p)  # the thread runs syscall(60): exit
    stack = ctypes.create_string_buffer(1 << 16)
    top = ctypes.addressof(stack) + (1 << 16) - 256
    flags = 0x100 | 0x200 | 0x400 | 0x800 | 0x10000 | 0x40000  # VM FS FILES SIGHAND THREAD SYSVSEM
    pidfd = ctypes.c_int(-1)
    refused = libc.clone(exit_at_once, top, flags | 0x1000, 60, ctypes.byref(pidfd))  # | CLONE_PIDFD
    print(refused, ctypes.get_errno(), pidfd.value, libc.clone(exit_at_once, top, flags, 60, None) > 0)
    """
    result = run(sandbox, source)
    assert result.stdout == "-1 1 -1 True\n", result


def test_work_no_signal_can_interrupt_ends_with_the_worker(sandbox):
    """A set of integers that all hash alike is one long C call in the worker, where the wall-clock alarm
    cannot interrupt it: the worker's CPU limit (twice the job's, plus 2 s) ends the worker instead."""
    collide = "def f():\n    return [k * (2**61 - 1) for k in range(60000)]\n"
    verifier = CodeVerifier(timeout_s=0.5, memory_mb=256, sandbox=sandbox)
    t0 = time.monotonic()
    verdict = verifier.verify(collide, {"tests": ["assert set(f()) == {0}"]})
    assert not verdict.correct and "worker died" in verdict.reason, verdict
    assert time.monotonic() - t0 < 20
    still_works(sandbox)


def test_a_memory_error_while_serving_the_program_retires_the_worker(sandbox):
    reference = {"tests": ["assert apply(lambda n: [0] * n, 3) == [0, 0, 0]"]}
    program = """
    def apply(f, n):
        try:
            f(10 ** 9)  # 8 GB in the worker: a MemoryError there, never an error the program may catch
        except Exception:
            pass
        return f(n)
    """
    result = sandbox.run(job("tests", 5.0, 256, source=textwrap.dedent(program), tests=reference["tests"]))
    assert result["retire"] and not result["completed"], result
    still_works(sandbox)


def test_an_exit_during_a_call_is_that_tests_failure_not_a_load_error(verifier):
    verdict = attack(verifier, "def add(a, b):\n    import os\n    os._exit(0)\n")
    assert "load" not in verdict.reason and verdict.details["tests"][0]["error"].startswith("program exited")


def test_the_hosts_device_nodes_cannot_be_changed(sandbox):
    """A program's kernel uid may be the host's root, owner of the host's /dev/null: it still writes to the
    device, but cannot chmod, chown or touch the node (a host left without /dev/null, or a store that
    outlives the program)."""
    before = os.stat("/dev/null")
    source = """
    import os
    open("/dev/null", "w").write("x")
    out = [len(open("/dev/urandom", "rb").read(4))]
    for change in (lambda: os.chmod("/dev/null", 0o600), lambda: os.utime("/dev/null", (0, 0)),
                   lambda: os.chown("/dev/zero", 0, 0)):
        try:
            change()
            out.append("changed")
        except OSError as exc:
            out.append(exc.errno)
    print(out)
    """
    assert run(sandbox, source).stdout == "[4, 30, 30, 30]\n"  # EROFS
    after = os.stat("/dev/null")
    assert (after.st_mode, after.st_mtime_ns) == (before.st_mode, before.st_mtime_ns)


def test_the_page_cache_and_aio_are_out_of_reach(sandbox):
    """mincore, fadvise, readahead and cachestat would read and write a store shared by every program (which
    pages of a read-only file are cached); io_setup charges a host-wide counter."""
    numbers = {"x86_64": {"mincore": 27, "fadvise64": 221, "readahead": 187, "cachestat": 451, "io_setup": 206},
               "aarch64": {"mincore": 232, "fadvise64": 223, "readahead": 213, "cachestat": 451, "io_setup": 0}}
    table = numbers.get(os.uname().machine)
    if table is None:
        pytest.skip("no syscall table for this machine")
    source = f"""
    import ctypes, errno
    libc = ctypes.CDLL(None, use_errno=True)
    print([name for name, nr in {table!r}.items() if libc.syscall(nr, 0, 0, 0, 0) != -1 or ctypes.get_errno() != errno.EPERM])
    """
    assert run(sandbox, source).stdout == "[]\n"


HUMANEVAL_38 = {"entry_point": "decode_cyclic", "test": (
    "def check(candidate):\n    for s in ['abc', 'hello world', 'xy']:\n"
    "        assert candidate(encode_cyclic(s)) == s\n")}
PROMPT_38 = '''def encode_cyclic(s: str):
    """cycle groups of three characters."""
    groups = [s[(3 * i):min((3 * i + 3), len(s))] for i in range((len(s) + 2) // 3)]
    groups = [(group[1:] + group[0]) if len(group) == 3 else group for group in groups]
    return "".join(groups)


def decode_cyclic(s: str):
    """takes as input string encoded with encode_cyclic function. Returns decoded string."""
'''


def test_a_check_takes_only_the_entry_point_from_the_program(verifier):
    """Helpers the tests call (`encode_cyclic`) are the prompt's, run by the worker; a program that redefines
    them as the identity, beside a decoder that is the identity too, passes nothing, with or without the
    prompt in the reference."""
    cheat = "def encode_cyclic(s):\n    return s\ndef decode_cyclic(s):\n    return s\n"
    attack(verifier, cheat, {**HUMANEVAL_38, "prompt_prefix": PROMPT_38})
    verdict = attack(verifier, cheat, HUMANEVAL_38)  # no prompt: the helper is missing, not the program's
    assert "NameError" in verdict.reason


def test_a_whole_function_after_the_prompt_keeps_the_prompts_helpers(verifier):
    """An answer that writes out the entry point, and calls a helper only the prompt defines, passes."""
    honest = "def decode_cyclic(s):\n    return encode_cyclic(encode_cyclic(s))\n"
    assert verifier.verify(honest, {**HUMANEVAL_38, "prompt_prefix": PROMPT_38}).correct
