"""Unit-test jobs: the trusted worker runs the test code; the program's functions are called through a pipe.

The program process P loads the solution (and the reference's setup code), then only answers requests:
look up a global, call, get an attribute, iterate, ... The worker W executes the test code in its own
interpreter, in a namespace where every name the tests do not define themselves is fetched from P. P
never receives the tests: only the arguments the tests pass to its functions.

Values cross the pipe as tagged JSON. Plain data (None, bool, int, float, complex, str, bytes, list, tuple,
dict, set, frozenset, range, slice, Decimal, Fraction, deque) is copied, and decoding only ever builds
those built-in types, within size caps, so nothing P sends can run code in W, compare equal to something
it is not, or make W use more memory than P itself may. Any other object of P's stays in P and reaches W
as a `Remote` handle, equal only to itself, whose operations P answers. The other way, W sends P plain
data only, except that a callable or an iterator the tests pass to the program becomes a narrow proxy P
may call (or advance) and nothing else: no attribute, no item, no reduction, so P never holds a handle
into W's objects, builtins or harness. Anything else a test passes is refused with a clear error, and a
request P is not entitled to (or a malformed message) ends the job as a protocol violation and retires
the worker.

This is what makes early exits, fake output, a redefined `check`, an always-equal return value or a
program that scans its own memory for the tests worthless: the tests pass only if W ran them to their
last line on values P really returned.
"""

from __future__ import annotations

import base64
import builtins
import collections
import decimal
import fractions
import functools
import json
import os
import signal
import struct
import sys
import time
import types

MAX_MESSAGE = 16 << 20
MAX_DEPTH = 200
MAX_RANGE = 1 << 24  # elements of a range decoded in W: a test may well turn it into a tuple
_PLAIN = (type(None), bool, int, float, str)
_DICT_VIEWS = (type({}.keys()), type({}.values()), type({}.items()))
_VIEW_TAGS = dict(zip(_DICT_VIEWS, ("vk", "vv", "vi")))


# Every ending raised in W during the current job (`run_tests` clears it): a test's bare `except:` can catch
# ProgramGone or SandboxTimeout, but not un-raise it, so a test that swallowed one is failed all the same.
ENDINGS: list[BaseException] = []


class ProgramGone(BaseException):
    """P exited, crashed or broke the protocol during a call. A BaseException so that a test's own
    `except Exception` cannot swallow it (and recorded in ENDINGS against a bare `except:`). `violation` is
    set when P broke the protocol (a malformed message, a request it is not entitled to): the job fails and
    the worker is retired."""

    def __init__(self, why: str, violation: bool = False):
        super().__init__(why)
        self.violation = violation
        ENDINGS.append(self)


def _violation(why: str) -> ProgramGone:
    return ProgramGone(why, violation=True)


class SandboxTimeout(BaseException):
    """The job's wall clock ran out while W was running the tests (recorded in ENDINGS, as ProgramGone)."""

    def __init__(self, *args):
        super().__init__(*args)
        ENDINGS.append(self)


class RemoteError(Exception):
    """An exception of a type that exists only in the program; str() is "TypeName: message"."""


class Remote:
    """A handle on an object living on the other side. Equal only to itself; everything else is a call."""

    __slots__ = ("_chan", "_hid", "_type")

    def __init__(self, chan: "Channel", hid: int, type_name: str):
        object.__setattr__(self, "_chan", chan)
        object.__setattr__(self, "_hid", hid)
        object.__setattr__(self, "_type", type_name)

    def _ask(self, op: str, *args):
        return self._chan.request(op, self._hid, *args)

    def __call__(self, *args, **kwargs):
        return self._ask("call", list(args), kwargs)

    def __getattr__(self, name: str):
        return self._ask("getattr", name)

    def __iter__(self):
        if self._type == "iterator":  # an iterator of the tests' (a proxy may only be advanced): itself
            return self
        return self._ask("iter")

    def __next__(self):
        return self._ask("next")

    def __len__(self):
        return self._ask("len")

    def __bool__(self):
        return self._ask("bool")

    def __getitem__(self, key):
        return self._ask("getitem", key)

    def __contains__(self, item):
        # Decided here, on the elements P yields: P never sees the value a test looks for.
        return any(x is item or x == item for x in self)

    def __str__(self):
        return self._ask("str")

    def __repr__(self):
        return f"<{self._type} from the program>"

    def __eq__(self, other):
        return self is other

    def __ne__(self, other):
        return self is not other

    def __hash__(self):
        return hash((id(self._chan), self._hid))


