"""Throughput of the code verifier against a fork-per-program harness of the human-eval design.

    python benchmarks/code_sandbox.py [--workers 2] [--timeout 3] [--repeat 1] [--import-torch]
    python benchmarks/code_sandbox.py --against /tmp/old   # also time the sandbox of another checkout

Side by side in one run, on every HumanEval canonical solution (prompt + canonical_solution):
  - `human-eval`: openai/human-eval's `check_correctness`, reproduced: per program a
    `multiprocessing.Manager` for the result list and a `multiprocessing.Process` (fork) that runs
    prompt + completion + test + check(entry_point) under a SIGALRM time limit, `workers` at a time from a
    thread pool, as `evaluate_functional_correctness` does;
  - `fork+pipe`: the same without the Manager (a Pipe carries the result), the cheapest fork-per-program;
  - `sandbox`: `CodeVerifier.verify_batch` (warm zygotes, namespaces, tests run apart from the program).
Then 300 tiny MBPP-style programs (3 asserts each), the shape of an RL batch. `--import-torch` loads torch
in the host first, as a training process would, which makes every fork of the host dearer. `--against DIR`
times `verify_batch` of the checkout in DIR (e.g. `git worktree add /tmp/old REV`) on the same two batches,
each side in a fresh child process, alternating, best of `--repeat`: what a change to the sandbox cost.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import multiprocessing
import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sandbox.pool import usable_cores  # noqa: E402  (after the path insert above)

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


# -- the human-eval design (openai/human-eval, human_eval/execution.py), reproduced ------------------------


class _TimeoutException(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds: float):
    def handler(signum, frame):
        raise _TimeoutException("Timed out!")

    signal.setitimer(signal.ITIMER_REAL, seconds)
    signal.signal(signal.SIGALRM, handler)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _reliability_guard(maximum_memory_bytes: int = 2**30) -> None:
    import builtins
    import resource
    import shutil
    import subprocess

    resource.setrlimit(resource.RLIMIT_AS, (maximum_memory_bytes, maximum_memory_bytes))
    resource.setrlimit(resource.RLIMIT_DATA, (maximum_memory_bytes, maximum_memory_bytes))
    builtins.exit = builtins.quit = None
    os.environ["OMP_NUM_THREADS"] = "1"
    for name in ("kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid", "fork",
                 "forkpty", "killpg", "rename", "renames", "truncate", "replace", "unlink", "fchmod",
                 "fchown", "chmod", "chown", "chroot", "lchown", "getcwd", "chdir"):
        setattr(os, name, None)
    shutil.rmtree = shutil.move = shutil.chown = None
    subprocess.Popen = None


def _unsafe_execute(program: str, timeout: float, result) -> None:
    import tempfile

    import shutil

    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        rmtree, rmdir, chdir = shutil.rmtree, os.rmdir, os.chdir  # human-eval restores these for cleanup
        _reliability_guard()
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                with _time_limit(timeout):
                    exec(program, {})
            outcome = "passed"
        except _TimeoutException:
            outcome = "timed out"
        except BaseException as exc:  # noqa: BLE001
            outcome = f"failed: {exc}"
        if hasattr(result, "append"):
            result.append(outcome)
        else:
            result.send(outcome)
        shutil.rmtree, os.rmdir, os.chdir = rmtree, rmdir, chdir


def check_correctness_human_eval(program: str, timeout: float) -> bool:
    manager = multiprocessing.Manager()
    result = manager.list()
    p = multiprocessing.Process(target=_unsafe_execute, args=(program, timeout, result))
    p.start()
    p.join(timeout=timeout + 1)
    if p.is_alive():
        p.kill()
    outcome = result[0] if result else "timed out"
    manager.shutdown()
    return outcome == "passed"


def check_correctness_fork_pipe(program: str, timeout: float) -> bool:
    recv, send = multiprocessing.Pipe(duplex=False)
    p = multiprocessing.Process(target=_unsafe_execute, args=(program, timeout, send))
    p.start()
    p.join(timeout=timeout + 1)
    if p.is_alive():
        p.kill()
    return recv.poll() and recv.recv() == "passed"


def run_forking(check, programs: list[str], workers: int, timeout: float) -> tuple[float, int]:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        passed = sum(pool.map(lambda p: check(p, timeout), programs))
    return time.perf_counter() - t0, passed


def run_sandbox(verifier, pairs, workers: int) -> tuple[float, int]:
    t0 = time.perf_counter()
    verdicts = verifier.verify_batch(pairs)
    return time.perf_counter() - t0, sum(v.correct for v in verdicts)


_TIMED_IN_A_CHILD = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from verifiers.code_tests import CodeVerifier
pairs, tiny = json.loads(sys.stdin.read())
verifier = CodeVerifier(timeout_s=float(sys.argv[2]))
verifier.verify_batch(pairs[:4])
out = {}
for name, batch in (("humaneval", pairs), ("tiny", tiny)):
    t0 = time.perf_counter()
    correct = sum(v.correct for v in verifier.verify_batch(batch))
    out[name] = [time.perf_counter() - t0, correct]
print(json.dumps(out))
"""


