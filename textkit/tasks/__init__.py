"""Tasks: one typed contract (``Task``, ``TaskConfig``) implemented by translation, language
modelling, sentence classification on word vectors and the encoder fine-tuning tasks
(sequence classification, question answering, token classification), and the registry of tasks
(``get_task``, ``list_tasks``).

A task builds, from one frozen config, the pieces ``textkit.training.fit`` runs: its data
(``read_split``, ``prepare``, ``make_loader``), its model (``build_model``, ``init_params``),
its loss and default optimizer (``make_loss``, ``optimizer -> (tx, learning_rate)``) and
``evaluate(model, params, data) -> dict[str, float]``. These methods are the API; the modules'
free functions are the building blocks they call with the run's settings, named after what
they build (``translation.seq2seq_loader``, ``language_model.lm_optimizer``, ...). None owns a
training loop: the recipes in ``examples/`` hand these pieces to ``fit``. See
``textkit.tasks.base``.

Modules: ``translation``, ``language_model``, ``word_vector_classification`` (registered as
``classification``), ``encoder_task`` (the encoder fine-tuning base class),
``sequence_classification``, ``question_answering``, ``token_classification``, ``causal_lm``
(decoder-only language models: fine-tuning checkpoints, or presets from scratch),
``pretraining`` (encoder pretraining from raw text: masked LM, ELECTRA; its networks and loss
in ``pretraining_objectives``).
"""

from textkit.tasks import (
    causal_lm,
    encoder_task,
    language_model,
    pretraining,
    question_answering,
    sequence_classification,
    token_classification,
    translation,
    word_vector_classification,
)
from textkit.tasks.base import Task, TaskConfig, get_task, list_tasks, register_task
from textkit.tasks.causal_lm import CausalLMConfig, CausalLMTask
from textkit.tasks.encoder_task import EncoderTask, EncoderTaskConfig
from textkit.tasks.language_model import LanguageModelConfig, LanguageModelTask
from textkit.tasks.question_answering import QuestionAnsweringConfig, QuestionAnsweringTask
from textkit.tasks.sequence_classification import (
    SequenceClassificationConfig,
    SequenceClassificationTask,
)
from textkit.tasks.token_classification import TokenClassificationConfig, TokenClassificationTask
from textkit.tasks.translation import TranslationConfig, TranslationTask
from textkit.tasks.word_vector_classification import ClassificationConfig, ClassificationTask

__all__ = [
    "CausalLMConfig", "CausalLMTask", "causal_lm", "pretraining",
    "ClassificationConfig", "ClassificationTask", "EncoderTask", "EncoderTaskConfig",
    "LanguageModelConfig", "LanguageModelTask", "QuestionAnsweringConfig",
    "QuestionAnsweringTask", "SequenceClassificationConfig", "SequenceClassificationTask",
    "Task", "TaskConfig", "TokenClassificationConfig", "TokenClassificationTask",
    "TranslationConfig", "TranslationTask", "encoder_task", "get_task", "language_model",
    "list_tasks", "question_answering", "register_task", "sequence_classification",
    "token_classification", "translation", "word_vector_classification",
]