class Channel:
    """One end of the pipe. Both ends serve the other's requests while waiting for their own answers. The
    two ends differ in what they send by handle (`export`) and what they let the other side ask
    (`dispatch`): see `ProgramChannel` and `TestChannel`."""

    def __init__(self, rfd: int, wfd: int, wait=None):
        self.rfd, self.wfd = rfd, wfd
        self.plain_only = False
        self.wait = wait  # W: a function that blocks until rfd is readable or raises; P: None (blocking)
        self.buf = bytearray()
        self.objects: dict[int, object] = {}
        self.next_id = 0

    # -- values ----------------------------------------------------------------------------------------

    def encode(self, obj, depth: int = 0):
        t = type(obj)
        if t is int and not -(1 << 63) <= obj < (1 << 63):
            return {"x": hex(obj)}  # JSON would go through decimal, which is quadratic and capped at 4300 digits
        if t in _PLAIN:
            if t is float and obj != obj:
                return {"nan": 1}
            if t is float and obj in (float("inf"), float("-inf")):
                return {"inf": 1 if obj > 0 else -1}
            return obj
        if depth > MAX_DEPTH:
            raise ValueError("value nested too deeply")
        d = depth + 1
        if isinstance(obj, Remote) and obj._chan is self and not self.plain_only:
            return {"H": obj._hid}
        if _named_builtin(obj) and not self.plain_only:
            return {"B": obj.__name__}
        if isinstance(obj, bool):
            return bool(obj)
        if isinstance(obj, int):
            return self.encode(int(obj))
        if isinstance(obj, float):
            return self.encode(float(obj))
        if isinstance(obj, str):
            return str.__str__(obj)
        if isinstance(obj, (bytes, bytearray)):
            return {"b" if isinstance(obj, bytes) else "ba": base64.b64encode(bytes(obj)).decode()}
        if isinstance(obj, complex):
            return {"c": [self.encode(obj.real), self.encode(obj.imag)]}
        if isinstance(obj, collections.deque):
            return {"q": [self.encode(x, d) for x in list(obj)]}
        if isinstance(obj, tuple):
            return {"t": [self.encode(x, d) for x in tuple.__iter__(obj)]}
        if isinstance(obj, list):
            return {"l": [self.encode(x, d) for x in list.__iter__(obj)]}
        if isinstance(obj, _DICT_VIEWS):  # a view stays a view: `d.keys() == [...]` is False, `== {...}` True
            return {_VIEW_TAGS[type(obj)]: [self.encode(x, d) for x in list(obj)]}
        if isinstance(obj, dict):
            return {"d": [[self.encode(k, d), self.encode(v, d)] for k, v in dict.items(obj)]}
        if isinstance(obj, frozenset):
            return {"f": [self.encode(x, d) for x in frozenset.__iter__(obj)]}
        if isinstance(obj, set):
            return {"s": [self.encode(x, d) for x in set.__iter__(obj)]}
        if isinstance(obj, range):
            return {"r": [obj.start, obj.stop, obj.step]}
        if isinstance(obj, slice):
            return {"sl": [self.encode(obj.start, d), self.encode(obj.stop, d), self.encode(obj.step, d)]}
        if obj is Ellipsis:
            return {"E": 1}
        if isinstance(obj, decimal.Decimal):
            return {"D": str(obj)}
        if isinstance(obj, fractions.Fraction):
            return {"Q": [int(obj.numerator), int(obj.denominator)]}
        return self.export(obj)

    def export(self, obj) -> dict:
        """How an object that is not plain data crosses: a handle the other side may use (see subclasses)."""
        raise NotImplementedError


    def keep(self, obj, kind: str) -> dict:
        self.next_id += 1
        self.objects[self.next_id] = obj
        return {"h": self.next_id, "type": kind}

    def decode(self, v):
        if v is None or type(v) in (bool, int, float, str):
            return v
        if type(v) is not dict or len(v) not in (1, 2):
            raise _violation("malformed value")
        (tag, x), *_ = v.items()
        if tag == "l":
            return [self.decode(i) for i in _list(x)]
        if tag == "t":
            return tuple(self.decode(i) for i in _list(x))
        if tag == "d":
            return {self.decode(_list(kv)[0]): self.decode(_list(kv)[1]) for kv in _list(x)}
        if tag == "s":
            return {self.decode(i) for i in _list(x)}
        if tag == "vk":
            return dict.fromkeys(self.decode(i) for i in _list(x)).keys()
        if tag == "vv":
            return dict(enumerate(self.decode(i) for i in _list(x))).values()
        if tag == "vi":
            pairs = [self.decode(i) for i in _list(x)]
            if not all(type(p) is tuple and len(p) == 2 for p in pairs):
                raise _violation("malformed items view")
            return dict(pairs).items()
        if tag == "f":
            return frozenset(self.decode(i) for i in _list(x))
        if tag == "q":
            return collections.deque(self.decode(i) for i in _list(x))
        if tag == "x":
            return int(_str(x), 16)
        if tag == "nan":
            return float("nan")
        if tag == "inf":
            return float("inf") if x == 1 else float("-inf")
        if tag in ("b", "ba"):
            raw = base64.b64decode(_str(x))
            return raw if tag == "b" else bytearray(raw)
        if tag == "c":
            re_, im = (self.decode(i) for i in _list(x))
            return complex(_num(re_), _num(im))
        if tag == "r":
            r = range(*(_int(i) for i in _list(x)))
            if len(r) > MAX_RANGE:
                raise _violation(f"a range of {len(r)} elements (at most {MAX_RANGE} cross)")
            return r
        if tag == "sl":
            start, stop, step = (self.decode(i) for i in _list(x))
            if not all(i is None or type(i) is int for i in (start, stop, step)):
                raise _violation("malformed slice")
            return slice(start, stop, step)
        if tag == "E":
            return Ellipsis
        if tag == "D":
            return decimal.Decimal(_str(x))
        if tag == "Q":
            return fractions.Fraction(*(_int(i) for i in _list(x)))
        if tag in ("B", "h", "H") and self.plain_only:
            raise _violation(f"a value by name or handle ({tag!r}) where only plain data may cross")
        if tag == "B":
            if _str(x) not in _BUILTIN_VALUES:
                raise _violation("unknown built-in")
            return getattr(builtins, x)
        if tag == "h":
            return Remote(self, _int(x), _str(v.get("type", "object"))[:60])
        if tag == "H":
            if _int(x) not in self.objects:
                raise _violation("unknown handle")
            return self.objects[x]
        raise _violation(f"unknown tag {tag!r}"[:80])

    # -- messages --------------------------------------------------------------------------------------

    def send(self, msg: dict) -> None:
        body = json.dumps(msg).encode()
        data = struct.pack(">I", len(body)) + body
        try:
            while data:
                data = data[os.write(self.wfd, data):]
        except OSError as exc:
            raise ProgramGone(f"pipe closed ({exc.strerror})") from None

    def recv(self) -> dict:
        while True:
            if len(self.buf) >= 4:
                n = struct.unpack(">I", self.buf[:4])[0]
                if n > MAX_MESSAGE:
                    raise _violation("message too large")
                if len(self.buf) >= 4 + n:
                    body = bytes(self.buf[4:4 + n])
                    del self.buf[:4 + n]
                    try:
                        msg = json.loads(body)
                    except (ValueError, RecursionError):
                        raise _violation("malformed message") from None
                    if type(msg) is not dict:
                        raise _violation("malformed message")
                    return msg
            if self.wait is not None:
                self.wait(self.rfd)
            chunk = os.read(self.rfd, 1 << 20)
            if not chunk:
                raise ProgramGone("the program exited")
            self.buf += chunk

    def request(self, op: str, *args):
        self.next_id += 1
        rid = self.next_id
        self.send({"rid": rid, "op": op, "args": self.encode(list(args))})
        while True:
            msg = self.recv()
            if "op" in msg:
                self.send(self.answer(msg))
                continue
            if msg.get("re") != rid:
                raise _violation("out-of-order reply")
            if "err" in msg:
                raise _exception(msg["err"], ending_iteration=op == "next")
            return self.decode(msg.get("value"))

    def answer(self, msg: dict) -> dict:
        """Carry out one request from the other side; exceptions travel back by type name and message."""
        rid = msg.get("rid")
        op = msg.get("op")
        try:
            args = self.decode_request(msg.get("args"))
            if type(op) is not str or type(args) is not list or not args:
                raise _violation("malformed request")
            value = self.dispatch(op, args)
            return {"re": rid, "value": self.encode_reply(value)}
        except (ProgramGone, SandboxTimeout, MemoryError):
            raise
        except StopIteration:  # the end of an iteration only where `next` was asked; a bug anywhere else
            return {"re": rid, "err": ["StopIteration" if op == "next" else "RuntimeError", "StopIteration"]}
        except BaseException as exc:  # noqa: BLE001  (reported to the caller, who decides)
            try:
                text = str(exc)[:500]
            except BaseException:  # noqa: BLE001
                text = "?"
            return {"re": rid, "err": [type(exc).__name__[:60], text]}

    def dispatch(self, op: str, args: list):
        raise NotImplementedError

    def decode_request(self, v):
        return self.decode(v)

    def encode_reply(self, value):
        return self.encode(value)


