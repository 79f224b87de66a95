"""LoRA fine-tuning of any task that starts from a checkpoint: ``with_lora(task)``.

``LoraSettings`` are the recipe flags ``--lora-rank R --lora-alpha A --lora-dropout P
--lora-targets a,b --lora-rslora --quantize-base int8 --merge`` (a config's ``lora`` field;
rank 0, the default, fine-tunes every weight; ``--quantize-base int8``: the frozen part held in
int8, evaluated beside the adapters since it cannot be merged). ``with_lora`` returns the
task as an instance of a subclass of its own class whose methods train adapters instead of the
model:

* ``init_params`` -> the trained part ``{"lora": adapter weights, "heads": the task head}``
  (the head, PEFT's ``modules_to_save``, is trained fully); ``frozen_params()`` -> the rest of
  the checkpoint, which the train state carries as ``frozen`` (no gradient, no optimizer
  state, never written);
* ``make_loss`` -> the task's loss with the adapters run beside the frozen kernels
  (``adapters.lora_on_activations``: LoRA dropout on A's input while training); given plain
  model params it is the task's loss unchanged;
* ``evaluate`` / ``score`` / ``write_outputs`` -> the task's, on the merged params
  (``model_params``);
* ``export`` -> the adapter in PEFT's format in the export directory
  (``pretrained.peft.save_adapter``), and with ``--merge`` the merged model beside it
  (``<run>/merged``, written by the task's own export: transformers loads it as a plain model).

Everything else (data, loaders, optimizer, the train step's options) is the task's own.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import jax

from textkit.adapters import Adapter, Lora, lora_on_activations
from textkit.errors import ConfigError
from textkit.settings import flag
from textkit.tasks.base import Params, Task

__all__ = ["LORA_ADDED", "LoraSettings", "with_lora"]


@dataclasses.dataclass(frozen=True)
class LoraSettings:
    """LoRA's recipe flags (module docstring)."""

    lora_rank: int = flag(0, "LoRA rank r: train rank-r adapters (and the task head) instead "
                          "of every weight; 0: full fine-tuning", group="training")
    lora_alpha: float = flag(8.0, "LoRA alpha: the adapters' output is scaled by alpha / r",
                             group="training")
    lora_dropout: float = flag(0.0, "dropout on the input of the LoRA adapters while training",
                               group="training")
    lora_targets: str = flag("", "comma-separated module names as transformers names them "
                             "(q_proj,v_proj; query,value; c_attn); default: PEFT's targets "
                             "for the family", group="training")
    lora_rslora: bool = flag(False, "rank-stabilised LoRA: scale by alpha / sqrt(r)",
                             group="training")
    quantize_base: str | None = flag(None, "with LoRA: hold the frozen weights in int8 "
                                     "(CPU; the adapters and the head stay float): QLoRA's "
                                     "idea", group="training", choices=("int8",))
    merge: bool = flag(False, "with LoRA: also write the model with the adapter merged in to "
                       "<run>/merged (transformers loads it as a plain model)", group="output")

    def __post_init__(self) -> None:
        if self.lora_rank < 0:
            raise ConfigError(f"--lora-rank {self.lora_rank}: expected >= 0 (0: no LoRA)")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ConfigError(f"--lora-dropout {self.lora_dropout}: expected 0 <= p < 1")
        if self.merge and not self.lora_rank:
            raise ConfigError("--merge needs --lora-rank: it writes a LoRA run's model with "
                              "the adapter merged in")
        if self.quantize_base and not self.lora_rank:
            raise ConfigError("--quantize-base needs --lora-rank: only the frozen base of a "
                              "LoRA run is held in int8")
        if self.quantize_base and self.merge:
            raise ConfigError("--quantize-base int8 --merge: an int8 base takes no merge; "
                              "merge the exported adapter into the float base later "
                              "(load_pretrained(BASE, adapter=<run>/export))")

    @property
    def targets(self) -> tuple[str, ...] | None:
        """``--lora-targets`` as a tuple (None: the family's defaults)."""
        names = tuple(t.strip() for t in self.lora_targets.split(",") if t.strip())
        return names or None

    def check(self, *, exports: bool, base: str | None, base_flag: str,
              int8_base: bool = False) -> None:
        """Refuse settings LoRA cannot run with: ``--merge`` without an export (``--no-export
        --merge``), LoRA without a checkpoint to adapt (``base``, the value of ``base_flag``),
        ``--quantize-base`` in a recipe whose evaluation cannot run beside an int8 base
        (``int8_base`` False)."""
        if not self.lora_rank:
            return
        if self.quantize_base and not int8_base:
            raise ConfigError("--quantize-base int8 is the causal-LM recipe's "
                              "(language_model/train.py --init-from): this recipe evaluates "
                              "a merged model, which an int8 base cannot give")
        if self.merge and not exports:
            raise ConfigError("--no-export --merge: --merge writes the merged model beside the "
                              "exported adapter; drop --no-export (or --merge)")
        if not base:
            raise ConfigError(f"--lora-rank needs {base_flag} DIR: LoRA adapts a checkpoint's "
                              f"weights, named as transformers names them")


