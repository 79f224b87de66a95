"""Built-in generated corpora: no download, deterministic from a seed.

Three corpora, each split into ``train`` / ``valid`` / ``test``:

* ``toy_translation``: English-like sentences and their translation into *Toyish*, an invented
  language with its own lexicon and rules. Toyish differs from the source by

  - word order: adjectives follow the noun; the finite verb comes second in a main clause
    (a fronted time adverb or subordinate clause moves the subject after the verb); the future
    infinitive goes to the end of its clause; subordinate clauses are verb-final (infinitive,
    then the finite verb) and are preceded by a comma; ``that``-clauses are extraposed;
  - agreement: articles agree with the noun in gender (m/f/n), number and case (subject vs
    object/prepositional); adjectives and possessives agree in gender and number (endings
    ``-o -a -e -i``); the verb ending agrees with the subject's person and number (``-o -as -at
    -amos -an``), the past inserts ``-ev-``, the future is the auxiliary ``vol-`` + ``-ir``.

  Example (source, then target)::

      if our happy doctor thought that the red friend will run , we fall .
      se nejo medik felico pensevat , ke il amik rubo kurir volat , kadamos nos .

  The mapping is a function of the source (no synonyms), so a small Transformer learns it.
* ``toy_lm_corpus``: source-side sentences of the same grammar, one per line.
* ``toy_sentiment``: short review sentences with a 0/1 label decided by sentiment words,
  negation (``not good`` is negative) and contrast (``... but <clause>`` takes the second clause).

Splits are by a hash of the sentence, so a test sentence never occurs in train, and every
segment can be generated alone with any size. Pure Python (``random.Random``, stable across
Python versions); never imports jax.
"""

from __future__ import annotations

import dataclasses
import os
import random
import zlib
from collections.abc import Callable
from pathlib import Path

from textkit._io import write_text_atomic

__all__ = [
    "NounPhrase",
    "Clause",
    "Sentence",
    "render_source",
    "render_target",
    "toy_translation",
    "write_toy_translation",
    "toy_lm_corpus",
    "write_toy_lm_corpus",
    "toy_sentiment",
]

SEGMENTS = ("train", "valid", "test")
MAX_LENGTH = 40  # tokens, source and target, punctuation included