class ProgramChannel(Channel):
    """P's end: any object of P's may be sent by handle, and W may ask anything of it (the object is P's
    own), plus the module globals the tests name."""

    def __init__(self, rfd: int, wfd: int, resolve_global):
        super().__init__(rfd, wfd)
        self.resolve_global = resolve_global

    def export(self, obj) -> dict:
        return self.keep(obj, type(obj).__name__[:60])

    def dispatch(self, op: str, args: list):
        if op == "global":
            return self.resolve_global(args[0])
        target = self.objects[args[0]]
        rest = args[1:]
        if op == "call":
            return target(*rest[0], **rest[1])
        if op == "getattr":
            return getattr(target, rest[0])
        if op == "iter":
            return iter(target)
        if op == "next":
            return next(target)
        if op == "len":
            return len(target)
        if op == "bool":
            return bool(target)
        if op == "getitem":
            return target[rest[0]]
        if op == "str":
            return str(target)
        raise ValueError(f"unknown operation {op!r}")


class TestChannel(Channel):
    """W's end. P receives plain data, or a proxy on a function the tests defined (a lambda, a `def`) that
    it may only call, or on an iterator (a generator, `iter(list)`, `map`, ...) that it may only advance;
    the arguments P passes to them and what they give back must be plain data too, so that nothing made
    while serving P (a class, a bound method, a builtin) ever becomes a handle. Any other request from P
    is a protocol violation."""

    def export(self, obj) -> dict:
        if self.plain_only:
            raise TypeError(f"the tests' function gave back a {type(obj).__name__}: only plain data goes back")
        if _exportable_iterator(obj):
            return self.keep(obj, "iterator")
        if type(obj) is types.FunctionType:
            return self.keep(obj, "callable")
        raise TypeError(f"the sandbox sends a program plain data, functions the tests define and iterators "
                        f"only, not {type(obj).__name__}")

    def decode_request(self, v):
        return self._plain(self.decode, v)

    def encode_reply(self, value):
        return self._plain(self.encode, value)

    def _plain(self, code, value):
        self.plain_only = True
        try:
            return code(value)
        finally:
            self.plain_only = False

    def dispatch(self, op: str, args: list):
        hid = args[0]
        target = self.objects.get(hid) if type(hid) is int else None
        if target is None:
            raise _violation(f"a request for {op!r} on no object of the tests")
        iterator = _exportable_iterator(target)
        if op == "call" and not iterator and len(args) == 3 and type(args[1]) is list and type(args[2]) is dict \
                and all(type(k) is str for k in args[2]):
            return target(*args[1], **args[2])
        if op == "next" and iterator and len(args) == 1:
            return next(target)
        if op == "bool" and len(args) == 1:  # `if callback:` is how a program tells it from None
            return True
        raise _violation(f"a request for {op!r} on a {'iterator' if iterator else 'function'} of the tests"[:120])