LORA_ADDED = {"lora": dataclasses.asdict(LoraSettings())}
"""The ``lora`` record of runs written before LoRA (``launch``'s ``added``): no LoRA."""


class _LoraTask:
    """The LoRA methods ``with_lora`` puts before a task class's own (module docstring)."""

    lora: Lora
    _frozen: Any

    def init_params(self, model: Any, rng: jax.Array) -> Params:
        from textkit.pretrained.lora_sites import lora_for

        settings = self.config.lora
        base = super().init_params(model, rng)
        try:
            self.lora = lora_for(model, base, rank=settings.lora_rank, alpha=settings.lora_alpha,
                                 dropout=settings.lora_dropout, rslora=settings.lora_rslora,
                                 targets=settings.targets)
        except ValueError as err:
            raise ConfigError(f"--lora-targets / --lora-rank: {err}") from None
        self._frozen, heads = self.lora.split(dict(base))
        if settings.quantize_base:
            self._frozen = self._int8(model, base)
        trained = sum(s.in_features + s.out_features for s in self.lora.sites) * \
            settings.lora_rank + sum(x.size for x in jax.tree_util.tree_leaves(heads))
        total = sum(x.size for x in jax.tree_util.tree_leaves(base))
        self.log(f"LoRA r={settings.lora_rank} on {len(self.lora.sites)} modules "
                 f"({', '.join(self.lora.config.targets)}), heads {list(self.lora.heads)}: "
                 f"{trained:,} trained parameters, {total:,} frozen")
        return {"lora": self.lora.init(jax.random.fold_in(rng, 59)), "heads": heads}

    def _int8(self, model: Any, base: Params) -> Params:
        """The frozen params with every ``Dense`` kernel and embedding table in int8
        (``kernels.quantize_int8``); the float copy the task loaded is released."""
        import jax.numpy as jnp

        from textkit.models.kernels import quantize_int8, require_int8_backend
        from textkit.models.transformer import Transformer

        try:
            require_int8_backend()
        except ValueError as err:
            raise ConfigError(f"--quantize-base int8: {err}") from None
        example = () if isinstance(model, Transformer) else (jnp.zeros((1, 8), jnp.int32),)
        quantized = quantize_int8(model, base, *example)
        if getattr(self, "pretrained", None) is not None:
            self.pretrained = self.pretrained.replace(params=None)
        return {k: v for k, v in quantized.items() if k not in self.lora.heads}

    def frozen_params(self) -> Params:
        return self._frozen

    def model_params(self, params: Params) -> Params:
        """The model's params of trained ``params``: the frozen ones, the heads, the adapter
        merged in (model params, as a task method passes them on to another, unchanged)."""
        if set(params) != {"lora", "heads"}:
            return params
        return Adapter(self.lora, params["lora"]).merge({**self._frozen, **params["heads"]})

    def make_loss(self, model: Any) -> Any:
        inner = super().make_loss(model)

        def loss_fn(params: Any, batch: Any, rng: Any, *carry: Any) -> Any:
            if not isinstance(params, tuple):                  # plain model params
                return inner(params, batch, rng, *carry)
            trained, frozen = params
            key = None if rng is None else jax.random.fold_in(rng, 59)
            with lora_on_activations(self.lora, trained["lora"], key):
                return inner({**frozen, **trained["heads"]}, batch, rng, *carry)

        return loss_fn

    def evaluate(self, model: Any, params: Params, data: Any) -> dict[str, float]:
        if self.config.lora.quantize_base:     # an int8 base takes no merge: beside it
            return super().evaluate(model, (params, self._frozen), data)
        return super().evaluate(model, self.model_params(params), data)

    def score(self, model: Any, params: Params, data: Any) -> Any:
        return super().score(model, self.model_params(params), data)

    def write_outputs(self, run: Any, model: Any, params: Params, data: Any) -> Any:
        return super().write_outputs(run, model, self.model_params(params), data)

    def export(self, model: Any, params: Params, directory: str | Path, **options: Any) -> Path:
        """The adapter (PEFT's format) in ``directory``; with ``--merge`` the merged model in
        ``merged`` beside it."""
        from textkit.pretrained.peft import save_adapter

        adapter = Adapter(self.lora, params["lora"])
        heads = {**self._frozen, **params["heads"]}
        base = getattr(self.config, "init_from", None) or getattr(self.config, "pretrained",
                                                                   None)
        path = save_adapter(model, adapter, heads, directory, base_model=base)
        if self.config.lora.merge:
            merged = super().export(model, self.model_params(params),
                                    Path(directory).parent / "merged", **options)
            self.log(f"merged model -> {merged}")
        return path


def with_lora(task: Task) -> Task:
    """``task`` fine-tuned through LoRA when its config's ``lora.lora_rank`` > 0 (module
    docstring): the same object's state under a subclass of its class; else ``task``."""
    if not task.config.lora.lora_rank:
        return task
    cls = type(task)
    lora_cls = type(f"Lora{cls.__name__}", (_LoraTask, cls), {})
    wrapped = object.__new__(lora_cls)
    wrapped.__dict__ = task.__dict__
    return wrapped
