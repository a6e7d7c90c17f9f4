"""Tool-integrated reasoning: a sample may run Python in the sandbox mid-answer (`--tools python`).

Format. The policy opens a block with ```python (or ```py) on a line of its own and closes it with ``` at
the start of a line. As soon as it samples the closing fence, that sample pauses, the block runs in the
sandbox, and what it printed comes back as an output block, after which the sample goes on:

    ```python
    print(123 * 456)
    ```
    ```output
    56088
    ```

At most `max_tool_calls` blocks run per sample; past that a closed block is plain text. An output block
holds the program's stdout, then, if it failed, the last line of its stderr (`ZeroDivisionError: division
by zero`) or what stopped it (`TimeoutError: ...`, `MemoryError: ...`, `killed: output limit`), cut to
OUTPUT_CHARS characters.

Isolation. A call is an ordinary sandbox job (`sandbox/`, the code verifier's isolation: namespaces,
seccomp, no network, a process cloned per program), with a short limit: TOOL_TIMEOUT_S of CPU time (the
wall clock stops it at twice that), TOOL_MEMORY_MB, and OUTPUT_LIMIT bytes of output, past which the
program is killed. Whatever the code does (loop, flood, attack the host) ends as an output block, and the
sample goes on.

State. Every call is a fresh program: the sample's earlier blocks that ran without error are run again
first, their output discarded, then the new block. Later blocks so see earlier definitions, as in a
notebook, but no process outlives a call. Why not a live session per sample: a call stays one ordinary
sandbox job (nothing of a call is left for a later call or another sample to read or tamper with), the
calls of a batch spread over every worker of the pool, a sample's calls are reproducible from its text
alone, and nothing has to be kept alive per sample across generation rounds. The cost: earlier blocks run
again within the call's time limit, and code whose result changes between runs (clocks, unseeded random
numbers) may see other values the second time.

Tokens in, tokens out. A sample's `token_ids` are the ids the policy sampled with, between them, the ids of
each output block as the tokenizer encodes that block alone, special tokens split as plain text (a program
cannot print an end of sequence or a chat role into the context). Nothing is re-tokenised: training sees
exactly the ids the policy was conditioned on, and `loss_mask` is 0 on the output blocks' ids (no loss,
KL, entropy or ratio; their `logprobs` are 0). The response budget (`max_new_tokens`) counts both.
Verifiers grade `policy_text`, the response with each output block replaced by a line break (what the
policy wrote after a block starts a line, as in its context): a reward depends only on tokens the policy
chose.

Scheduling. Generation runs in rounds: every live sample generates until it ends or closes a block (a
sample that pauses leaves the batch at once), then the round's calls run together on the sandbox pool,
then the samples that called resume from their whole token context (the prompt's KV cache is computed
again). A sample waits at most for the slowest sample of its round; one that never calls is done after
the first round.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
import re
import time
from dataclasses import dataclass, field

from reasoner.config import SamplingParams
from reasoner.generation import Sample
from reasoner.modeling import render_prompt
from sandbox import Sandbox, default_sandbox, job

TOOL_TIMEOUT_S = 2.0  # CPU seconds of a call, the replay of earlier blocks included
TOOL_MEMORY_MB = 512
OUTPUT_LIMIT = 64 << 10  # bytes of stdout (and of stderr) a call may write before it is killed
OUTPUT_CHARS = 300  # characters of output shown to the policy
ERROR_CHARS = 200  # ... and of the error line after them
TOKENS_PER_CHAR = 0.5  # ... and at most this many tokens per character shown (a wide character takes several)

_OPEN = re.compile(r"^```(?:python|py|python3)[ \t]*\n", re.M)
_CLOSE = re.compile(r"(?:^|\n)```\s*\Z")
_OUTPUT_BLOCK = re.compile(r"\n?```output\n.*?\n```\n", re.S)  # as `output_block` writes it


def closed_block(text: str) -> str | None:
    """The code of the ```python block that `text` ends by closing, or None."""
    opens = list(_OPEN.finditer(text))
    if not opens:
        return None
    body = text[opens[-1].end():]
    close = _CLOSE.search(body)
    return None if close is None else body[:close.start()]


def tool_program(earlier: list[str], code: str) -> str:
    """The program of a call: the earlier blocks run again silently (an `exit()` in one ends only that
    block), then `code`; tracebacks name the blocks."""
    lines = ["import contextlib as _tool_contextlib, io as _tool_io"]
    if earlier:
        lines.append("with _tool_contextlib.redirect_stdout(_tool_io.StringIO()), "
                     "_tool_contextlib.redirect_stderr(_tool_io.StringIO()):")
        for i, block in enumerate(earlier):
            lines += ["    with _tool_contextlib.suppress(SystemExit):",
                      f"        exec(compile({block!r}, '<block {i + 1}>', 'exec'))"]
    lines.append(f"exec(compile({code!r}, '<block {len(earlier) + 1}>', 'exec'))")
    return "\n".join(lines) + "\n"


def output_text(result: dict, cut: Callable[[str, int], str] = lambda text, chars: text[:chars]) -> str:
    """What the policy is shown of a sandbox result: stdout, then what went wrong, each cut by `cut(text,
    chars)` (the tool generator cuts in tokens too)."""
    out = result.get("stdout", "")
    shown = cut(out, OUTPUT_CHARS)
    if shown != out:
        out = f"{shown}\n... ({len(out) - len(shown)} more characters)"
    status = result["status"]
    if status == "ok":
        return out
    if status == "error":
        lines = result.get("stderr", "").strip().splitlines()
        error = lines[-1] if lines else result.get("reason") or "error"
    elif status == "timeout":
        error = f"TimeoutError: the code ran past the tool's limit of {TOOL_TIMEOUT_S:g} s"
    elif status == "memory":
        error = f"MemoryError: the code went past the tool's limit of {TOOL_MEMORY_MB} MB"
    else:
        error = f"killed: {result.get('reason') or status}"
    return (out if not out or out.endswith("\n") else out + "\n") + cut(error, ERROR_CHARS)


def output_block(output: str, after_newline: bool) -> str:
    """The text of an output block; it starts a line of its own (with a newline of its own if need be)."""
    return f"{'' if after_newline else chr(10)}```output\n{output}{'' if output.endswith(chr(10)) else chr(10)}```\n"


def tool_segments(text: str) -> list[tuple[str, bool]]:
    """A written response (a worked solution for sft) as (text, written by the tool) segments: its output
    blocks are the tool's, a newline right before one included; the rest is the policy's."""
    segments, start = [], 0
    for block in _OUTPUT_BLOCK.finditer(text):
        segments += [(text[start:block.start()], False), (block.group(), True)]
        start = block.end()
    return [(piece, by_tool) for piece, by_tool in segments + [(text[start:], False)] if piece]


@dataclass
class ToolCall:
    """One code block a sample ran."""

    code: str
    status: str  # the sandbox's: "ok", "error", "timeout", "memory" or "killed"
    output: str  # the output block's contents, as the policy was shown them
    seconds: float  # its share of the wall time its round's calls took together on the pool


@dataclass
class _Row:
    """A sample being built: its tokens so far, segment by segment."""

    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)  # decoded segments, policy's and tool's in turn
    policy_texts: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    finish: str = "length"

    def add(self, ids: list[int], logprobs: list[float], sampled: bool, text: str) -> None:
        self.ids += ids
        self.logprobs += logprobs
        self.mask += [int(sampled)] * len(ids)
        self.texts.append(text)
        # The policy's text with a line break where each output block was: what it wrote after a block
        # starts a line, as in its context, so a fence it opens there is seen as one by the graders.
        self.policy_texts.append(text if sampled else "\n")

    def sample(self) -> Sample:
        return Sample(self.ids, "".join(self.texts), self.logprobs, self.finish, self.mask,
                      "".join(self.policy_texts), self.calls)


class ToolGenerator:
    """A `Generator` whose samples may call the Python tool; wraps a backend with `generate_ids` (hf.py)."""

    def __init__(self, backend, tokenizer, max_tool_calls: int = 4, sandbox: Sandbox | None = None):
        if max_tool_calls < 0:
            raise ValueError(f"--max-tool-calls must be 0 or more, got {max_tool_calls}")
        self.backend, self.tokenizer, self.max_tool_calls = backend, tokenizer, max_tool_calls
        self._sandbox = sandbox
        # A fence is closed only by a token with a backtick in it: only those need the text decoded.
        pieces = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
        self.backtick_ids = frozenset(i for i, piece in enumerate(pieces) if "`" in piece)

    @property
    def sandbox(self) -> Sandbox:
        return self._sandbox or default_sandbox()

    def load_weights(self, model) -> None:
        self.backend.load_weights(model)

    def closes_block(self, tokens: list[int]) -> bool:
        """Does this segment of a response end by closing a ```python block? (the backend's stop test)"""
        return tokens[-1] in self.backtick_ids and closed_block(self.decode(tokens)) is not None

    def cut(self, text: str, chars: int) -> str:
        """`text` cut to `chars` characters and to TOKENS_PER_CHAR tokens per character: wide characters
        must not buy a flood of tool tokens."""
        text, limit = text[:chars], int(chars * TOKENS_PER_CHAR)
        ids = self.encode(text)
        for keep in range(min(len(ids), limit), -1, -1):  # once, unless a cut character re-tokenises longer
            kept = self.decode(ids[:keep]).rstrip("\ufffd") if keep < len(ids) else text
            if len(self.encode(kept)) <= limit:
                return kept
        return ""

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False, split_special_tokens=True).input_ids

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def generate(self, prompts: list[str], n: int, params: SamplingParams) -> list[list[Sample]]:
        prompt_ids = [self.tokenizer(render_prompt(self.tokenizer, p), add_special_tokens=False).input_ids
                      for p in prompts]
        rows = [_Row() for _ in range(len(prompts) * n)]
        active, contexts, width = list(range(len(rows))), prompt_ids, n
        if not rows:
            return []
        for call_round in range(self.max_tool_calls + 1):
            budget = max(params.max_new_tokens - len(rows[i].ids) for i in active)
            round_params = dataclasses.replace(params, max_new_tokens=budget, seed=params.seed + 7919 * call_round)
            stop = self.closes_block if call_round < self.max_tool_calls else None
            outs = [s for group in self.backend.generate_ids(contexts, width, round_params, stop) for s in group]
            calls = [i for i, out in zip(active, outs) if self._extend(rows[i], out, params.max_new_tokens)]
            if not calls:
                break
            codes = [closed_block(rows[i].policy_texts[-1]) for i in calls]
            jobs = [job("run", TOOL_TIMEOUT_S, TOOL_MEMORY_MB, output_limit=OUTPUT_LIMIT,
                        source=tool_program([c.code for c in rows[i].calls if c.status == "ok"], code))
                    for i, code in zip(calls, codes)]
            started = time.monotonic()
            results = self.sandbox.map(jobs)
            share = (time.monotonic() - started) / len(jobs)
            for i, code, result in zip(calls, codes, results):
                self._answer(rows[i], code, result, share, params.max_new_tokens)
            active = [i for i in calls if rows[i].finish == "paused"]
            if not active:
                break
            contexts, width = [prompt_ids[i // n] + rows[i].ids for i in active], 1
        return [[rows[i].sample() for i in range(g * n, (g + 1) * n)] for g in range(len(prompts))]

    def _extend(self, row: _Row, out: Sample, max_new_tokens: int) -> bool:
        """Add a round's sampled tokens to `row` (cut to its budget); True if it paused for a call."""
        room = max_new_tokens - len(row.ids)
        ids, logprobs, finish, text = out.token_ids, out.logprobs, out.finish_reason, out.text
        if len(ids) > room or (finish == "paused" and len(ids) == room):  # no room left for the output
            ids, logprobs, finish = ids[:room], logprobs[:room], "length"
            text = self.decode(ids)
        row.add(ids, logprobs, True, text)
        row.finish = finish
        return finish == "paused"

    def _answer(self, row: _Row, code: str, result: dict, seconds: float, max_new_tokens: int) -> None:
        """Append a call's output block to `row`, as tokens of its own (cut to the budget)."""
        shown = output_text(result, self.cut)
        block = output_block(shown, row.texts[-1].endswith("\n"))
        ids = self.encode(block)
        room = max_new_tokens - len(row.ids)
        if len(ids) >= room:
            ids, row.finish = ids[:room], "length"
        row.add(ids, [0.0] * len(ids), False, self.decode(ids))
        row.calls.append(ToolCall(code, result["status"], shown, seconds))
