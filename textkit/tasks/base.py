"""The task contract: what every task (translation, language modelling, classification, ...)
implements, and the registry of tasks.

A task turns one frozen ``TaskConfig`` into the pieces ``textkit.training.fit`` runs::

    task = get_task("translation")(config, run)        # run: the RunDir that caches files
    data = {split: task.read_split(split) for split in task.splits}
    task.prepare(data)                                  # tokenizers / vocabulary
    model = task.build_model()
    tx, learning_rate = task.optimizer(total_steps)
    state = create_train_state(task.init_params(model, rng), tx, rng)
    step = task.make_train_step(model, tx)
    result = fit(state, step, task.make_loader(data["train"], train=True), config.fit,
                 evaluate=lambda s: task.evaluate(model, s.params, data["valid"]),
                 initial_carry=task.initial_carry(model), count_tokens=task.count_tokens)

``read_split`` reads the dataset named by ``config.dataset`` from the catalogue
(``textkit.data.list_datasets(task=...)``) or generates the task's built-in ``toy`` data.
``evaluate`` returns floats only (``{"bleu": ..}``, ``{"ppl": ..}``, ``{"accuracy": ..}``);
``eval_metric`` names the one that ranks checkpoints. A task owns no loop, parses no flags and
never exits the process: bad settings raise ``textkit.errors.ConfigError``.

``register_task`` adds a task; the conformance test (``tests/test_task_contract.py``) then runs
it with every model preset of its family (``textkit.models.list_models(task.family())``).
"""

from __future__ import annotations

import abc
import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal

import flax.linen as nn
import jax
import optax

from textkit.data import get_dataset_info, list_datasets
from textkit.errors import ConfigError
from textkit.models import parse_overrides
from textkit.parallel import LaunchConfig
from textkit.precision import Policy
from textkit.settings import flag
from textkit.training import make_train_step
from textkit.training.loop import FitConfig
from textkit.training.run_dir import RunDir
from textkit.training.train_step import TrainState, TrainStep

__all__ = [
    "LearningRate", "LossFn", "Params", "Split", "Task", "TaskConfig", "get_task", "list_tasks",
    "register_task",
]

Params = Any
"""A parameter pytree (``model.init(...)["params"]``)."""
Split = Literal["train", "valid", "test"]
LossFn = Callable[..., tuple[jax.Array, tuple[Any, ...]]]
"""``loss_fn(params, batch, rng[, carry]) -> (loss_sum, (weight_sum, metrics[, carry]))``."""
LearningRate = Callable[[TrainState], float]
"""The learning rate of a train state's last step (for progress bars and logs)."""