# --------------------------------------------------------------------------------- lexicon
# Nouns: English singular, English plural, Toyish singular, gender, animate (can be a subject).
_NOUNS = [
    ("dog", "dogs", "kano", "m", True), ("man", "men", "viro", "m", True),
    ("boy", "boys", "puer", "m", True), ("king", "kings", "rega", "m", True),
    ("friend", "friends", "amik", "m", True), ("doctor", "doctors", "medik", "m", True),
    ("bird", "birds", "ornit", "m", True), ("tree", "trees", "arbo", "m", False),
    ("river", "rivers", "fluvi", "m", False), ("book", "books", "libre", "m", False),
    ("mountain", "mountains", "monte", "m", False), ("bread", "breads", "pano", "m", False),
    ("garden", "gardens", "gardin", "m", False), ("letter", "letters", "leter", "m", False),
    ("cat", "cats", "mirka", "f", True), ("woman", "women", "fema", "f", True),
    ("girl", "girls", "pura", "f", True), ("queen", "queens", "rejin", "f", True),
    ("teacher", "teachers", "magist", "f", True), ("cow", "cows", "bovo", "f", True),
    ("farmer", "farmers", "agrikol", "f", True), ("house", "houses", "domu", "f", False),
    ("table", "tables", "tablo", "f", False), ("door", "doors", "pord", "f", False),
    ("city", "cities", "urba", "f", False), ("song", "songs", "kanson", "f", False),
    ("apple", "apples", "pomi", "f", False), ("window", "windows", "fenestr", "f", False),
    ("child", "children", "infan", "n", True), ("horse", "horses", "ekvo", "n", True),
    ("student", "students", "student", "n", True), ("baby", "babies", "bebe", "n", True),
    ("fish", "fishes", "pisk", "n", True), ("soldier", "soldiers", "soldat", "n", True),
    ("car", "cars", "auto", "n", False), ("boat", "boats", "barko", "n", False),
    ("picture", "pictures", "bild", "n", False), ("village", "villages", "vilaj", "n", False),
    ("flower", "flowers", "flora", "n", False), ("stone", "stones", "stono", "n", False),
    ("key", "keys", "klavi", "n", False), ("ship", "ships", "navo", "n", False),
]
# Adjectives: English, Toyish stem (+ -o/-a/-e/-i).
_ADJECTIVES = [
    ("big", "grand"), ("small", "pik"), ("old", "vek"), ("young", "jun"), ("red", "rub"),
    ("blue", "azur"), ("green", "verd"), ("black", "nigr"), ("white", "alb"), ("happy", "felic"),
    ("sad", "trist"), ("tall", "alt"), ("short", "kurt"), ("new", "neu"), ("beautiful", "bel"),
    ("ugly", "led"), ("fast", "rapid"), ("slow", "lent"), ("strong", "fort"), ("weak", "febl"),
    ("rich", "rik"), ("poor", "paupr"), ("clever", "sag"), ("quiet", "kalm"),
]
# Verbs: base, 3rd singular, past, Toyish stem, kind (t: transitive, i: intransitive, c: clause).
_VERBS = [
    ("see", "sees", "saw", "vid", "t"), ("like", "likes", "liked", "plez", "t"),
    ("hear", "hears", "heard", "aud", "t"), ("find", "finds", "found", "trov", "t"),
    ("take", "takes", "took", "pren", "t"), ("buy", "buys", "bought", "kompr", "t"),
    ("sell", "sells", "sold", "vend", "t"), ("eat", "eats", "ate", "manj", "t"),
    ("build", "builds", "built", "konstr", "t"), ("paint", "paints", "painted", "pikt", "t"),
    ("carry", "carries", "carried", "port", "t"), ("help", "helps", "helped", "ajut", "t"),
    ("visit", "visits", "visited", "vizit", "t"), ("follow", "follows", "followed", "sekv", "t"),
    ("call", "calls", "called", "vok", "t"), ("watch", "watches", "watched", "gard", "t"),
    ("meet", "meets", "met", "renk", "t"), ("draw", "draws", "drew", "desen", "t"),
    ("sleep", "sleeps", "slept", "dorm", "i"), ("run", "runs", "ran", "kur", "i"),
    ("laugh", "laughs", "laughed", "rid", "i"), ("sing", "sings", "sang", "kant", "i"),
    ("work", "works", "worked", "labor", "i"), ("swim", "swims", "swam", "nag", "i"),
    ("wait", "waits", "waited", "atend", "i"), ("dance", "dances", "danced", "danc", "i"),
    ("fall", "falls", "fell", "kad", "i"), ("cry", "cries", "cried", "plor", "i"),
    ("say", "says", "said", "dik", "c"), ("think", "thinks", "thought", "pens", "c"),
    ("know", "knows", "knew", "sap", "c"), ("believe", "believes", "believed", "kred", "c"),
    ("hope", "hopes", "hoped", "esper", "c"),
]
# Pronouns: English subject, English object, Toyish subject, Toyish object, person key.
_PRONOUNS = [
    ("i", "me", "jo", "mem", "1sg"), ("you", "you", "tu", "tem", "2sg"),
    ("he", "him", "el", "lem", "3sg"), ("she", "her", "ela", "lam", "3sg"),
    ("we", "us", "nos", "nom", "1pl"), ("they", "them", "lor", "lom", "3pl"),
]
_NAMES = ["anna", "tom", "maria", "paul", "lisa", "max", "eva", "ben"]  # copied unchanged
_POSSESSIVES = [("my", "mej"), ("your", "tej"), ("his", "sej"), ("her", "hej"), ("our", "nej"),
                ("their", "vej")]
_NUMBERS = [("two", "du"), ("three", "tri"), ("four", "kvar"), ("five", "kvin"), ("six", "ses"),
            ("seven", "sep"), ("eight", "ok"), ("nine", "nau")]