def _exportable_iterator(obj) -> bool:
    """A generator, or an iterator of a built-in type (list_iterator, map, zip, ...): never a class of the
    tests' or a program's making, whose other methods a handle could reach."""
    t = type(obj)
    return t is types.GeneratorType or (t.__module__ == "builtins" and hasattr(t, "__next__"))


# Built-ins that may travel by name (so that `isinstance(x, int)` and `key=len` work across the pipe): the
# value types and pure functions only. Not `type`, `object`, `getattr`, `exec`, `open`, `exit`, ...: a
# program must not hand the worker something that builds classes, reaches attributes or has effects.
_BUILTIN_VALUES = {
    "abs", "all", "any", "ascii", "bin", "bool", "bytearray", "bytes", "callable", "chr", "complex", "dict",
    "divmod", "enumerate", "filter", "float", "format", "frozenset", "hash", "hex", "int", "isinstance",
    "issubclass", "iter", "len", "list", "map", "max", "min", "next", "oct", "ord", "pow", "range", "repr",
    "reversed", "round", "set", "slice", "sorted", "str", "sum", "tuple", "zip",
}


def _named_builtin(obj) -> bool:
    """Built-in types and functions (`int`, `len`, ...) travel by name, so `isinstance(x, int)` still works."""
    name = getattr(obj, "__name__", None)
    return type(name) is str and name in _BUILTIN_VALUES and getattr(builtins, name) is obj


