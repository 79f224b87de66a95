"""Generated span data for the encoder recipes' toy runs (no download): questions answered by a
span of their paragraph, and sentences with named entities. Jax-free, deterministic per
``(segment, seed)``.

``toy_questions``: a paragraph of facts such as "the color of anna 's car is red ." and
filler sentences; the question "what is the color of anna 's car ?" has the fact's value as its
answer (every answer occurs once in its paragraph). ``toy_entities``: sentences mixing common
words with person names (``PER``), cities (``LOC``) and companies (``ORG``), tagged BIO; names
and companies may take two words (``B-`` then ``I-``).
"""

from __future__ import annotations

import random

from textkit.data.conll import TaggedSentence
from textkit.data.squad import Answer, Question

__all__ = ["toy_entities", "toy_questions"]

_OWNERS = ["anna", "tom", "maria", "paul", "lisa", "max", "eva", "ben", "nora", "omar"]
_THINGS = ["car", "house", "dog", "boat", "garden", "bike", "phone", "book"]
_ATTRIBUTES = {
    "color": ["red", "blue", "green", "black", "white", "yellow", "grey", "brown"],
    "size": ["small", "large", "tiny", "huge", "medium"],
    "city": ["paris", "berlin", "rome", "madrid", "oslo", "vienna", "lisbon", "prague"],
    "age": ["new", "old", "ancient", "modern", "recent"],
}
_FILLER = ["the weather was calm that day .", "nobody said a word about it .",
           "it rained in the morning .", "the shop closed early .",
           "a bird sang on the roof .", "the train was late again ."]

_FIRST = ["anna", "tom", "maria", "paul", "lisa", "omar", "nora", "ben", "eva", "max"]
_LAST = ["smith", "jones", "garcia", "berg", "rossi", "novak"]
_CITIES = ["paris", "berlin", "rome", "madrid", "oslo", "vienna", "lisbon", "prague"]
_COMPANIES = [["acme"], ["globex"], ["initech"], ["umbrella", "corp"], ["stark", "industries"]]
_VERBS = ["met", "called", "visited", "joined", "left", "praised"]
_WORDS = ["yesterday", "today", "again", "quickly", "with", "friends", "in", "the", "morning",
          "after", "work", "and", "then"]


def _rng(kind: str, segment: str, seed: int) -> random.Random:
    return random.Random(f"textkit-toy-{kind}-{seed}-{segment}")


def toy_questions(segment: str = "train", num: int = 1000, seed: int = 0) -> list[Question]:
    """``num`` generated questions of ``segment`` (module docstring), ids ``toy-<segment>-<i>``."""
    rng = _rng("questions", segment, seed)
    questions = []
    for i in range(num):
        facts = {}
        while len(facts) < rng.randint(2, 4):
            owner, thing = rng.choice(_OWNERS), rng.choice(_THINGS)
            attribute = rng.choice(list(_ATTRIBUTES))
            facts[(owner, thing, attribute)] = rng.choice(_ATTRIBUTES[attribute])
        sentences = [f"the {a} of {o} 's {t} is {v} ." for (o, t, a), v in facts.items()]
        sentences += rng.sample(_FILLER, rng.randint(0, 3))
        rng.shuffle(sentences)
        context = " ".join(sentences)
        (owner, thing, attribute), value = rng.choice(list(facts.items()))
        fact = f"the {attribute} of {owner} 's {thing} is {value} ."
        start = context.index(fact) + len(fact) - len(value) - 2
        questions.append(Question(f"toy-{segment}-{i}",
                                  f"what is the {attribute} of {owner} 's {thing} ?", context,
                                  (Answer(value, start),)))
    return questions


def _entity(rng: random.Random) -> tuple[list[str], str]:
    kind = rng.choice(["PER", "LOC", "ORG"])
    if kind == "PER":
        words = [rng.choice(_FIRST)] + ([rng.choice(_LAST)] if rng.random() < 0.5 else [])
    elif kind == "LOC":
        words = [rng.choice(_CITIES)]
    else:
        words = list(rng.choice(_COMPANIES))
    return words, kind


def toy_entities(segment: str = "train", num: int = 1000, seed: int = 0) -> list[TaggedSentence]:
    """``num`` generated BIO-tagged sentences of ``segment`` (module docstring)."""
    rng = _rng("entities", segment, seed)
    sentences = []
    for _ in range(num):
        tokens: list[str] = []
        tags: list[str] = []
        for _ in range(rng.randint(1, 3)):
            words, kind = _entity(rng)
            tokens += words
            tags += [f"B-{kind}"] + [f"I-{kind}"] * (len(words) - 1)
            filler = [rng.choice(_VERBS)] + rng.sample(_WORDS, rng.randint(0, 3))
            tokens += filler
            tags += ["O"] * len(filler)
        tokens.append(".")
        tags.append("O")
        sentences.append(TaggedSentence(tokens, tags))
    return sentences