_PREPOSITIONS = [("with", "kon"), ("in", "en"), ("near", "pres"), ("for", "por"),
                 ("from", "de"), ("under", "sub")]
_SUBORDINATORS = [("because", "kar"), ("when", "kvan"), ("although", "malgre"), ("if", "se")]
_COORDINATORS = [("and", "e"), ("but", "ma")]
_TIME_ADVERBS = {"past": ("yesterday", "jeri"), "present": ("today", "hodie"),
                 "future": ("tomorrow", "morga")}
_COMPLEMENTIZER = ("that", "ke")

_AGREEMENT_ENDING = {"m": "o", "f": "a", "n": "e", "pl": "i"}  # adjectives and possessives
_PERSON_ENDING = {"1sg": "o", "2sg": "as", "3sg": "at", "1pl": "amos", "3pl": "an"}
_ARTICLES = {  # (determiner, gender-or-pl, case) -> Toyish
    ("the", "m", "nom"): "il", ("the", "f", "nom"): "la", ("the", "n", "nom"): "lu",
    ("the", "pl", "nom"): "li", ("the", "m", "obl"): "ilen", ("the", "f", "obl"): "la",
    ("the", "n", "obl"): "lu", ("the", "pl", "obl"): "lis",
    ("a", "m", "nom"): "un", ("a", "f", "nom"): "una", ("a", "n", "nom"): "unu",
    ("a", "m", "obl"): "unen", ("a", "f", "obl"): "una", ("a", "n", "obl"): "unu",
    ("some", "pl", "nom"): "kelki", ("some", "pl", "obl"): "kelkis",
}


def toyish_plural(noun: str) -> str:
    """Toyish plural: ``-s`` after a vowel, ``-i`` after a consonant."""
    return noun + ("s" if noun[-1] in "aeiou" else "i")


def toyish_verb(stem: str, person: str, tense: str) -> tuple[str, str | None]:
    """(finite form, infinitive or None) of a Toyish verb for ``person`` and ``tense``."""
    ending = _PERSON_ENDING[person]
    if tense == "present":
        return stem + ending, None
    if tense == "past":
        return stem + "ev" + ending, None
    return "vol" + ending, stem + "ir"


# ------------------------------------------------------------------------ sentence structure
@dataclasses.dataclass(frozen=True)
class NounPhrase:
    """A pronoun (``pronoun`` index), a name, or determiner + adjectives + noun.

    ``determiner`` is "the", "a", "some", a possessive ("my"...) or a number word ("two"...).
    """

    noun: int = -1  # index into the noun table, -1 for a pronoun or a name
    plural: bool = False
    determiner: str = "the"
    adjectives: tuple[int, ...] = ()
    pronoun: int = -1
    name: str = ""

    @property
    def person(self) -> str:
        if self.pronoun >= 0:
            return _PRONOUNS[self.pronoun][4]
        return "3pl" if self.plural else "3sg"


@dataclasses.dataclass(frozen=True)
class Clause:
    """Subject, verb (index into the verb table) and tense, plus what the verb's kind needs:
    an object (transitive), a ``that``-clause (clause verbs), an optional prepositional phrase."""

    subject: NounPhrase
    verb: int
    tense: str  # "present" | "past" | "future"
    obj: NounPhrase | None = None
    preposition: int = -1
    prep_object: NounPhrase | None = None
    complement: Clause | None = None


@dataclasses.dataclass(frozen=True)
class Sentence:
    """A main clause with an optional time adverb in front, and optionally a second clause
    joined by a coordinator (``and``/``but``) or a subordinator placed after or fronted."""

    main: Clause
    adverb: bool = False
    link: str = ""  # "", a coordinator, or a subordinator
    second: Clause | None = None
    fronted: bool = False  # subordinate clause before the main clause


_POSSESSIVE_SRC = dict(_POSSESSIVES)
_NUMBER_SRC = dict(_NUMBERS)
_LINKS = dict(_SUBORDINATORS + _COORDINATORS)


