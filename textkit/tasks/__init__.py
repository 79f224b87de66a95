"""Tasks: one typed contract (``Task``, ``TaskConfig``) implemented by translation, language
modelling and classification, and the registry of tasks (``get_task``, ``list_tasks``).

A task builds, from one frozen config, the pieces ``textkit.training.fit`` runs: its data
(``read_split``, ``prepare``, ``make_loader``), its model (``build_model``, ``init_params``),
its loss and default optimizer (``make_loss``, ``optimizer -> (tx, learning_rate)``) and
``evaluate(model, params, data) -> dict[str, float]``. None owns a training loop: the recipes
in ``examples/`` hand these pieces to ``fit``. See ``textkit.tasks.base``.
"""

from textkit.tasks import classification, language_model, translation
from textkit.tasks.base import Task, TaskConfig, get_task, list_tasks, register_task
from textkit.tasks.classification import ClassificationConfig, ClassificationTask
from textkit.tasks.language_model import LanguageModelConfig, LanguageModelTask
from textkit.tasks.translation import TranslationConfig, TranslationTask

__all__ = [
    "ClassificationConfig", "ClassificationTask", "LanguageModelConfig", "LanguageModelTask",
    "Task", "TaskConfig", "TranslationConfig", "TranslationTask", "classification",
    "get_task", "language_model", "list_tasks", "register_task", "translation",
]