@dataclasses.dataclass(frozen=True)
class TaskConfig:
    """The settings every task shares. Each field is the recipe flag of the same name
    (``model_overrides`` is ``--model-overrides``; ``precision`` is ``--precision``)."""

    dataset: str = flag("toy", "dataset name: toy (generated) or a catalogue entry of the "
                        "task", group="data")
    data_dir: str | None = flag(None, "folder of the dataset's files (downloaded there when "
                                "missing and the catalogue has a source)", group="data")
    model: str = flag("", "a model preset of the task (textkit.models.list_models)",
                      group="model")
    model_overrides: str = flag("", "config fields of the preset, e.g. 'dropout=0.1,d_model=128'",
                                group="model")
    precision: str = flag("float32", "precision policy: float32, mixed_bfloat16, "
                          "mixed_float16 or 'params=...,compute=...,output=...', optionally "
                          "with ',activations=<dtype>'", group="model")
    seed: int = flag(0, "seed of initialisation, data order and dropout", group="training")
    save_dir: str | None = flag(
        None, "the run directory (config, checkpoints, metrics, logs, summary); default: a new "
        "<runs folder>/<date-time> directory, linked as <runs folder>/latest (--resume "
        "without --save-dir continues that one)", group="output")
    tensorboard: bool = flag(True, "write TensorBoard event files (tensorboardX) beside "
                             "metrics.jsonl and curves.png", group="output")
    fit: FitConfig = FitConfig(epochs=1)
    launch: LaunchConfig = LaunchConfig()

    def __post_init__(self) -> None:
        """Refuse a ``--precision`` that is not a policy, before any file is written."""
        try:
            Policy.parse(self.precision)
        except ValueError as err:
            raise ConfigError(f"--precision: {err}") from None

    def check_inputs(self) -> None:
        """Refuse an input that is not there (``ConfigError`` naming its flag): a file of
        ``--train-file``, ``--valid-file``, ``--test-file``, ``--predict`` or
        ``--embedding-path``, the directory of ``--init-from`` or ``--pretrained``.
        ``parse_config`` calls it for a command line, before the run directory is made; a
        config built in code is not checked."""
        for name in ("train_file", "valid_file", "test_file", "predict", "embedding_path"):
            value = getattr(self, name, None)
            for path in [value] if isinstance(value, str) else value or ():
                if not os.path.isfile(path):
                    raise ConfigError(f"--{name.replace('_', '-')} {path}: no such file")
        for name in ("init_from", "pretrained"):
            path = getattr(self, name, None)
            if path and not os.path.isdir(path):
                raise ConfigError(f"--{name.replace('_', '-')} {path}: no such directory "
                                  "(expected a checkpoint directory)")

    tiny: ClassVar[Mapping[str, Any]] = {}
    """Settings for a run of seconds on the generated toy data (smaller corpus, batches and
    decoding), beside a model's ``ModelConfig.tiny``: for conformance tests and smoke runs."""

    runs_name: ClassVar[str] = "run"
    """The runs folder is ``runs/<runs_name>_<data_name>``."""

    path_fields: ClassVar[tuple[str, ...]] = (
        "data_dir", "train_file", "valid_file", "test_file", "predict", "output", "pretrained",
        "init_from", "embedding_path", "embedding_root")
    """Fields (of any task's config) naming a file or folder: ``record`` writes them absolute,
    so a run's ``config.json`` names its data wherever it is read, and ``--resume`` from
    another working directory compares the same files."""

    @property
    def data_name(self) -> str:
        """The data a run trains on, for its runs folder and its labels: the file name of
        ``--train-file`` (names joined by ``+`` for several) where the task has one and it
        is given, else the dataset name."""
        files = getattr(self, "train_file", None)
        if not files:
            return self.dataset
        return "+".join(os.path.basename(f) for f in ([files] if isinstance(files, str) else files))

    @property
    def runs_folder(self) -> str:
        """Where runs without ``--save-dir`` go: ``runs/<runs_name>_<data_name>``."""
        return f"runs/{self.runs_name}_{self.data_name}"

    @property
    def overrides(self) -> dict[str, Any]:
        """``model_overrides`` parsed (``textkit.models.parse_overrides``)."""
        return parse_overrides(self.model_overrides)

    def record(self) -> dict[str, Any]:
        """The settings a run directory records (``config.json``): every field but the launch
        settings and ``fit.resume``, the paths of ``path_fields`` made absolute."""
        record = dataclasses.asdict(self)
        record.pop("launch")
        record["fit"].pop("resume")
        for name in self.path_fields:
            if record.get(name):
                record[name] = os.path.abspath(record[name])
        return record