def _source_np(np_: NounPhrase, role: str) -> list[str]:
    if np_.pronoun >= 0:
        return [_PRONOUNS[np_.pronoun][0 if role == "nom" else 1]]
    if np_.name:
        return [np_.name]
    sg, pl = _NOUNS[np_.noun][:2]
    words = [_ADJECTIVES[a][0] for a in np_.adjectives] + [pl if np_.plural else sg]
    det = np_.determiner
    if det == "a" and words[0][0] in "aeiou":
        det = "an"
    return [det] + words


def _target_np(np_: NounPhrase, role: str) -> list[str]:
    if np_.pronoun >= 0:
        return [_PRONOUNS[np_.pronoun][2 if role == "nom" else 3]]
    if np_.name:
        return [np_.name]
    _, _, noun, gender, _ = _NOUNS[np_.noun]
    agree = "pl" if np_.plural else gender
    ending = _AGREEMENT_ENDING[agree]
    det = np_.determiner
    if det in _POSSESSIVE_SRC:
        head = [_POSSESSIVE_SRC[det] + ending]
    elif det in _NUMBER_SRC:
        head = [_NUMBER_SRC[det]]
    else:
        head = [_ARTICLES[(det, agree, role)]]
    noun_form = toyish_plural(noun) if np_.plural else noun
    return head + [noun_form] + [_ADJECTIVES[a][1] + ending for a in np_.adjectives]


def _source_clause(c: Clause) -> list[str]:
    base, third, past = _VERBS[c.verb][:3]
    if c.tense == "future":
        verb = ["will", base]
    elif c.tense == "past":
        verb = [past]
    else:
        verb = [third if c.subject.person == "3sg" else base]
    words = _source_np(c.subject, "nom") + verb
    if c.obj is not None:
        words += _source_np(c.obj, "obl")
    if c.prep_object is not None:
        words += [_PREPOSITIONS[c.preposition][0]] + _source_np(c.prep_object, "obl")
    if c.complement is not None:
        words += [_COMPLEMENTIZER[0]] + _source_clause(c.complement)
    return words


def _target_clause(c: Clause, order: str) -> list[str]:
    """Toyish clause; ``order`` is "main" (S V ...), "inverted" (V S ...) or "sub" (S ... V)."""
    finite, infinitive = toyish_verb(_VERBS[c.verb][3], c.subject.person, c.tense)
    subject = _target_np(c.subject, "nom")
    middle = []
    if c.obj is not None:
        middle += _target_np(c.obj, "obl")
    if c.prep_object is not None:
        middle += [_PREPOSITIONS[c.preposition][1]] + _target_np(c.prep_object, "obl")
    if infinitive is not None:
        middle.append(infinitive)
    if order == "main":
        words = subject + [finite] + middle
    elif order == "inverted":
        words = [finite] + subject + middle
    else:
        words = subject + middle + [finite]
    if c.complement is not None:  # extraposed after the verb
        words += [",", _COMPLEMENTIZER[1]] + _target_clause(c.complement, "sub")
    return words


def render_source(s: Sentence) -> str:
    """The English-like source sentence, tokens separated by single spaces."""
    main = _source_clause(s.main)
    if s.adverb:
        main = [_TIME_ADVERBS[s.main.tense][0]] + main
    if s.second is None:
        return " ".join(main + ["."])
    second = [s.link] + _source_clause(s.second)
    words = second + [","] + main if s.fronted else main + second
    return " ".join(words + ["."])


def render_target(s: Sentence) -> str:
    """The Toyish translation of ``s``, tokens separated by single spaces."""
    inverted = s.adverb or s.fronted
    main = _target_clause(s.main, "inverted" if inverted else "main")
    if s.adverb:
        main = [_TIME_ADVERBS[s.main.tense][1]] + main
    if s.second is None:
        return " ".join(main + ["."])
    link = _LINKS[s.link]
    if s.link in dict(_COORDINATORS):
        words = main + [link] + _target_clause(s.second, "main")
    elif s.fronted:
        words = [link] + _target_clause(s.second, "sub") + [","] + main
    else:
        words = main + [",", link] + _target_clause(s.second, "sub")
    return " ".join(words + ["."])


