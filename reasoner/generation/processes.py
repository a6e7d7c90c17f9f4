"""Sampling in several processes of one torch thread each (`--sampler-processes N`, the hf backend).

On a few CPU cores a small model's decode step is mostly the overhead of many small operations, each too
small to use two threads: two processes of one thread each sampled 1.6x as fast as one process of two
threads (benchmarks/two_cores.py). `ProcessGenerator` keeps the sampler's weights in shared memory,
written in place by `load_weights` after each update, so no process ever receives a copy of them. Each
call splits its prompts into one contiguous share per process; share i samples with seed
`seed + i * SHARE_SEED_STRIDE` (share 0 with `seed` itself), so a (seed, prompts, processes) triple always
gives the same samples, though not the samples of one process. A call that can pause rows (`stop`: tool
calls) runs here, in this process, on the same weights.
"""

from __future__ import annotations

import atexit
import copy
import itertools
import multiprocessing
import os
import traceback
from collections.abc import Callable

import torch

from reasoner.config import SamplingParams
from reasoner.generation import Sample
from reasoner.generation.hf import HFGenerator

SHARE_SEED_STRIDE = 1_000_003  # seeds of the shares of one call are this far apart: no share repeats another's draws


def shared_memory_problem(model: torch.nn.Module, dtype: torch.dtype | None, where: str = "/dev/shm") -> str:
    """Why the sampler's weights would not fit in shared memory ("" if they would): a container's /dev/shm is
    often 64 MB, and a process writing past it dies of SIGBUS instead of raising."""
    if not os.path.isdir(where):
        return ""
    itemsize = (dtype or next(model.parameters()).dtype).itemsize
    need = sum(t.numel() for t in itertools.chain(model.parameters(), model.buffers())) * itemsize
    stat = os.statvfs(where)
    free = stat.f_bavail * stat.f_frsize
    if free >= 2 * need:
        return ""
    return (f"{where} has {free / 2**20:.0f} MB free and the sampler's weights need {need / 2**20:.0f} MB "
            f"there, twice that to be safe (give the container more shared memory, e.g. docker run --shm-size)")


def split_shares(items: list, parts: int) -> list[list]:
    """`items` in `parts` contiguous shares whose sizes differ by at most one, the larger first."""
    size, extra = divmod(len(items), parts)
    bounds = [0]
    for part in range(parts):
        bounds.append(bounds[-1] + size + (part < extra))
    return [items[bounds[i]:bounds[i + 1]] for i in range(parts)]


class _Worker:
    """A sampling process and our end of its pipe; `owner` is the token of the generator whose model it
    holds (a token, not the generator: the pool must not keep a generator or its weights alive)."""

    def __init__(self, context, index: int):
        self.connection, theirs = context.Pipe()
        self.process = context.Process(target=_serve, args=(theirs,), name=f"reasoner-sampler-{index}", daemon=True)
        self.process.start()
        theirs.close()
        self.owner = None

    def ask(self, message) -> tuple[str, object]:
        self.send(message)
        return self.receive()

    def send(self, message) -> None:
        """Send `message`; a process that is gone is reported by the next `receive`."""
        try:
            self.connection.send(message)
        except OSError:
            pass

    def receive(self) -> tuple[str, object]:
        """("ok", answer) or ("error", why), waiting while the process lives."""
        try:
            while not self.connection.poll(1.0):
                if not self.process.is_alive():
                    return self.gone()
            return self.connection.recv()
        except (EOFError, OSError):
            return self.gone()

    def gone(self) -> tuple[str, str]:
        self.process.join(timeout=1)
        return "error", f"it exited with code {self.process.exitcode} (killed, or out of memory?)"

    def stop(self) -> None:
        try:
            self.connection.send(None)
            self.connection.close()
        except OSError:
            pass
        self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.kill()