class Task(abc.ABC):
    """One task: the pieces ``fit`` needs, built from a frozen ``TaskConfig``.

    Class attributes: ``name``, ``model_family`` (the model-registry family of its presets;
    None: ``name``), ``config_class``, ``toy_splits`` (the splits of the generated toy data),
    ``eval_metric`` and ``eval_mode`` (``"max"`` or ``"min"``) ranking checkpoints.
    """

    name: ClassVar[str]
    model_family: ClassVar[str | None] = None
    config_class: ClassVar[type[TaskConfig]]
    toy_splits: ClassVar[tuple[str, ...]] = ("train", "valid", "test")
    eval_metric: ClassVar[str]
    eval_mode: ClassVar[str] = "max"

    def __init__(self, config: TaskConfig, run: RunDir,
                 log: Callable[[str], None] | None = None):
        if not isinstance(config, self.config_class):
            raise TypeError(f"{type(self).__name__} takes a {self.config_class.__name__}, "
                            f"got {type(config).__name__}")
        if config.dataset not in self.datasets():
            raise ConfigError(f"--dataset {config.dataset!r} is not a {self.name} dataset; "
                              f"choose from {self.datasets()}")
        self.config = config
        self.run = run
        self.log = log or run.log

    @property
    def data_name(self) -> str:
        """What the run trains on, for logs (``TaskConfig.data_name``)."""
        return self.config.data_name

    @property
    def splits(self) -> tuple[str, ...]:
        """The splits ``read_split`` serves for ``config.dataset`` (the catalogue entry's)."""
        if self.config.dataset == "toy":
            return self.toy_splits
        return tuple(get_dataset_info(self.config.dataset).splits)

    @classmethod
    def family(cls) -> str:
        """The model-registry family of the task's presets."""
        return cls.model_family or cls.name

    @classmethod
    def datasets(cls) -> list[str]:
        """``toy`` and the catalogue's datasets of this task."""
        return ["toy", *list_datasets(task=cls.name)]

    # ------------------------------------------------------------------ data
    @abc.abstractmethod
    def read_split(self, split: str) -> Any:
        """The examples of ``split`` (one of ``splits``); an empty split is a ``ConfigError``
        naming its files."""

    @abc.abstractmethod
    def prepare(self, data: Mapping[str, Any]) -> None:
        """Build what the model's inputs need from the read splits (tokenizers, vocabulary,
        pretrained vectors), cached in the run directory where that is costly."""

    @abc.abstractmethod
    def make_loader(self, data: Any, *, train: bool) -> Any:
        """Fixed-shape numpy batches of ``data`` (shuffled, resumable when ``train``)."""

    # ------------------------------------------------------------------ model
    @abc.abstractmethod
    def build_model(self) -> nn.Module:
        """The preset ``config.model`` with ``config.overrides`` for the prepared inputs."""

    @abc.abstractmethod
    def init_params(self, model: nn.Module, rng: jax.Array) -> Params:
        """Fresh parameters of ``model`` (or those of a pretrained checkpoint)."""

    def frozen_params(self) -> Params | None:
        """The parameters the train state carries frozen beside ``init_params``' (no
        gradient, no optimizer state: LoRA's base, ``tasks.lora``), once ``init_params`` has
        run; None: every parameter trains."""
        return None

    # ------------------------------------------------------------------ training
    @abc.abstractmethod
    def make_loss(self, model: nn.Module) -> LossFn:
        """The loss of the generic train and eval steps (``textkit.training.train_step``)."""

    @abc.abstractmethod
    def optimizer(self, total_steps: int) -> tuple[optax.GradientTransformation, LearningRate]:
        """The task's default optimizer for a run of ``total_steps`` steps and its learning
        rate; dynamic loss scaling when the precision policy needs it."""

    def make_train_step(self, model: nn.Module, tx: optax.GradientTransformation,
                        **step_options: Any) -> TrainStep:
        """``train_step(state, batch) -> (state, metrics)``; ``step_options`` (shardings,
        ``accum_steps``, ...) go to ``textkit.training.make_train_step``."""
        return make_train_step(self.make_loss(model), tx, **step_options)

    def initial_carry(self, model: nn.Module) -> Callable[[], Any] | None:
        """For tasks whose steps carry a recurrent state: the state at each epoch's start."""
        return None

    @staticmethod
    def count_tokens(metrics: Mapping[str, Any]) -> Any:
        """Tokens a train step processed (its metrics), for throughput."""
        return metrics["tokens"]

    # ------------------------------------------------------------------ evaluation
    @abc.abstractmethod
    def evaluate(self, model: nn.Module, params: Params, data: Any) -> dict[str, float]:
        """Scores of ``params`` on ``data`` (a read split); ``eval_metric`` among them."""


_TASKS: dict[str, type[Task]] = {}


def register_task(cls: type[Task]) -> type[Task]:
    """Class decorator: make ``cls`` available as ``get_task(cls.name)``."""
    if cls.name in _TASKS and _TASKS[cls.name] is not cls:
        raise ValueError(f"a task named {cls.name!r} is registered already")
    _TASKS[cls.name] = cls
    return cls


def get_task(name: str) -> type[Task]:
    """The task class registered as ``name``."""
    if name not in _TASKS:
        raise ConfigError(f"unknown task {name!r}; registered: {list_tasks()}")
    return _TASKS[name]


def list_tasks() -> list[str]:
    """Names of the registered tasks."""
    return sorted(_TASKS)
