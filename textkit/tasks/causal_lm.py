"""Causal language modelling with the decoder-only stack (``DecoderLM``): fine-tuning a
checkpoint (``init_from``: GPT-2, Llama, Mistral, Qwen2/3, Gemma, SmolLM directories) or
training a preset from scratch, on raw text.

Data: each text file is a list of documents (``documents``: "lines", one per line; "paragraphs",
separated by blank lines; "wikitext", WikiText's `` = Title = `` headings start documents).
Every document is tokenized (the checkpoint's ``LMTokenizer``; without a checkpoint a byte-level
BPE of ``vocab_size`` ids is trained on the training text with HF ``tokenizers``), BOS (when the
tokenizer has one) before it and EOS after it, and the documents are concatenated and packed
into rows of ``max_length`` + 1 tokens (inputs are a row's first ``max_length`` tokens, targets
its last ``max_length``); rows follow each other without overlap, so every token is a target
once. The last row is padded, and padding is never in the loss (weight 0).

Loss: the summed next-token NLL over the targets (``fit`` divides by the target count).
``evaluate`` gives the perplexity ``exp(total NLL / targets)`` over every token of the split.
The optimizer is AdamW with gradient clipping under ``scale_by_budget_schedule`` (warm-up, then
linear decay that ends when the run does, time budgets included), with dynamic loss scaling
for float16 policies. ``export`` writes the model with ``save_pretrained`` (transformers loads
it).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from textkit.data import DataLoader, FixedBucketSampler, toy_lm_corpus
from textkit.data.datasets import read_text
from textkit.errors import ConfigError
from textkit.models import get_model
from textkit.precision import Policy
from textkit.settings import flag
from textkit.tasks.base import LearningRate, LossFn, Params, Task, TaskConfig, register_task
from textkit.tasks.lora import LoraSettings
from textkit.training.optim import clip_by_global_norm, learning_rate_of, with_loss_scaling
from textkit.training.schedules import scale_by_budget_schedule

__all__ = ["CausalLMConfig", "CausalLMTask", "read_documents"]

DOCUMENT_LAYOUTS = ("lines", "paragraphs", "wikitext")
_HEADING = re.compile(r"^ = [^=].* = $")


def read_documents(path: str | Path, layout: str) -> list[str]:
    """The documents of a text file: ``layout`` "lines" (one per non-empty line),
    "paragraphs" (blank-line separated) or "wikitext" (a document per `` = Title = ``
    heading, its lines joined with newlines)."""
    path = Path(path)
    try:
        text = read_text(path)         # bytes that are not UTF-8: DataFileError naming the line
    except OSError as err:
        raise ConfigError(f"{path}: cannot be read ({err.strerror})") from None
    if layout == "lines":
        return [line for line in text.splitlines() if line.strip()]
    if layout == "paragraphs":
        return [block.strip() for block in re.split(r"\n\s*\n", text) if block.strip()]
    documents: list[list[str]] = []
    for line in text.splitlines():
        if _HEADING.match(line) or not documents:
            documents.append([])
        if line.strip():
            documents[-1].append(line.strip())
    return ["\n".join(lines) for lines in documents if lines]


@dataclasses.dataclass(frozen=True)
class CausalLMConfig(TaskConfig):
    """A causal-LM run (``examples/language_model/train.py --init-from DIR``). Each field is
    the recipe flag of the same name."""

    tiny: ClassVar[Mapping[str, Any]] = {"max_length": 16, "batch_size": 4, "vocab_size": 300,
                                         "toy_sentences": 200}
    runs_name: ClassVar[str] = "causal_lm"

    model: str = flag("llama_tiny", "a causal_lm preset, for training from scratch (ignored "
                      "with --init-from)", group="model")
    init_from: str | None = flag(None, "a decoder-only checkpoint directory to fine-tune "
                                 "(its tokenizer and architecture)", group="model")
    train_file: str | None = flag(None, "training text (instead of --dataset)", group="data")
    valid_file: str | None = flag(None, "validation text", group="data")
    test_file: str | None = flag(None, "test text, scored at the end", group="data")
    documents: str = flag("lines", "what a document is in the text files: lines, paragraphs "
                          "(blank-line separated) or wikitext (= Title = headings)",
                          group="data")
    max_length: int = flag(256, "tokens per packed row", group="data")
    vocab_size: int = flag(8000, "size of the BPE trained on the data without --init-from",
                           group="data")
    toy_sentences: int = flag(4000, "sentences of the generated toy corpus's train split",
                              group="data")
    batch_size: int = flag(8, "rows per batch", group="training")
    lr: float = flag(5e-5, "peak learning rate", group="training")
    warmup: float = flag(0.1, "share of the steps spent warming up", group="training")
    weight_decay: float = flag(0.01, "AdamW weight decay", group="training")
    clip_norm: float = flag(1.0, "gradient clipping by global norm", group="training")
    export: bool = flag(True, "write the best model with save_pretrained to <run>/export "
                        "(with LoRA: the adapter in PEFT's format)", group="output")
    lora: LoraSettings = LoraSettings()

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.documents not in DOCUMENT_LAYOUTS:
            raise ConfigError(f"--documents {self.documents!r}: expected one of "
                              f"{DOCUMENT_LAYOUTS}")
        self.lora.check(exports=self.export, base=self.init_from, base_flag="--init-from",
                        int8_base=True)
        if self.max_length < 2 or self.batch_size < 1:
            raise ConfigError(f"need --max-length >= 2 and --batch-size >= 1; got "
                              f"{self.max_length} and {self.batch_size}")


@register_task
class CausalLMTask(Task):
    """Causal language modelling of packed documents (module docstring)."""

    name = "causal_lm"
    config_class = CausalLMConfig
    eval_metric = "ppl"
    eval_mode = "min"

    def __init__(self, config: CausalLMConfig, run: Any, log: Any = None):
        super().__init__(config, run, log)
        self.tokenizer: Any = None
        self.pretrained: Any = None

    @property
    def splits(self) -> tuple[str, ...]:
        c = self.config
        if c.train_file:
            return tuple(s for s, f in (("train", c.train_file), ("valid", c.valid_file),
                                        ("test", c.test_file)) if f)
        return super().splits

    # ------------------------------------------------------------------ data
    def read_split(self, split: str) -> list[str]:
        c = self.config
        path = {"train": c.train_file, "valid": c.valid_file, "test": c.test_file}[split] \
            if c.train_file else None
        if path:
            documents = read_documents(path, c.documents)
        elif c.dataset == "toy":
            size = c.toy_sentences if split == "train" else max(c.toy_sentences // 10, 8)
            documents = toy_lm_corpus(split, size)
        else:
            raise ConfigError(f"--dataset {c.dataset}: give the text files with --train-file "
                              f"and --valid-file")
        if not documents:
            raise ConfigError(f"the {split} split ({path or c.dataset}) has no document")
        return documents

    def prepare(self, data: Mapping[str, list[str]]) -> None:
        """The tokenizer: the checkpoint's, or a byte-level BPE trained on the training
        documents (saved in the run directory)."""
        from textkit.pretrained import load_pretrained

        c = self.config
        if c.init_from:
            try:
                self.pretrained = load_pretrained(c.init_from, policy=Policy.parse(c.precision),
                                                  **c.overrides)
            except (ValueError, TypeError) as err:
                raise ConfigError(f"--init-from: {err}") from None
            if self.pretrained.kind != "causal_lm":
                raise ConfigError(f"--init-from {c.init_from}: its kind is "
                                  f"{self.pretrained.kind}, not a decoder-only language model "
                                  f"(causal_lm)")
            self.tokenizer = self.pretrained.tokenizer
            limit = self.pretrained.model.config.max_positions
            if c.max_length > limit:
                raise ConfigError(f"--max-length {c.max_length} is above the {limit} positions "
                                  f"of {c.init_from}")
            return
        self.tokenizer = self._train_tokenizer(data["train"])

    def _train_tokenizer(self, documents: Sequence[str]) -> Any:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        from textkit.pretrained.lm_tokenizer import LMTokenizer

        directory = self.run.root / "tokenizer"
        if not (directory / "tokenizer.json").is_file():
            bpe = Tokenizer(models.BPE())
            bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
            bpe.decoder = decoders.ByteLevel()
            trainer = trainers.BpeTrainer(
                vocab_size=self.config.vocab_size, special_tokens=["<s>", "</s>", "<pad>"],
                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
            bpe.train_from_iterator(documents, trainer)
            directory.mkdir(parents=True, exist_ok=True)
            bpe.save(str(directory / "tokenizer.json"))
            (directory / "tokenizer_config.json").write_text(
                '{"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"}\n')
        return LMTokenizer.from_directory(directory)

    def rows(self, documents: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Packed rows int32[R, max_length + 1] and their target weights float32[R, max_length]
        (0 at the padding of the last row)."""
        tok = self.tokenizer
        head = [tok.bos_id] if tok.bos_id is not None else []
        tail = [tok.eos_ids[0]] if tok.eos_ids else []
        pieces = [np.asarray([*head, *ids, *tail], np.int32)
                  for ids in tok.encode_batch(list(documents), add_special_tokens=False)]
        stream = np.concatenate(pieces) if pieces else np.zeros(0, np.int32)
        width = self.config.max_length
        count = max(1, math.ceil((len(stream) - 1) / width))
        padded = np.full(count * width + 1, self.pad_id, np.int32)
        padded[:len(stream)] = stream
        rows = np.lib.stride_tricks.sliding_window_view(padded, width + 1)[::width][:count]
        weights = (np.arange(count * width).reshape(count, width) + 1 < len(stream))
        return np.ascontiguousarray(rows), weights.astype(np.float32)

    @property
    def pad_id(self) -> int:
        tok = self.tokenizer
        return tok.pad_id if tok.pad_id is not None else (tok.eos_ids[0] if tok.eos_ids else 0)

    def make_loader(self, data: Sequence[str], *, train: bool) -> DataLoader:
        rows, weights = self.rows(data)
        c = self.config
        # each process feeds its share of every global batch (batch_size rows in all)
        processes = jax.process_count() if train else 1
        if c.batch_size % processes:
            raise ConfigError(f"--batch-size {c.batch_size} is not a multiple of the "
                              f"{processes} processes")
        sampler = FixedBucketSampler(np.full(len(rows), c.max_length + 1),
                                     c.batch_size // processes, num_buckets=1, shuffle=train,
                                     seed=c.seed, round_to=None, last_batch="pad",
                                     num_shards=processes,
                                     shard_id=jax.process_index() if train else 0)
        rows_per_batch = c.batch_size // processes

        def batchify(indices: Sequence[int], shape: Any = None) -> dict[str, np.ndarray]:
            real = list(indices)
            block = np.full((rows_per_batch, c.max_length + 1), self.pad_id, np.int32)
            mask = np.zeros((rows_per_batch, c.max_length), np.float32)
            block[:len(real)], mask[:len(real)] = rows[real], weights[real]
            return {"tokens": block[:, :-1], "targets": block[:, 1:], "weights": mask}

        return DataLoader(np.arange(len(rows)), sampler, batchify)

    # ------------------------------------------------------------------ model
    def build_model(self) -> nn.Module:
        if self.pretrained is not None:
            return self.pretrained.model
        c = self.config
        return get_model(c.model, **{"vocab_size": len(self.tokenizer), "pad_id": self.pad_id,
                                     "policy": Policy.parse(c.precision),
                                     "max_position_embeddings": max(c.max_length, 8),
                                     **c.overrides})

    def init_params(self, model: nn.Module, rng: jax.Array) -> Params:
        if self.pretrained is not None:
            return jax.tree_util.tree_map(jnp.asarray, self.pretrained.params)
        return model.init(rng, jnp.zeros((1, 4), jnp.int32))["params"]

    # ------------------------------------------------------------------ training
    def make_loss(self, model: nn.Module) -> LossFn:
        def loss_fn(params: Params, batch: Mapping[str, Any], rng: jax.Array | None):
            deterministic = rng is None
            rngs = {} if deterministic else {"dropout": rng}
            logits = model.apply({"params": params}, batch["tokens"],
                                 deterministic=deterministic, rngs=rngs)       # [B, T, V]
            nll = -jnp.take_along_axis(jax.nn.log_softmax(logits.astype(jnp.float32)),
                                       batch["targets"][..., None], -1)[..., 0]  # [B, T]
            weights = batch["weights"]
            return (nll * weights).sum(), (weights.sum(), {})

        return loss_fn

    def optimizer(self, total_steps: int) -> tuple[optax.GradientTransformation, LearningRate]:
        c = self.config
        tx = optax.chain(clip_by_global_norm(c.clip_norm), optax.scale_by_adam(),
                         optax.add_decayed_weights(c.weight_decay),
                         scale_by_budget_schedule(c.lr, 0, max(total_steps, 1),
                                                  decay_fraction=1.0, warmup_fraction=c.warmup))
        return with_loss_scaling(tx, c.precision), lambda state: learning_rate_of(
            state.opt_state)

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, model: nn.Module, params: Params,
                 data: Sequence[str]) -> dict[str, float]:
        """Perplexity over every token of ``data`` (``exp(total NLL / targets)``)."""
        loss_fn = jax.jit(self.make_loss(model))
        total, count = 0.0, 0.0
        for batch in self.make_loader(data, train=False):
            loss, (weight, _) = loss_fn(params, batch, None)
            total, count = total + float(loss), count + float(weight)
        return {"ppl": math.exp(total / max(count, 1.0)), "nll": total / max(count, 1.0),
                "tokens": count}

    def export(self, model: nn.Module, params: Params, directory: str | Path) -> Path:
        """The model and tokenizer as a checkpoint directory transformers loads."""
        from textkit.pretrained import save_pretrained

        generation = self.pretrained.generation if self.pretrained is not None else None
        return save_pretrained(model, jax.tree_util.tree_map(np.asarray, params),
                               self.tokenizer, directory, generation=generation)
