"""Decoding: the typed model contract, beam search, greedy search, sampling, the Translator."""

from textkit.decoding.beam_search import beam_search
from textkit.decoding.contract import DecodeOutput, length_penalty, model_step_fn, prefill
from textkit.decoding.sampling import greedy_search, sample
from textkit.decoding.translator import Translator

__all__ = ["DecodeOutput", "Translator", "beam_search", "greedy_search", "length_penalty",
           "model_step_fn", "prefill", "sample"]