# ---------------------------------------------------------------------------- random grammar
_ANIMATE = [i for i, n in enumerate(_NOUNS) if n[4]]
_VERBS_OF = {k: [i for i, v in enumerate(_VERBS) if v[4] == k] for k in "tic"}
_TENSES = ("present", "past", "future")


def _random_np(rng: random.Random, role: str) -> NounPhrase:
    r = rng.random()
    if r < (0.25 if role == "nom" else 0.12):
        return NounPhrase(pronoun=rng.randrange(len(_PRONOUNS)))
    if r < (0.37 if role == "nom" else 0.2):
        return NounPhrase(name=rng.choice(_NAMES))
    noun = rng.choice(_ANIMATE) if role == "nom" else rng.randrange(len(_NOUNS))
    plural = rng.random() < 0.35
    if plural:
        det = rng.choice(["the", "the", "some", rng.choice(_POSSESSIVES)[0],
                          rng.choice(_NUMBERS)[0]])
    else:
        det = rng.choice(["the", "the", "a", rng.choice(_POSSESSIVES)[0]])
    num_adj = rng.choices((0, 1, 2), weights=(0.55, 0.35, 0.10))[0]
    adjectives = tuple(rng.sample(range(len(_ADJECTIVES)), num_adj))
    return NounPhrase(noun=noun, plural=plural, determiner=det, adjectives=adjectives)


def _random_clause(rng: random.Random, depth: int) -> Clause:
    r = rng.random()
    kind = "t" if r < 0.55 else ("i" if r < 0.8 or depth >= 2 else "c")
    verb = rng.choice(_VERBS_OF[kind])
    obj = _random_np(rng, "obl") if kind == "t" else None
    prep, prep_obj = -1, None
    if kind != "c" and rng.random() < (0.25 if kind == "t" else 0.5):
        prep, prep_obj = rng.randrange(len(_PREPOSITIONS)), _random_np(rng, "obl")
    complement = _random_clause(rng, depth + 1) if kind == "c" else None
    return Clause(subject=_random_np(rng, "nom"), verb=verb, tense=rng.choice(_TENSES), obj=obj,
                  preposition=prep, prep_object=prep_obj, complement=complement)


def random_sentence(rng: random.Random) -> Sentence:
    """One sentence of the grammar drawn with ``rng`` (no length limit applied)."""
    main = _random_clause(rng, 0)
    adverb = rng.random() < 0.15
    r = rng.random()
    if r < 0.55:
        return Sentence(main=main, adverb=adverb)
    second = _random_clause(rng, 1)
    if r < 0.7:
        return Sentence(main=main, adverb=adverb, link=rng.choice(_COORDINATORS)[0],
                        second=second)
    fronted = not adverb and rng.random() < 0.3
    return Sentence(main=main, adverb=adverb, link=rng.choice(_SUBORDINATORS)[0],
                    second=second, fronted=fronted)


# --------------------------------------------------------------------------------- splitting
_SPLIT_SIZES = {"translation": (20000, 500, 500), "lm": (20000, 2000, 2000),
                "sentiment": (4000, 500, 500)}


def _segment_of(text: str, seed: int) -> str:
    """Hash split: 80 % train, 10 % valid, 10 % test; a sentence is always in one segment."""
    bucket = zlib.crc32(f"{seed}\t{text}".encode()) % 10
    return "test" if bucket == 0 else ("valid" if bucket == 1 else "train")