def _list(x) -> list:
    if type(x) is not list:
        raise _violation("malformed value")
    return x


def _str(x) -> str:
    if type(x) is not str:
        raise _violation("malformed value")
    return x


def _int(x) -> int:
    if type(x) is not int:
        raise _violation("malformed value")
    return x


def _num(x):
    if type(x) not in (int, float):
        raise _violation("malformed value")
    return x


# Raised on the receiving side only as RemoteError: control flow (an iteration that "ended" inside
# `all(map(...))`), and errors that mean something about the receiver's own state.
_NOT_RAISED_AS_IS = {"SystemExit", "KeyboardInterrupt", "GeneratorExit", "BaseException", "StopIteration",
                     "StopAsyncIteration", "MemoryError"}


def _exception(err, ending_iteration: bool = False) -> BaseException:
    """The exception to raise for an error the other side reported: a built-in type by name, else
    RemoteError. StopIteration only as the answer to `next`."""
    name, text = (str(err[0])[:60], str(err[1])[:500]) if isinstance(err, list) and len(err) == 2 else ("?", "")
    if name == "StopIteration" and ending_iteration:
        return StopIteration()
    cls = getattr(builtins, name, None)
    if isinstance(cls, type) and issubclass(cls, Exception) and name not in _NOT_RAISED_AS_IS:
        try:
            return cls(text)
        except Exception:  # noqa: BLE001  (built-ins whose constructor wants other arguments)
            pass
    return RemoteError(f"{name}: {text}")


# -------------------------------------------------------------------------------------------------------
# P: load the program, then answer


CANDIDATE = "__candidate__"  # HumanEval's function under test, as `check` receives it (TestNamespace.aliases)


def test_sources(cfg: dict) -> list[str]:
    """The test code of a job, one source per test."""
    if "check" in cfg:  # the candidate under a name of its own: inside `check`, `sum` stays the builtin
        return [cfg["check"] + f"\n\ncheck({CANDIDATE})\n"]
    return [str(t) for t in cfg["tests"]]


@functools.lru_cache(maxsize=512)
def _compiled(source: str, filename: str):
    """Trusted code (tests, prompts) compiled once per worker: an RL batch runs the same tests n times."""
    return compile(source, filename, "exec")


def _compile_tests(sources: list[str]) -> list:
    """Each test compiled (a SyntaxError instead of code for a broken test)."""
    codes = []
    for i, source in enumerate(sources):
        try:
            codes.append(_compiled(source, f"test_{i + 1}.py"))
        except (SyntaxError, ValueError) as exc:
            codes.append(exc)
    return codes


