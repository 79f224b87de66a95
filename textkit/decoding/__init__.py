"""Decoding: the typed model contract, beam search, greedy search, sampling, token filters, the
``Translator`` and the ``Generator`` (decoder-only language models). Knows no model class: models
meet it through the protocols of ``contract``.
"""

from textkit.decoding.beam_search import beam_search
from textkit.decoding.contract import (
    BeamHooks,
    CandidatesHook,
    DecodeOutput,
    Encoded,
    LanguageModel,
    ResizeHook,
    Seq2SeqModel,
    StepFn,
    StepModel,
    StepWrapper,
    length_penalty,
    model_step_fn,
    prefill,
)
from textkit.decoding.filters import ExcludeTokensStep, top_k_top_p
from textkit.decoding.generate import Generation, Generator
from textkit.decoding.generation_config import GenerationConfig
from textkit.decoding.sampling import greedy_search, sample
from textkit.decoding.translator import LongSourceWarning, Translator

__all__ = [
    "BeamHooks", "CandidatesHook", "DecodeOutput", "Encoded", "ExcludeTokensStep", "Generation",
    "GenerationConfig", "Generator", "LanguageModel", "LongSourceWarning", "ResizeHook",
    "Seq2SeqModel", "StepFn", "StepModel", "StepWrapper", "Translator", "beam_search",
    "greedy_search", "length_penalty", "model_step_fn", "prefill", "sample", "top_k_top_p",
]