def _generate(kind: str, segment: str, num: int | None, seed: int,
              draw: Callable[[random.Random], tuple[str, object]]) -> list[tuple[str, object]]:
    """``num`` distinct samples of ``segment``; ``draw`` returns (key text, sample) or ("", None)
    to reject one."""
    if segment not in SEGMENTS:
        raise ValueError(f"unknown segment {segment!r}; expected one of {SEGMENTS}")
    if num is None:
        num = _SPLIT_SIZES[kind][SEGMENTS.index(segment)]
    if num < 0:
        raise ValueError(f"num_sentences must be >= 0, got {num}")
    rng = random.Random(f"textkit-toy-{kind}-{seed}-{segment}")
    seen: set[str] = set()
    out: list[tuple[str, object]] = []
    attempts = 0
    while len(out) < num:
        attempts += 1
        if attempts > 100 * num + 10000:
            raise RuntimeError(f"toy {kind} grammar produced only {len(out)} distinct {segment} "
                               f"samples out of {num} requested")
        key, sample = draw(rng)
        if not key or key in seen or _segment_of(key, seed) != segment:
            continue
        seen.add(key)
        out.append((key, sample))
    return out


def _write_lines(path: Path, lines: list[str]) -> None:
    write_text_atomic(path, "".join(line + "\n" for line in lines))


# ------------------------------------------------------------------------------ public corpora
def _draw_pair(max_length: int) -> Callable[[random.Random], tuple[str, object]]:
    def draw(rng: random.Random) -> tuple[str, object]:
        s = random_sentence(rng)
        src, tgt = render_source(s), render_target(s)
        if max(src.count(" "), tgt.count(" ")) + 1 > max_length:
            return "", None
        return src, tgt
    return draw


def toy_translation(segment: str = "train", num_sentences: int | None = None, seed: int = 0,
                    max_length: int = MAX_LENGTH) -> list[tuple[str, str]]:
    """(source, target) sentence pairs of the toy translation corpus, whitespace-tokenized.

    Default sizes: train 20,000, valid 500, test 500. Sentences are distinct within a segment
    and never shared between segments; both sides have 3 to ``max_length`` tokens.
    """
    return _generate("translation", segment, num_sentences, seed, _draw_pair(max_length))


def write_toy_translation(dirpath: str | os.PathLike, seed: int = 0,
                          sizes: dict[str, int] | None = None,
                          src_suffix: str = "src", tgt_suffix: str = "tgt") -> dict[str, Path]:
    """Write ``{segment}.{src_suffix}`` and ``{segment}.{tgt_suffix}`` files (one sentence per
    line) for the three segments; returns ``{"train.src": path, ...}``. ``sizes`` overrides
    the number of sentences per segment."""
    out_dir = Path(dirpath)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    for segment in SEGMENTS:
        pairs = toy_translation(segment, (sizes or {}).get(segment), seed)
        for suffix, side in ((src_suffix, 0), (tgt_suffix, 1)):
            path = out_dir / f"{segment}.{suffix}"
            _write_lines(path, [p[side] for p in pairs])
            paths[f"{segment}.{suffix}"] = path
    return paths


def toy_lm_corpus(segment: str = "train", num_sentences: int | None = None,
                  seed: int = 0) -> list[str]:
    """Sentences (whitespace-tokenized lines, no end-of-sentence token) of the source-side
    grammar for language modelling. Default sizes: train 20,000, valid 2,000, test 2,000."""

    def draw(rng: random.Random) -> tuple[str, object]:
        line = render_source(random_sentence(rng))
        return (line, None) if line.count(" ") < MAX_LENGTH else ("", None)

    return [line for line, _ in _generate("lm", segment, num_sentences, seed, draw)]


def write_toy_lm_corpus(dirpath: str | os.PathLike, seed: int = 0,
                        sizes: dict[str, int] | None = None) -> dict[str, Path]:
    """Write ``train.txt``, ``valid.txt``, ``test.txt`` (one sentence per line, as PTB)."""
    out_dir = Path(dirpath)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for segment in SEGMENTS:
        path = out_dir / f"{segment}.txt"
        _write_lines(path, toy_lm_corpus(segment, (sizes or {}).get(segment), seed))
        paths[segment] = path
    return paths


# ----------------------------------------------------------------------------------- sentiment
_ASPECTS = ["movie", "film", "plot", "story", "acting", "cast", "music", "ending", "script",
            "dialogue", "director", "soundtrack", "characters", "pacing", "visuals", "humor"]
