"""Conformance of every registered task (``textkit.tasks.list_tasks()``) with every model
preset of its family (``Task.family()``; presets identical at tiny sizes share one case): the
contract's pieces, a short ``fit`` on the generated toy data, and ``evaluate`` giving finite
floats with the task's ``eval_metric``. Registering a task or a preset is all it takes to be
covered: sizes come from ``TaskConfig.tiny`` and ``ModelConfig.tiny``."""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np
import pytest

from textkit.models import config_class, get_model, list_models
from textkit.tasks import Task, TaskConfig, get_task, list_tasks
from textkit.training import FitConfig, RunDir, create_train_state, fit


def distinct_presets(family: str) -> list[str]:
    """The presets of ``family`` that differ once their sizes are the config's ``tiny`` ones
    (``bert_base`` and ``bert_large`` are the same model at tiny sizes: one case covers both);
    the vocabulary and position counts are ignored too."""
    chosen: dict[object, str] = {}
    for preset in list_models(family):
        fields = dataclasses.fields(config_class(preset))
        ignored = {f.name: 7 for f in fields if f.name in (
            "vocab_size", "max_position_embeddings", "src_vocab_size", "tgt_vocab_size")
            or f.default is dataclasses.MISSING}
        chosen.setdefault(get_model(preset, **config_class(preset).tiny, **ignored).config,
                          preset)
    return sorted(chosen.values())


def contract_cases() -> list[tuple[str, str]]:
    """Every distinct preset of a family once, dealt round-robin to the tasks of that family
    (each task gets at least one): the tasks differ in their heads, data and metrics, the
    presets in their encoder, and test_encoders matches each family's head fixtures against
    transformers; the full cross ran 47 cases where these 26 cover every task and preset."""
    by_family: dict[str, list[str]] = {}
    for task in list_tasks():
        by_family.setdefault(get_task(task).family(), []).append(task)
    cases = []
    for family, tasks in by_family.items():
        presets = distinct_presets(family)
        for i in range(max(len(presets), len(tasks))):
            cases.append((tasks[i % len(tasks)], presets[i % len(presets)]))
    return sorted(cases)


CASES = contract_cases()
# the fast tier runs one cheap preset of the cheap tasks; every other case compiles a larger
# model or trains tokenizers first (tens of seconds on 2 cores) and is marked slow
FAST_CASES = {("classification", "textcnn"), ("language_model", "lstm_lm_tiny")}


def test_every_task_has_presets_and_tiny_settings():
    assert set(list_tasks()) >= {"translation", "language_model", "classification"}
    for name in list_tasks():
        task = get_task(name)
        assert issubclass(task, Task) and issubclass(task.config_class, TaskConfig)
        assert task.config_class.tiny, f"{task.config_class.__name__} has no tiny settings"
        assert list_models(task.family()), f"no model preset of the {name} family"
        assert "toy" in task.datasets()
    for name in list_models():
        assert config_class(name).tiny, f"{config_class(name).__name__} has no tiny sizes"


def tiny_config(task: type[Task], preset: str, save_dir) -> TaskConfig:
    overrides = ",".join(f"{k}={v}" for k, v in config_class(preset).tiny.items())
    return task.config_class(**{
        **task.config_class.tiny, "model": preset, "model_overrides": overrides,
        "save_dir": str(save_dir), "fit": FitConfig(max_steps=2, log_every=1, progress=False)})


@pytest.fixture(scope="module")
def run_dirs(tmp_path_factory):
    """One run directory per task, so tokenizers and token stores are made once."""
    return {name: RunDir(tmp_path_factory.mktemp(name)) for name in list_tasks()}


@pytest.mark.parametrize("task_name,preset", [
    case if case in FAST_CASES else pytest.param(*case, marks=pytest.mark.slow)
    for case in CASES])
def test_task_runs_fit_and_evaluates(task_name, preset, run_dirs):
    task_cls = get_task(task_name)
    run = run_dirs[task_name]
    config = tiny_config(task_cls, preset, run.root)
    assert dataclasses.is_dataclass(config) and config.record()["model"] == preset
    task = task_cls(config, run, log=lambda message: None)
    data = {split: task.read_split(split) for split in task.splits}
    assert "train" in data and len(data) >= 2
    task.prepare(data)
    model = task.build_model()
    tx, learning_rate = task.optimizer(2)
    init_key, state_key = jax.random.split(jax.random.key(0))
    state = create_train_state(task.init_params(model, init_key), tx, state_key)
    before = jax.tree.map(np.array, state.params)        # the train step donates the state
    loader = task.make_loader(data["train"], train=True)
    result = fit(state, task.make_train_step(model, tx), loader, config.fit,
                 initial_carry=task.initial_carry(model), count_tokens=task.count_tokens,
                 learning_rate=learning_rate, log=lambda message: None)
    assert result.progress.step == 2 and math.isfinite(result.progress.last_loss)
    assert math.isfinite(learning_rate(result.state))
    changed = jax.tree.map(lambda a, b: bool(np.any(np.asarray(a) != np.asarray(b))),
                           before, result.state.params)
    assert any(jax.tree.leaves(changed)), "two steps changed no parameter"
    held_out = data["valid"] if "valid" in data else data["test"]
    scores = task.evaluate(model, result.state.params, held_out)
    assert task.eval_metric in scores
    assert all(isinstance(v, float | int) and math.isfinite(v) for v in scores.values()), scores


@pytest.mark.parametrize("name", list_tasks())
def test_config_records_data_paths_absolute(name, tmp_path, monkeypatch):
    """``config.json`` names the data wherever it is read (``--resume`` from elsewhere)."""
    monkeypatch.chdir(tmp_path)
    config_cls = get_task(name).config_class
    fields = {f.name for f in dataclasses.fields(config_cls)}
    given = {"data_dir": "data", **({"train_file": "data/train.txt"}
                                    if "train_file" in fields else {}),
             **({"valid_file": "data/valid.txt"} if "valid_file" in fields else {})}
    record = config_cls(**given).record()
    assert {k: record[k] for k in given} == {k: str(tmp_path / v) for k, v in given.items()}
    assert record["save_dir"] is None and config_cls(**given).data_dir == "data"
