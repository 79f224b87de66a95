"""Tasks: one typed contract (``Task``, ``TaskConfig``) implemented by translation, language
modelling, classification and the encoder fine-tuning tasks (sequence classification, question
answering, token classification), and the registry of tasks (``get_task``, ``list_tasks``).

A task builds, from one frozen config, the pieces ``textkit.training.fit`` runs: its data
(``read_split``, ``prepare``, ``make_loader``), its model (``build_model``, ``init_params``),
its loss and default optimizer (``make_loss``, ``optimizer -> (tx, learning_rate)``) and
``evaluate(model, params, data) -> dict[str, float]``. None owns a training loop: the recipes
in ``examples/`` hand these pieces to ``fit``. See ``textkit.tasks.base``.
"""

from textkit.tasks import (
    classification,
    language_model,
    question_answering,
    text_classification,
    token_classification,
    translation,
)
from textkit.tasks.base import Task, TaskConfig, get_task, list_tasks, register_task
from textkit.tasks.classification import ClassificationConfig, ClassificationTask
from textkit.tasks.finetune import EncoderTask, EncoderTaskConfig
from textkit.tasks.language_model import LanguageModelConfig, LanguageModelTask
from textkit.tasks.question_answering import QuestionAnsweringConfig, QuestionAnsweringTask
from textkit.tasks.text_classification import TextClassificationConfig, TextClassificationTask
from textkit.tasks.token_classification import TokenClassificationConfig, TokenClassificationTask
from textkit.tasks.translation import TranslationConfig, TranslationTask

__all__ = [
    "ClassificationConfig", "ClassificationTask", "EncoderTask", "EncoderTaskConfig",
    "LanguageModelConfig", "LanguageModelTask", "QuestionAnsweringConfig",
    "QuestionAnsweringTask", "Task", "TaskConfig", "TokenClassificationConfig",
    "TokenClassificationTask",
    "TextClassificationConfig", "TextClassificationTask", "TranslationConfig",
    "TranslationTask", "classification", "get_task", "language_model", "list_tasks",
    "question_answering", "register_task", "text_classification", "token_classification",
    "translation",
]