_PLURAL_ASPECTS = {"characters", "visuals"}
_POSITIVE = ["good", "great", "wonderful", "brilliant", "funny", "moving", "beautiful", "clever",
             "charming", "excellent", "delightful", "gripping", "superb", "fresh"]
_NEGATIVE = ["bad", "boring", "awful", "dull", "terrible", "weak", "silly", "clumsy", "tedious",
             "bland", "messy", "predictable", "painful", "lifeless"]
_POSITIVE_VERBS = [("loved", "love"), ("enjoyed", "enjoy"), ("liked", "like"),
                   ("admired", "admire")]
_NEGATIVE_VERBS = [("hated", "hate"), ("disliked", "dislike"), ("regretted", "regret"),
                   ("resented", "resent")]
_INTENSIFIERS = ["very", "really", "quite", "truly", "so", "rather", "pretty"]
_NEGATORS = ["not", "never", "hardly"]
_OPENERS = ["honestly ,", "overall ,", "to be fair ,", "in the end ,", "frankly ,"]


def _sentiment_clause(rng: random.Random, positive: bool) -> list[str]:
    """A clause whose polarity is ``positive`` after applying its own negation."""
    negated = rng.random() < 0.35
    word_positive = positive != negated
    aspect = rng.choice(_ASPECTS)
    template = rng.random()
    if template < 0.55:  # "the plot was not very good"
        plural = aspect in _PLURAL_ASPECTS
        copula = rng.choice(["are", "were"] if plural else ["is", "was"])
        words = ["the", aspect, copula]
        if negated:
            words.append(rng.choice(_NEGATORS))
        if rng.random() < 0.4:
            words.append(rng.choice(_INTENSIFIERS))
        return words + [rng.choice(_POSITIVE if word_positive else _NEGATIVE)]
    if template < 0.8:  # "i did not enjoy the music"
        past, base = rng.choice(_POSITIVE_VERBS if word_positive else _NEGATIVE_VERBS)
        if negated:
            return ["i", "did", "not", base, "the", aspect]
        adverb = ["really"] if rng.random() < 0.3 else []
        return ["i"] + adverb + [past, "the", aspect]
    words = ["not"] if negated else []  # "not a very clever film"
    adjective = rng.choice(_POSITIVE if word_positive else _NEGATIVE)
    article = "an" if adjective[0] in "aeiou" else "a"
    if rng.random() < 0.4:
        intensifier = rng.choice(_INTENSIFIERS)
        article = "an" if intensifier[0] in "aeiou" else "a"
        return words + [article, intensifier, adjective, aspect]
    return words + [article, adjective, aspect]


def _sentiment_sentence(rng: random.Random) -> tuple[str, object]:
    label = rng.randrange(2)
    positive = bool(label)
    r = rng.random()
    if r < 0.6:
        words = _sentiment_clause(rng, positive)
    elif r < 0.75:  # same polarity on both sides
        words = _sentiment_clause(rng, positive) + ["and"] + _sentiment_clause(rng, positive)
    elif r < 0.9:  # contrast: the clause after "but" decides
        words = _sentiment_clause(rng, not positive) + ["but"] + _sentiment_clause(rng, positive)
    else:  # concession: "although <opposite> , <label>"
        words = ["although"] + _sentiment_clause(rng, not positive) + [","] + \
            _sentiment_clause(rng, positive)
    if rng.random() < 0.15:
        words = rng.choice(_OPENERS).split() + words
    return " ".join(words + ["."]), label


def toy_sentiment(segment: str = "train", num_sentences: int | None = None,
                  seed: int = 0) -> list[tuple[str, int]]:
    """(sentence, label) pairs, label 1 positive / 0 negative, about balanced. Default sizes:
    train 4,000, valid 500, test 500. The label follows the sentiment word, flipped by a
    negator (``not``/``never``/``hardly``, ``did not``); with ``but`` or ``although`` the main
    (second) clause decides."""
    return [(s, int(label)) for s, label in
            _generate("sentiment", segment, num_sentences, seed, _sentiment_sentence)]
