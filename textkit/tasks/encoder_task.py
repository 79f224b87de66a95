"""What the encoder fine-tuning tasks share (sequence classification, question answering, token
classification): the ``--pretrained DIR`` checkpoint or a preset with a tokenizer trained on the
data, AdamW with warm-up and linear decay (no weight decay on biases and norms, optional
layer-wise learning-rate decay, dynamic loss scaling under ``mixed_float16``), token-budget
buckets whose lengths (multiples of 4) pad each split least (``least_padding_keys``), a jitted
prediction function and the export.

Batches (``textkit.batchify.EncoderBatchify``) carry transformers' names: ``input_ids``,
``attention_mask``, ``token_type_ids`` (families with token types) int32 [B, T], the task's
targets, ``weights`` float32 [B] (0 at the dummy rows that keep a bucket's shape) and ``index``
int32 [B] (the example or feature each row holds).

A preset without ``--pretrained`` (``--model bert_mini``) gets a WordPiece vocabulary of
``--vocab-size`` entries trained on the training texts (``tokenizers``), with the special tokens
of its family; that is how the toy data runs with no download.
"""

from __future__ import annotations

import abc
import dataclasses
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from textkit.batchify import EncoderBatchify
from textkit.data import DataLoader, FixedBucketSampler, get_dataset, get_dataset_info
from textkit.errors import ConfigError
from textkit.models import Encoder, get_model
from textkit.precision import Policy
from textkit.pretrained import EncoderTokenizer, load_pretrained, save_pretrained
from textkit.pretrained.encoders import encoder_config
from textkit.pretrained.files import read_config
from textkit.settings import flag
from textkit.tasks.base import LearningRate, Params, Task, TaskConfig
from textkit.tasks.lora import LoraSettings
from textkit.training.loop import FitConfig
from textkit.training.optim import clip_by_global_norm, learning_rate_of, with_loss_scaling
from textkit.training.run_dir import RunDir
from textkit.training.schedules import scale_by_budget_schedule

__all__ = [
    "EncoderTask", "EncoderTaskConfig", "adamw", "bucket_padding", "layer_depths",
    "token_buckets",
    "train_wordpiece",
]

_SPECIALS = {
    "bert": ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"),
    "roberta": ("<s>", "<pad>", "</s>", "<unk>", "<mask>"),
}
"""Special tokens of a trained vocabulary, in id order: (pad, unk, cls, sep, mask) by name for
WordPiece families, RoBERTa's order (pad id 1) for byte-level families."""