def _serve(connection) -> None:
    """A sampling process: take a model ("model", model, tokenizer, batch_size, drop_fraction), then answer
    each (contexts, n, params) with ("ok", samples) or ("error", traceback), until told to stop (None) or
    the other end is gone."""
    torch.set_num_threads(1)
    generator = None
    while True:
        try:
            job = connection.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        try:
            if job[0] == "model":
                generator = HFGenerator(*job[1:])
                connection.send(("ok", None))
            else:
                connection.send(("ok", generator.generate_ids(*job)))
        except Exception:  # noqa: BLE001 - the caller re-raises it with the process's traceback
            connection.send(("error", traceback.format_exc()))


_TOKENS = itertools.count()
_POOL: list[_Worker] = []  # started once per process and reused by every generator (each stage of `run`)


def _workers(count: int) -> list[_Worker]:
    """`count` live workers from the pool, starting what is missing (about 5 s: each imports torch)."""
    context = multiprocessing.get_context("spawn")  # a fork would copy torch's thread pool state
    for index, worker in enumerate(_POOL):
        if not worker.process.is_alive():
            _POOL[index] = _Worker(context, index)
    while len(_POOL) < count:
        _POOL.append(_Worker(context, len(_POOL)))
    return _POOL[:count]


@atexit.register
def _shut_down() -> None:
    for worker in _POOL:
        worker.stop()
    _POOL.clear()


class ProcessGenerator:
    """`HFGenerator`'s interface, sampling in `processes` processes over shared weights."""

    def __init__(self, model: torch.nn.Module, tokenizer, processes: int, batch_size: int = 256,
                 drop_fraction: float = 1 / 16, dtype: torch.dtype | None = None):
        if processes < 2:
            raise ValueError(f"ProcessGenerator needs at least 2 processes, got {processes}; 1 samples in this "
                             f"process (HFGenerator)")
        if next(model.parameters()).device.type != "cpu":
            raise ValueError("--sampler-processes above 1 samples on the CPU; sample a model on a GPU with 1 "
                             "(or --backend vllm)")
        if any(hasattr(p, "ds_id") for p in model.parameters()):
            raise ValueError("--sampler-processes needs the policy's whole weights, which ZeRO 3 splits over ranks; "
                             "use it with --zero-stage 2")
        self.tokenizer, self.processes = tokenizer, processes
        self.model = copy.deepcopy(model).to(dtype or next(model.parameters()).dtype).eval().share_memory()
        for parameter in self.model.parameters():
            parameter.requires_grad_(False)
        self.settings = (batch_size, drop_fraction)
        self.token = next(_TOKENS)
        self.local = HFGenerator(self.model, tokenizer, batch_size, drop_fraction)  # for calls with `stop`
        _workers(processes)  # start them now: they import while this process loads the rest

    def load_weights(self, model: torch.nn.Module) -> None:
        """Copy the policy's weights into the shared ones (cast to the sampler's dtype), in place."""
        self.model.load_state_dict(model.state_dict())

    generate = HFGenerator.generate  # render and encode the prompts, then this class's generate_ids

    def generate_ids(self, contexts: list[list[int]], n: int, params: SamplingParams,
                     stop: Callable[[list[int]], bool] | None = None) -> list[list[Sample]]:
        if stop is not None:
            return self.local.generate_ids(contexts, n, params, stop)
        workers = _workers(self.processes)
        for index, worker in enumerate(workers):
            if worker.owner != self.token:  # another generator's model, or a new process
                _check(index, worker.ask(("model", self.model, self.tokenizer, *self.settings)))
                worker.owner = self.token
        asked = []
        for index, share in enumerate(split_shares(contexts, self.processes)):
            if share:
                workers[index].send((share, n, params.with_seed(params.seed + index * SHARE_SEED_STRIDE)))
                asked.append(index)
        answers = [(index, workers[index].receive()) for index in asked]  # all read before any is raised
        return [group for index, answer in answers for group in _check(index, answer)]


def _check(index: int, answer: tuple[str, object]):
    status, payload = answer
    if status != "ok":
        raise RuntimeError(f"sampler process {index} failed: {payload}")
    return payload
