"""Two gloo ranks under the DeepSpeed launcher (ZeRO 2 and 3, CPU) take the same update as one process on the
same fixed batch, for every --algo (the critic-free variants of GRPO under ZeRO 2 only: they share GRPO's
batches and collectives, which ZeRO 3 checks with GRPO), in float32 and under bfloat16 mixed precision.

Each ZeRO stage is one launch that runs every update in turn (`distributed_step.py`), and one process runs
the same updates for comparison: the launcher and the ranks' start-up cost far more than the updates."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).with_name("distributed_step.py")
ROOT = Path(__file__).resolve().parents[1]
ALGOS = ["grpo", "rloo", "reinforce++", "reinforce++-baseline", "gspo", "cispo", "ppo", "dpo"]
# ZeRO 2 with micro-batches of 3 (three per rank, accumulated); ZeRO 3 with one micro-batch per rank, the
# only way it is exact (the engine refuses a second backward before the step under ZeRO 3).
STAGES = {2: (3, ALGOS), 3: (16, ["grpo", "ppo", "dpo"])}
CASES = [(stage, algo) for stage, (_, algos) in STAGES.items() for algo in algos]


def _env():
    env = dict(os.environ, DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    env.pop("WORLD_SIZE", None)
    return env


@pytest.fixture(scope="module")
def updates(micro_model, tmp_path_factory):
    """Per ZeRO stage, lazily: (directory of one process's updates, directory of two ranks' updates)."""
    done = {}

    def run(stage: int) -> tuple[Path, Path]:
        if stage not in done:
            micro_batch_size, algos = STAGES[stage]
            jobs = ",".join(algos + ["grpo:bfloat16"])
            one, two = tmp_path_factory.mktemp(f"one{stage}"), tmp_path_factory.mktemp(f"two{stage}")
            subprocess.run([sys.executable, str(SCRIPT), str(micro_model), str(one), str(stage), str(micro_batch_size),
                            jobs], check=True, env=_env(), cwd=ROOT, timeout=900)
            launcher = ["deepspeed", "--num_gpus", "2", "--no_local_rank", "--master_port", str(29515 + stage),
                        str(SCRIPT), str(micro_model), str(two), str(stage), str(micro_batch_size), jobs]
            result = subprocess.run(launcher, env=_env(), cwd=ROOT, timeout=1200, capture_output=True, text=True)
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
            done[stage] = one, two
        return done[stage]

    return run


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("deepspeed") is None, reason="the deepspeed launcher is not installed")
@pytest.mark.parametrize("zero_stage, algo", CASES)
def test_two_ranks_update_equals_one_process(micro_model, updates, algo, zero_stage):
    one_dir, two_dir = updates(zero_stage)
    one, two = torch.load(one_dir / f"{algo}-float32.pt"), torch.load(two_dir / f"{algo}-float32.pt")
    assert two["loss"] == pytest.approx(one["loss"], rel=1e-4, abs=1e-6)
    # Adam's first step hides the gradient's scale; the norm of the reduced gradient does not.
    assert two["grad_norm"] == pytest.approx(one["grad_norm"], rel=1e-4)
    from reasoner.modeling import load_model

    before = load_model(micro_model).state_dict()
    moved = max((one["weights"][k] - before[k]).abs().max().item() for k in before)
    assert set(one["weights"]) == set(two["weights"])
    assert moved > 1e-4
    # Adam turns a gradient element that is zero up to rounding into a step of up to the learning rate
    # either way, so a few such elements may differ; every other weight must agree.
    lr = 1e-2
    diffs = torch.cat([(two["weights"][k] - v).abs().flatten() for k, v in one["weights"].items()])
    assert diffs.max().item() <= 2 * lr
    assert (diffs > 1e-5).float().mean().item() < 0.005


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("deepspeed") is None, reason="the deepspeed launcher is not installed")
@pytest.mark.parametrize("zero_stage", sorted(STAGES))
def test_two_ranks_under_bfloat16_mixed_precision_agree_with_one_process(updates, zero_stage):
    """The default precision on a bfloat16 CPU (`--precision auto`) under ZeRO 2 and 3: autocast and the
    float32 output layer work through DeepSpeed's hooks, and two ranks agree with one process up to
    bfloat16 rounding (their gradients are summed in another order)."""
    one_dir, two_dir = updates(zero_stage)
    one, two = torch.load(one_dir / "grpo-bfloat16.pt"), torch.load(two_dir / "grpo-bfloat16.pt")
    assert two["loss"] == pytest.approx(one["loss"], rel=2e-2, abs=1e-4)
    assert two["grad_norm"] == pytest.approx(one["grad_norm"], rel=2e-2)
    assert all(v.dtype == torch.float32 for v in two["weights"].values())