def compare_checkouts(checkouts: dict[str, str], pairs, tiny, timeout: float, repeat: int) -> None:
    """`verify_batch` of each checkout in a fresh child process, alternating, best of `repeat`."""
    import subprocess

    best: dict[str, dict] = {}
    for _ in range(repeat):
        for label, path in checkouts.items():
            done = subprocess.run([sys.executable, "-c", _TIMED_IN_A_CHILD, path, str(timeout)], check=True,
                                  input=json.dumps([pairs, tiny]), capture_output=True, text=True)
            timing = json.loads(done.stdout.strip().splitlines()[-1])
            for name, (seconds, correct) in timing.items():
                if (label, name) not in best or seconds < best[(label, name)][0]:
                    best[(label, name)] = (seconds, correct)
    print(f"Checkouts compared (fresh process each, alternating, best of {repeat}):")
    for (label, name), (seconds, correct) in sorted(best.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        n = len(pairs) if name == "humaneval" else len(tiny)
        print(f"  {name:9s} {label:40s} {seconds:6.2f} s  {n / seconds:7.1f} programs/s  correct {correct}/{n}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=usable_cores(), help="programs at a time")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds per program (human-eval: 3)")
    parser.add_argument("--repeat", type=int, default=1, help="best of N runs of each harness")
    parser.add_argument("--import-torch", action="store_true", help="load torch in the host first")
    parser.add_argument("--against", help="another checkout whose sandbox to time beside this one")
    args = parser.parse_args()
    if args.import_torch:
        import torch  # noqa: F401

    from sandbox import Sandbox
    from verifiers.code_tests import CodeVerifier

    rows = [json.loads(line) for line in (DATA / "humaneval.jsonl").read_text().splitlines()]
    programs = [r["prompt"] + r["canonical_solution"] + "\n" + r["test"] + f"\ncheck({r['entry_point']})" for r in rows]
    pairs = [(r["prompt"] + r["canonical_solution"],
              {"test": r["test"], "entry_point": r["entry_point"], "prompt_prefix": r["prompt"]}) for r in rows]
    sandbox = Sandbox(workers=args.workers)
    verifier = CodeVerifier(timeout_s=args.timeout, sandbox=sandbox)
    verifier.verify_batch(pairs[: args.workers * 2])  # start the workers: a one-off cost per process
    print(f"HumanEval canonical solutions: {len(rows)} programs, {args.workers} at a time, "
          f"time limit {args.timeout:g}s, torch in host: {args.import_torch}, isolation: "
          f"{'namespaces' if sandbox.namespaced else 'limits only'}")
    best = {}
    for _ in range(args.repeat):
        for name, fn in [
            ("human-eval (Manager + Process)",
             lambda: run_forking(check_correctness_human_eval, programs, args.workers, args.timeout)),
            ("fork+pipe (Process + Pipe)",
             lambda: run_forking(check_correctness_fork_pipe, programs, args.workers, args.timeout)),
            ("sandbox verify_batch", lambda: run_sandbox(verifier, pairs, args.workers)),
        ]:
            seconds, passed = fn()
            if name not in best or seconds < best[name][0]:
                best[name] = (seconds, passed)
    base = best["human-eval (Manager + Process)"][0]
    for name, (seconds, passed) in best.items():
        print(f"  {name:34s} {seconds:7.2f} s  {len(rows) / seconds:7.1f} programs/s  "
              f"passed {passed}/{len(rows)}  speed-up vs human-eval {base / seconds:5.2f}x")

    tiny = [(f"def add(a, b):\n    return a + b + {i % 2}\n",
             {"tests": ["assert add(1, 2) == 3", "assert add(0, 0) == 0", "assert add(-1, 1) == 0"]})
            for i in range(300)]
    seconds, passed = run_sandbox(verifier, tiny, args.workers)
    print(f"RL-shaped batch: 300 tiny functions x 3 asserts: {seconds:.2f} s, {300 / seconds:.0f} programs/s, "
          f"{1000 * seconds * args.workers / 300:.1f} ms per program per worker, {passed} correct (150 expected)")
    sandbox.close()
    if args.against:
        here = str(Path(__file__).resolve().parents[1])
        compare_checkouts({"this checkout": here, f"--against {args.against}": args.against}, pairs, tiny,
                          args.timeout, max(args.repeat, 2))


if __name__ == "__main__":
    main()