def program_side(payload: dict, rfd: int, wfd: int) -> None:
    """In P: load the program (and the reference's setup code, which is the task's and holds no test), then
    answer W's requests until W ends P."""

    module = types.ModuleType("solution")
    sys.modules["solution"] = module
    ns = module.__dict__
    ns["__builtins__"] = builtins

    def resolve(name):
        if type(name) is not str or name not in ns or name.startswith("__"):
            raise NameError(f"name {name!r} is not defined")
        return ns[name]

    chan = ProgramChannel(rfd, wfd, resolve)
    try:
        exec(compile(payload["source"], "solution.py", "exec"), ns)
        if payload.get("setup"):
            exec(compile(payload["setup"], "setup.py", "exec"), ns)
        # Saves W one round trip per function: a handle on every function and class the program defines.
        defined = {n: chan.encode(v) for n, v in ns.items()
                   if not n.startswith("__") and isinstance(v, (types.FunctionType, type))}
        hello = {"loaded": True, "globals": defined}
    except BaseException as exc:  # noqa: BLE001  (reported: the tests then fail with this reason)
        hello = {"loaded": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    chan.send(hello)
    while True:
        chan.send(chan.answer(chan.recv()))


# -------------------------------------------------------------------------------------------------------
# W: run the tests


class TestNamespace(dict):
    """Globals for the test code. Built-in and standard-library names are W's own, so a program cannot
    redefine `abs`, `len` or `math` to fool a comparison; other names the tests do not define themselves
    (the functions under test, setup objects, helpers) are fetched from the program. `from_program` holds the
    built-in name that is really the function under test (MBPP task 126 is called `sum`; `program_names`). With
    `only_listed` (HumanEval's `check`), nothing but `from_program` comes from the program: a helper the
    check calls (`poly`) is the prompt's or missing, never the program's version of it."""

    def __init__(self, chan: Channel, from_program: set[str], prefetched: dict, only_listed: bool = False,
                 aliases: dict[str, str] | None = None):
        super().__init__(__builtins__=builtins, __name__="__main__")
        self.chan, self.from_program, self.prefetched = chan, from_program, prefetched
        self.only_listed = only_listed
        self.aliases = aliases or {}  # a name of the tests -> the program's name for it (CANDIDATE -> entry point)
        self.absent: set[str] = set()

    def __missing__(self, name):
        local = name in builtins.__dict__ or name in sys.stdlib_module_names
        listed = name in self.from_program
        if name in self.absent or (local and not listed) or (self.only_listed and not listed):
            if name in sys.stdlib_module_names and name not in builtins.__dict__:
                import importlib

                try:
                    module = importlib.import_module(name)
                except ImportError:
                    raise KeyError(name) from None
                self[name] = module
                return module
            raise KeyError(name)
        remote = self.aliases.get(name, name)
        try:
            if remote in self.prefetched:
                value = self.chan.decode(self.prefetched[remote])
            else:
                value = self.chan.request("global", remote)
        except NameError:
            self.absent.add(name)
            return self.__missing__(name)
        self[name] = value
        return value


@functools.lru_cache(maxsize=512)
def program_names(tests: tuple[str, ...]) -> frozenset[str]:
    """The one built-in name that is really the function under test (MBPP task 126 is called `sum`:
    `assert sum(10, 15) == 6`), or none. Only when every test is one assertion of a comparison, every name
    the tests call is a builtin's (else the function under test is that other one), the expected side names
    nothing of the program's (`assert sorted(x) == result` would let it choose both sides), and exactly one
    name is called in every test and never on an expected side (`copy` in `assert set(copy(x)) == set(y)`;
    `set` stays the worker's). Attacker reviews made a program's `set`, `sorted`, `all` or `isinstance` pay
    placeholders wherever the worker took more than that from it."""
    import ast

    local = set(builtins.__dict__) | set(sys.stdlib_module_names)
    common: set[str] | None = None
    expected_side: set[str] = set()
    for test in tests:
        try:
            tree = ast.parse(test)
        except SyntaxError:
            return frozenset()
        called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        if called - local or len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert) \
                or not isinstance(tree.body[0].test, ast.Compare):
            return frozenset()
        expected = [n for side in tree.body[0].test.comparators for n in ast.walk(side)]
        if any(isinstance(n, ast.Name) and n.id not in local for n in expected):
            return frozenset()
        expected_side |= {n.func.id for n in expected if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        common = called if common is None else common & called
    candidates = (common or set()) - expected_side
    return frozenset(candidates) if len(candidates) == 1 else frozenset()


def run_tests(cfg: dict, start) -> dict:
    """In the worker: start P (`start()` returns its `Program`), then run each test here. A test passes only
    if its code returns normally here. A protocol violation by P, a MemoryError here, or the wall clock
    running out while this worker was busy fails the job and sets "retire": the worker must not run another."""
    tests = test_sources(cfg)
    codes = _compile_tests(tests)
    prog = start()
    ENDINGS.clear()

    def wait(fd: int) -> None:
        if not prog.pump(until_fd=fd):
            raise SandboxTimeout() if prog.killed_for == "timeout" else ProgramGone(prog.killed_for or "exited")

    alarmed = []

    def alarm(signum, frame):  # the wall clock ran out while the worker itself was busy (in test code)
        alarmed.append(True)
        raise SandboxTimeout()

    chan = TestChannel(prog.from_prog, prog.to_prog, wait)
    outcomes = [{"passed": False, "error": "not run"} for _ in tests]
    run = {"ended": "finished", "load_error": None, "retire": None, "completed": False}
    signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, max(0.001, prog.hard_deadline - time.monotonic() + 0.05))
    try:
        _run_each(cfg, chan, codes, outcomes, run)
    except SandboxTimeout:  # the alarm went off while `_run_each` was handling another ending
        run["ended"] = "timeout"
        _mark_current(outcomes, "timeout")
    finally:  # whatever happened above, the program is ended and reaped before this job returns
        signal.setitimer(signal.ITIMER_REAL, 0)
        os.close(prog.to_prog)
        prog.kill(prog.killed_for or run["ended"])
        result = prog.finish()
        os.close(prog.from_prog)
    if run["load_error"] and result["status"] == "ok":
        result["status"] = "error"
    if alarmed:  # it may have cut short any step of the worker's, the handling of a MemoryError included
        run["retire"] = run["retire"] or "the tests overran the wall clock in the worker"
    if run["retire"]:
        run["completed"] = False
        result.update(status="killed", reason=f"sandbox: {run['retire']}", retire=run["retire"])
    result.update(tests=outcomes, load_error=run["load_error"], completed=run["completed"])
    return result