def train_wordpiece(texts: Iterable[str], vocab_size: int, architecture: str,
                    lowercase: bool = True) -> EncoderTokenizer:
    """A WordPiece ``EncoderTokenizer`` of at most ``vocab_size`` entries trained on ``texts``,
    with the special tokens and the single / pair templates of ``architecture``'s family."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from tokenizers.trainers import WordPieceTrainer

    roberta = architecture in ("roberta", "xlm-roberta")
    specials = _SPECIALS["roberta" if roberta else "bert"]
    pad, unk, cls, sep = (specials[i] for i in ((1, 3, 0, 2) if roberta else (0, 1, 2, 3)))
    tokenizer = Tokenizer(models.WordPiece(unk_token=unk))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    tokenizer.train_from_iterator(texts, WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=list(specials), show_progress=False))
    ids = {t: tokenizer.token_to_id(t) for t in (cls, sep)}
    if roberta:
        pair = f"{cls} $A {sep} {sep} $B {sep}"
    else:
        pair = f"{cls} $A {sep} $B:1 {sep}:1"
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}", pair=pair, special_tokens=list(ids.items()))
    return EncoderTokenizer(tokenizer, pad_token=pad, with_token_types=architecture in (
        "bert", "electra"))


MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids", "position_ids", "segment_ids",
                "example_starts")


def model_inputs(batch: Mapping[str, Any]) -> dict[str, Any]:
    """The arrays of an encoder batch that the model takes (``MODEL_INPUTS`` it has)."""
    return {k: batch[k] for k in MODEL_INPUTS if k in batch}


def token_buckets(lengths: Sequence[int], batch_tokens: int, num_buckets: int, *,
                  shuffle: bool = False, seed: int = 0,
                  rows_multiple: int = 1) -> FixedBucketSampler:
    """The fine-tuning tasks' batches of ``lengths`` (tokens per example): ``num_buckets``
    buckets at the lengths (multiples of 4) that pad these examples least, each holding
    ``batch_tokens`` padded tokens (rows a multiple of ``rows_multiple``)."""
    return FixedBucketSampler(lengths, batch_tokens, num_buckets=num_buckets,
                              batch_size_unit="tokens", bucket_scheme="least_padding",
                              round_to=4, shuffle=shuffle, seed=seed,
                              batch_rows_multiple=rows_multiple, membership="padded")


# ---------------------------------------------------------------------------------- optimizer
def layer_depths(params: Params, num_layers: int) -> Params:
    """Per parameter its depth for layer-wise learning-rate decay: 0 for the embeddings
    (names with ``embed``), ``i + 1`` inside ``layer_i``, ``num_layers + 1`` for the rest (the
    heads and the pooler)."""
    def depth(path: tuple[Any, ...], _: Any) -> int:
        top = str(getattr(path[0], "key", path[0]))
        match = re.fullmatch(r"layer_(\d+)", top)
        if match:
            return int(match.group(1)) + 1
        return 0 if "embed" in top else num_layers + 1
    return jax.tree_util.tree_map_with_path(depth, params)


def _decays(params: Params) -> Params:
    """True where AdamW's weight decay applies: every kernel and embedding table; no biases,
    no norm scales."""
    def decays(path: tuple[Any, ...], _: Any) -> bool:
        names = [str(getattr(p, "key", p)) for p in path]
        return names[-1] not in ("bias", "scale") and not any("norm" in n for n in names)
    return jax.tree_util.tree_map_with_path(decays, params)


def _scale_by_tree(scales: Params) -> optax.GradientTransformation:
    """Multiply each update by its constant scale (a params-shaped tree of floats)."""
    def update(updates, state, params=None):
        return jax.tree_util.tree_map(lambda u, s: u * s, updates, scales), state
    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def adamw(params: Params, *, learning_rate: float, total_steps: int, warmup: float,
          weight_decay: float, num_layers: int, layer_decay: float | None = None,
          policy: Policy | str = "float32", max_grad_norm: float | None = 1.0,
          ) -> tuple[optax.GradientTransformation, LearningRate]:
    """``(optimizer, learning_rate)``: gradient clipping to ``max_grad_norm``, AdamW (betas
    0.9 / 0.999, eps 1e-6) with ``weight_decay`` on kernels and embeddings only, the rate rising
    linearly over the first ``warmup`` fraction of the run and falling linearly to 0 at its end
    (``scale_by_budget_schedule``: ``fit`` moves the end from ``total_steps`` to where a time
    budget stops the run, warm-up included); ``layer_decay`` multiplies the rate of depth ``d``
    (``layer_depths``) by ``layer_decay ** (num_layers + 1 - d)``; dynamic loss scaling by
    ``policy``."""
    parts = [clip_by_global_norm(max_grad_norm)] if max_grad_norm else []
    parts += [optax.scale_by_adam(b1=0.9, b2=0.999, eps=1e-6),
              optax.add_decayed_weights(weight_decay, mask=_decays)]
    if layer_decay is not None:
        if not 0.0 < layer_decay <= 1.0:
            raise ConfigError(f"--layer-decay {layer_decay}: expected 0 < layer_decay <= 1")
        depths = layer_depths(params, num_layers)
        parts.append(_scale_by_tree(jax.tree_util.tree_map(
            lambda d: float(layer_decay ** (num_layers + 1 - d)), depths)))
    parts.append(scale_by_budget_schedule(learning_rate, 0, max(total_steps, 1),
                                          decay_fraction=1.0, warmup_fraction=warmup))
    tx = with_loss_scaling(optax.chain(*parts), policy)
    return tx, lambda state: learning_rate_of(state.opt_state)


# ----------------------------------------------------------------------------------- config
@dataclasses.dataclass(frozen=True)
class EncoderTaskConfig(TaskConfig):
    """The settings of every encoder fine-tuning recipe (``examples/finetune/``). Each field is
    the recipe flag of the same name (``batch_tokens`` is ``--batch-tokens``)."""

    pretrained: str | None = flag(
        None, "a Hugging Face checkpoint directory (config.json, weights, tokenizer files); "
        "without it, --model names a preset trained from scratch with a WordPiece vocabulary "
        "learnt on the training texts", group="model")
    init: str = flag("pretrained", "pretrained: start from --pretrained's weights; random: "
                     "fresh weights in the architecture of its config.json (or of --model "
                     "when DIR holds tokenizer files only)",
                     group="model", choices=("pretrained", "random"))
    model: str = flag("bert_tiny", "an encoder preset (textkit.models.list_models('encoder')), "
                      "used without --pretrained", group="model")
    vocab_size: int = flag(8000, "WordPiece vocabulary trained for a --model preset",
                           group="model")
    cased: bool = flag(False, "keep letter case in the WordPiece vocabulary trained for a "
                       "--model preset (default: lowercased, as bert-base-uncased)",
                       group="model")
    max_length: int = flag(128, "tokens per example (longer ones are truncated)", group="data")
    batch_tokens: int = flag(1024, "padded tokens per batch (the bucket's rows x length; "
                             "about 32 sentences of 32 tokens)",
                             group="data")
    num_buckets: int = flag(8, "length buckets (one compiled program each), their lengths "
                            "chosen to pad the examples least", group="data")
    train_file: str | None = flag(None, "training file instead of --dataset's", group="data")
    valid_file: str | None = flag(None, "evaluation file instead of --dataset's", group="data")
    test_file: str | None = flag(None, "test file (scored once at the end)", group="data")
    lr: float | None = flag(None, "peak learning rate of AdamW (default: 5e-5 from pretrained "
                            "weights, 5e-4 from random ones)", group="training")
    warmup: float = flag(0.1, "fraction of the steps with a rising learning rate",
                         group="training")
    weight_decay: float = flag(0.01, "AdamW weight decay (none on biases and norms)",
                               group="training")
    layer_decay: float | None = flag(None, "layer-wise learning-rate decay: layer i of L "
                                     "trains at lr * decay^(L - i)", group="training")
    accum_steps: int = flag(1, "micro-batches accumulated into one update", group="training")
    predict: str | None = flag(None, "write predictions for the inputs of this file with "
                               "--pretrained (a fine-tuned export) instead of training",
                               group="evaluation")
    output: str | None = flag(None, "with --predict: the file the predictions go to (default: "
                              "predictions.* in the prediction run's directory)",
                              group="output")
    export: bool = flag(True, "export the best parameters with save_pretrained to "
                        "<run>/export (with LoRA: the adapter in PEFT's format)",
                        group="output")
    lora: LoraSettings = LoraSettings()
    toy_examples: int = flag(8000, "training examples of the generated toy data (valid gets "
                             "an eighth)", group="data")
    fit: FitConfig = FitConfig(epochs=3, eval_each_epoch=True)

    tiny: ClassVar[Mapping[str, Any]] = {"toy_examples": 48, "batch_tokens": 256,
                                         "max_length": 32, "num_buckets": 1, "vocab_size": 200,
                                         "lr": 1e-3}

    def __post_init__(self):
        super().__post_init__()
        if self.init == "random" and not self.pretrained:
            raise ConfigError("--init random trains the architecture of --pretrained DIR's "
                              "config.json: give --pretrained (a preset without it always "
                              "starts from random weights)")
        if self.train_file and not self.valid_file and not self.predict:
            raise ConfigError("--train-file needs --valid-file too: the run keeps its best "
                              "checkpoint by the validation score")
        if self.predict and not self.pretrained:
            raise ConfigError("--predict needs --pretrained DIR: a fine-tuned export "
                              "(<run>/export)")
        if self.lr is None:
            scratch = not self.pretrained or self.init == "random"
            object.__setattr__(self, "lr", 5e-4 if scratch else 5e-5)
        if self.accum_steps < 1:
            raise ConfigError(f"--accum-steps {self.accum_steps}: expected >= 1")
        self.lora.check(exports=self.export, base=self.pretrained if self.init == "pretrained"
                        else None, base_flag="--pretrained")
        if self.lora.lora_rank and self.layer_decay is not None:
            raise ConfigError("--layer-decay with --lora-rank: the adapters have no layer "
                              "depths; drop one")


    def check_inputs(self) -> None:
        """``TaskConfig.check_inputs``; a ``--predict`` run checks its export and its input in
        ``cli.finetune.predict`` instead (the message says what a finished run exports)."""
        if not self.predict:
            super().check_inputs()


class EncoderTask(Task):
    """An encoder fine-tuning task (module docstring); subclasses give the head, the examples,
    their encoding, the loss and the evaluation."""

    model_family = "encoder"
    head: ClassVar[str]
    config: EncoderTaskConfig

    def __init__(self, config: EncoderTaskConfig, run: RunDir,
                 log: Callable[[str], None] | None = None):
        super().__init__(config, run, log)
        self.tokenizer: EncoderTokenizer | None = None
        self.pretrained_params: Params | None = None
        self.architecture = ""
        self.max_positions = 0
        self._predict_fns: dict[int, Callable] = {}
        self._encoded: dict[int, tuple[Any, list[dict[str, Any]]]] = {}

    # -------------------------------------------------------------------------------- data
    @property
    def splits(self) -> tuple[str, ...]:
        """``train`` and ``valid`` of the files given (and ``test`` with ``--test-file``), or
        the dataset's splits."""
        config = self.config
        splits = ("train", "valid") if config.train_file else super().splits
        return splits + (("test",) if config.test_file and "test" not in splits else ())

    def read_split(self, split: str) -> Any:
        """The split's file (``--train-file`` ...), else the toy data or the dataset's."""
        config = self.config
        path = {"train": config.train_file, "valid": config.valid_file,
                "test": config.test_file}.get(split)
        if path:
            return self.read_file(path)
        if config.dataset == "toy":
            size = config.toy_examples if split == "train" else max(config.toy_examples // 8, 8)
            return self.toy(split, size)
        segment = get_dataset_info(config.dataset).splits[split]
        return get_dataset(config.dataset, segment, root=config.data_dir)

    @abc.abstractmethod
    def read_file(self, path: str) -> Any:
        """The labelled examples of a file in the task's format."""

    @abc.abstractmethod
    def toy(self, split: str, size: int) -> Any:
        """``size`` generated examples of ``split``."""

    # ------------------------------------------------------------------------------- model
    def num_labels(self) -> int:
        """Output size of the head."""
        return 2

    def head_overrides(self) -> dict[str, Any]:
        """Config fields the head needs (``head``, ``num_labels``)."""
        return {"head": self.head, "num_labels": self.num_labels()}

    def load_checkpoint(self, texts: Iterable[str]) -> None:
        """The tokenizer (and pretrained params) of ``--pretrained``, or a WordPiece vocabulary
        trained on ``texts`` for the preset; checks ``--max-length`` against the positions.

        With ``--init random`` no weights are read: the model is ``--pretrained``'s
        ``config.json`` architecture, or, for a directory with tokenizer files only, the
        ``--model`` preset with that tokenizer's vocabulary."""
        config = self.config
        self._model = None
        if config.pretrained and config.init == "pretrained":
            loaded = load_pretrained(
                config.pretrained, policy=Policy.parse(config.precision),
                **self.head_overrides(), **config.overrides)
            self.pretrained_params, self._model = loaded.params, loaded.model
            tokenizer = loaded.tokenizer
            source = config.pretrained
        elif config.pretrained:
            root = Path(config.pretrained)
            if (root / "config.json").is_file():
                hf = read_config(root)
                self._model = Encoder(encoder_config(
                    hf, root, policy=Policy.parse(config.precision), **self.head_overrides(),
                    **config.overrides))
                architecture = hf["model_type"]
            else:
                architecture = get_model(config.model, **config.overrides).config.architecture
            tokenizer = EncoderTokenizer.from_directory(root, architecture)
            source = f"{config.pretrained} (random init" + (
                ")" if self._model else f", the {config.model} architecture)")
        else:
            architecture = get_model(config.model, **config.overrides).config.architecture
            tokenizer = train_wordpiece(texts, config.vocab_size, architecture,
                                        lowercase=not config.cased)
            source = (f"a {len(tokenizer):,}-entry {'cased' if config.cased else 'lowercased'} "
                      f"WordPiece vocabulary trained for {config.model}")
        self.tokenizer = tokenizer
        model_config = self.build_model().config
        if len(tokenizer) > model_config.vocab_size:
            raise ConfigError(f"{config.pretrained}: the tokenizer has {len(tokenizer)} ids but "
                              f"the model {model_config.vocab_size} embeddings")
        self.architecture = model_config.architecture
        offset = model_config.pad_id + 1 if self.architecture in ("roberta", "xlm-roberta") else 0
        self.max_positions = model_config.max_position_embeddings - offset
        if config.max_length > self.max_positions:
            raise ConfigError(f"--max-length {config.max_length} is above the model's "
                              f"{self.max_positions} positions")
        self.log(f"encoder: {self.architecture} from {source}")

    def build_model(self) -> Encoder:
        config = self.config
        if self._model is not None:
            return self._model
        return get_model(config.model, **{
            **self.head_overrides(), "vocab_size": len(self.tokenizer),
            "pad_id": self.tokenizer.pad_id, "policy": config.precision,
            "type_vocab_size": 2 if self.tokenizer.with_token_types else 0,
            **config.overrides})

    def init_params(self, model: nn.Module, rng: jax.Array) -> Params:
        if self.pretrained_params is not None:
            return jax.tree_util.tree_map(jnp.asarray, self.pretrained_params)
        dummy = jnp.zeros((1, 8), jnp.int32)
        return jax.jit(model.init)(rng, dummy)["params"]

    def optimizer(self, total_steps: int) -> tuple[optax.GradientTransformation, LearningRate]:
        config = self.config
        model = self.build_model()
        params = jax.eval_shape(lambda: model.init(jax.random.key(0),
                                                   jnp.zeros((1, 8), jnp.int32)))["params"]
        return adamw(params, learning_rate=config.lr, total_steps=total_steps,
                     warmup=config.warmup, weight_decay=config.weight_decay,
                     num_layers=model.config.num_layers, layer_decay=config.layer_decay,
                     policy=config.precision)

    # -------------------------------------------------------------------------------- data
    def batchify(self) -> EncoderBatchify:
        """The batchify callable of this task's encoded examples."""
        return EncoderBatchify(self.tokenizer.pad_id,
                               with_token_types=self.tokenizer.with_token_types)

    @abc.abstractmethod
    def encode(self, data: Any) -> list[dict[str, Any]]:
        """The encoded examples (``EncoderBatchify`` samples) of a read split; each has an
        ``index`` (its example, or feature, number)."""

    def encoded(self, data: Any) -> list[dict[str, Any]]:
        """``encode(data)``, computed once per split object."""
        key = id(data)
        if key not in self._encoded or self._encoded[key][0] is not data:
            self._encoded[key] = (data, self.encode(data))
        return self._encoded[key][1]

    def make_loader(self, data: Any, *, train: bool) -> DataLoader:
        return self.loader(self.encoded(data), train=train)

    def loader(self, samples: Sequence[Mapping[str, Any]], *, train: bool) -> DataLoader:
        """Token-budget batches of encoded ``samples`` (shuffled when ``train``; training
        batches hold ``--accum-steps`` micro-batches)."""
        config = self.config
        if not samples:
            raise ConfigError("no example to batch (an empty split?)")
        accum = config.accum_steps if train else 1
        lengths = [len(s["input_ids"]) for s in samples]
        if config.batch_tokens < config.max_length:
            raise ConfigError(f"--batch-tokens {config.batch_tokens} is below --max-length "
                              f"{config.max_length}: the longest bucket would get no row")
        sampler = token_buckets(lengths, config.batch_tokens * accum, config.num_buckets,
                                shuffle=train, seed=config.seed, rows_multiple=accum)
        return DataLoader(samples, sampler, self.batchify())

    def predictions(self, model: nn.Module, params: Params,
                    loader: DataLoader) -> Iterator[tuple[dict[str, np.ndarray],
                                                          dict[str, np.ndarray]]]:
        """``(batch, outputs)`` per batch: the head's float32 outputs (inference mode, one
        compiled program per bucket shape) beside the batch's numpy arrays. Batch n+1 is
        dispatched before batch n's outputs are read back to the host."""
        if id(model) not in self._predict_fns:
            self._predict_fns[id(model)] = jax.jit(
                lambda params, inputs: model.apply({"params": params}, **inputs))
        forward = self._predict_fns[id(model)]
        host = lambda outputs: {k: np.asarray(v, np.float32)  # noqa: E731
                                for k, v in outputs.items() if k != "hidden_states"}
        pending = None
        for batch in loader:
            outputs = forward(params, model_inputs(batch))
            if pending is not None:
                yield pending[0], host(pending[1])
            pending = (batch, outputs)
        if pending is not None:
            yield pending[0], host(pending[1])

    @staticmethod
    def count_tokens(metrics: Mapping[str, Any]) -> Any:
        """Real (unpadded) input tokens of a step: its losses' ``input_tokens``."""
        return metrics["input_tokens"]

    # ------------------------------------------------------------------------------ outputs
    def export_labels(self) -> Sequence[str] | None:
        """Label names for the export's ``id2label`` (None: none)."""
        return None

    def write_outputs(self, run: RunDir, model: nn.Module, params: Params,
                      data: Mapping[str, Any]) -> None:
        """Files a finished run writes beside the export (SQuAD: ``predictions.json``)."""

    @abc.abstractmethod
    def read_inputs(self, path: str) -> Any:
        """The unlabelled inputs of ``--predict FILE``."""

    def prepare_inputs(self, data: Any) -> None:
        """Load ``--pretrained`` (a fine-tuned export) to predict ``data``."""
        self.load_checkpoint(())

    predictions_file: ClassVar[str]
    """The name of ``--predict``'s output in the prediction run's directory."""

    @abc.abstractmethod
    def format_predictions(self, model: nn.Module, params: Params, data: Any) -> tuple[str, int]:
        """The predictions of ``data`` as the text of ``predictions_file``, and their count."""

    # ------------------------------------------------------------------------------ export
    def export(self, model: nn.Module, params: Params, directory: str | Path,
               labels: Sequence[str] | None = None) -> Path:
        """The fine-tuned model as a Hugging Face directory (``save_pretrained``); ``labels``
        become ``id2label`` / ``label2id`` in its ``config.json``."""
        params = jax.tree_util.tree_map(lambda x: np.asarray(x, np.float32), params)
        return save_pretrained(model, params, self.tokenizer, directory,
                               **({"labels": list(labels)} if labels else {}))


def bucket_padding(loader: DataLoader, max_length: int) -> dict[str, float]:
    """The padding of ``loader``'s buckets (or packed rows, ``PackedSampler``) against padding
    every example to ``max_length``: ``real_tokens``, ``bucket_padding`` and
    ``max_length_padding`` (fractions of the padded cells), ``tokens_saved`` (fraction of the
    ``max_length`` cells the buckets avoid) and ``num_shapes`` (batch shapes: compiled
    programs)."""
    real = float(sum(len(s["input_ids"]) for s in loader.dataset))
    bucketed = loader.batch_sampler.padding_fraction()
    cells = real / (1.0 - bucketed)
    fixed = len(loader.dataset) * max_length
    return {"real_tokens": real, "bucket_padding": bucketed,
            "max_length_padding": 1.0 - real / fixed, "tokens_saved": 1.0 - cells / fixed,
            "num_shapes": len(loader.batch_sampler.bucket_shapes)}
