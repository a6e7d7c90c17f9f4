"""Loading any Hugging Face causal LM, and building the tiny built-in one.

The tiny model is an ordinary Llama-style model with a byte-level BPE tokenizer trained on the built-in
task corpus and a chat template, saved in Hugging Face format so that everything downstream takes the
same path as a real model directory.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

log = logging.getLogger(__name__)

EOS, PAD = "<|end|>", "<|pad|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

PRESETS: dict[str, dict] = {
    # ~2M parameters: big enough to learn the built-in families, small enough for RL on two CPU cores.
    "tiny": dict(hidden_size=192, intermediate_size=512, num_hidden_layers=4, num_attention_heads=6,
                 num_key_value_heads=2, vocab_size=768, max_position_embeddings=512),
    # For tests: builds and runs in well under a second.
    "micro": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, vocab_size=384, max_position_embeddings=256),
}


class ModelDirError(ValueError):
    """A path given as a model directory is not one; the message says what is missing."""


def build_tokenizer(texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """Byte-level BPE that splits digits one by one (arithmetic stays learnable) with a chat template."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    specials = [EOS, PAD, "<|user|>", "<|assistant|>", "<|system|>"]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=PAD,
                                   chat_template=CHAT_TEMPLATE, padding_side="left")


def init_model(output: str | Path, preset: str = "tiny", seed: int = 0) -> Path:
    """Write a randomly initialised model and its tokenizer to `output` in Hugging Face format."""
    from data.synthetic import corpus

    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; presets: {', '.join(PRESETS)}")
    torch.manual_seed(seed)
    shape = PRESETS[preset]
    tokenizer = build_tokenizer(corpus(seed), shape["vocab_size"])
    config = LlamaConfig(**shape, tie_word_embeddings=True, bos_token_id=None,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    output = Path(output)
    model.save_pretrained(output)
    tokenizer.save_pretrained(output)
    n_params = sum(p.numel() for p in model.parameters())
    log.info("init-model: %s preset, %.2fM parameters, vocab %d -> %s", preset, n_params / 1e6,
             len(tokenizer), output)
    return output


def check_model_dir(path: str | Path) -> Path:
    path = Path(path)
    if not path.is_dir():
        raise ModelDirError(f"{path}: not a model directory (no such directory)")
    if not (path / "config.json").is_file():
        raise ModelDirError(f"{path}: not a model directory (no config.json; expected a Hugging Face "
                            "causal-LM directory with config, weights and tokenizer)")
    if not any(path.glob("*.safetensors")) and not any(path.glob("*.bin")):
        raise ModelDirError(f"{path}: not a model directory (no weights: *.safetensors or *.bin)")
    if not any((path / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        raise ModelDirError(f"{path}: not a model directory (no tokenizer files)")
    return path


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerFast:
    tokenizer = AutoTokenizer.from_pretrained(check_model_dir(path))
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(path: str | Path, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"):
    """Load a causal LM from a directory, with an error naming the directory if it is not one."""
    path = check_model_dir(path)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    except (OSError, ValueError) as exc:
        raise ModelDirError(f"{path}: could not load a causal LM: {exc}") from exc
    return model.to(device)


def render_prompt(tokenizer, prompt: str) -> str:
    """The prompt as the model sees it: through its chat template when it has one."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                             add_generation_prompt=True)
    return prompt
