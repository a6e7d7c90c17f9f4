"""Unit-test jobs (first version: tests run inside the program's process, outcomes over a pipe)."""

from __future__ import annotations

import json
import os
import sys
import time


def _program_side(cfg: dict, rfd: int, wfd: int) -> None:
    import traceback
    import types

    def send(obj) -> None:
        os.write(wfd, (json.dumps(obj) + "\n").encode())

    module = types.ModuleType("__main__")
    sys.modules["__main__"] = module
    ns = module.__dict__
    try:
        exec(compile(cfg["source"], "solution.py", "exec"), ns)
        if cfg.get("setup"):
            exec(compile(cfg["setup"], "setup.py", "exec"), ns)
    except BaseException as exc:  # noqa: BLE001
        send({"load": f"{type(exc).__name__}: {exc}"[:300]})
        os._exit(0)
    send({"load": None})
    if "check" in cfg:
        tests = [cfg["check"] + f"\ncheck({cfg['entry_point']})\n"]
    else:
        tests = cfg["tests"]
    for i, test in enumerate(tests):
        t0 = time.monotonic()
        try:
            exec(compile(test, f"test_{i}.py", "exec"), ns)
            send({"i": i, "passed": True, "error": None, "s": time.monotonic() - t0})
        except BaseException as exc:  # noqa: BLE001
            send({"i": i, "passed": False, "error": f"{type(exc).__name__}: {exc}"[:300]})
    send({"done": True})
    os._exit(0)


def run_tests(cfg: dict, Program) -> dict:
    prog = Program(cfg, lambda rfd, wfd: _program_side(cfg, rfd, wfd), b"", rpc=True)
    os.close(prog.to_prog)
    buf = b""
    msgs = []
    while prog.pump(until_fd=prog.from_prog):
        chunk = os.read(prog.from_prog, 65536)
        if not chunk:
            break
        buf += chunk
        *lines, buf = buf.split(b"\n")
        msgs += [json.loads(line) for line in lines]
    os.close(prog.from_prog)
    result = prog.finish()
    n = 1 if "check" in cfg else len(cfg["tests"])
    outcomes = [{"passed": False, "error": "not run"} for _ in range(n)]
    load_error = "program did not load"
    done = False
    for m in msgs:
        if "load" in m:
            load_error = m["load"]
        elif "i" in m and 0 <= m["i"] < n:
            outcomes[m["i"]] = {"passed": m["passed"], "error": m["error"]}
        elif m.get("done"):
            done = True
    if not done and result["status"] == "ok":
        result["status"] = "error"
    result["tests"] = outcomes
    result["load_error"] = load_error
    result["completed"] = done
    return result