def _run_each(cfg: dict, chan: TestChannel, codes: list, outcomes: list[dict], run: dict) -> None:
    """The tests one by one, each outcome recorded as it ends; how the whole run ended goes into `run`."""
    if "check" in cfg:  # the candidate; the entry point's own name too, unless a builtin's (`sum` in the check stays it)
        entry = cfg["entry_point"]
        local = entry in builtins.__dict__ or entry in sys.stdlib_module_names
        from_program, aliases = {CANDIDATE} | (set() if local else {entry}), {CANDIDATE: entry}
    else:
        from_program, aliases = program_names(tuple(test_sources(cfg))), {}
    hello = None
    try:
        hello = chan.recv()
        if not hello.get("loaded"):
            run["load_error"] = str(hello.get("error", "program did not load"))[:300]
            return
        prefetched = hello.get("globals")
        ns = TestNamespace(chan, from_program, prefetched if isinstance(prefetched, dict) else {},
                           only_listed="check" in cfg, aliases=aliases)
        if cfg.get("prefix"):
            _trusted_helpers(ns, cfg["prefix"], cfg["entry_point"])
        for i, code in enumerate(codes):
            t0 = time.monotonic()
            try:
                if isinstance(code, Exception):
                    raise code
                exec(code, ns)
                if ENDINGS:  # the test caught the program's exit, violation or timeout: it did not pass
                    raise ENDINGS[0]
                outcomes[i] = {"passed": True, "error": None, "seconds": round(time.monotonic() - t0, 4)}
            except MemoryError:
                raise
            except Exception as exc:  # noqa: BLE001  (a failed test; infrastructure errors are BaseException)
                outcomes[i] = {"passed": False, "error": _describe(exc)}
        run["completed"] = True
    except ProgramGone as exc:
        run["ended"] = "program gone"
        if exc.violation:
            run["retire"] = f"protocol violation: {exc}"
        elif hello is None:  # it never finished loading (an exit during a call is that test's failure)
            run["load_error"] = run["load_error"] or f"program exited: {exc}"
        _mark_current(outcomes, f"program exited: {exc}")
    except MemoryError:
        run["ended"] = run["retire"] = "the worker's memory limit"
        _mark_current(outcomes, "MemoryError in the test runner")
    except SandboxTimeout:
        run["ended"] = "timeout"
        _mark_current(outcomes, "timeout")


def _trusted_helpers(ns: TestNamespace, prefix: str, entry_point: str) -> None:
    """Run the task's prompt here so that helpers the tests call (HumanEval's `poly`, `encode_cyclic`)
    are the task's, not versions the program redefined; the entry point itself stays the program's."""
    try:
        exec(_compiled(prefix, "prompt.py"), ns)
    except Exception:  # noqa: BLE001  (a prompt that is not runnable on its own: helpers come from the program)
        pass
    ns.pop(entry_point, None)


def _describe(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001
        text = ""
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__


def _mark_current(outcomes: list[dict], error: str) -> None:
    for o in outcomes:
        if o["error"] == "not run":
            o["error"] = error
            return
