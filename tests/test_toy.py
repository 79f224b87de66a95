"""Built-in toy corpora: determinism, splits, lengths, and the translation rules."""

import dataclasses
import math
import re
from collections import Counter

import pytest

import textkit.data.toy as toy
from textkit.data.toy import Clause, NounPhrase, Sentence, render_source, render_target

VERB = {v[0]: i for i, v in enumerate(toy._VERBS)}
NOUN = {n[0]: i for i, n in enumerate(toy._NOUNS)}
ADJ = {a[0]: i for i, a in enumerate(toy._ADJECTIVES)}
PRONOUN = {p[0]: i for i, p in enumerate(toy._PRONOUNS)}


@pytest.fixture(scope="module")
def test_pairs():
    return toy.toy_translation("test")


def _np(noun, det="the", adjs=(), plural=False):
    return NounPhrase(noun=NOUN[noun], determiner=det, adjectives=tuple(ADJ[a] for a in adjs),
                      plural=plural)


def test_rendering_rules_on_hand_built_sentences():
    # adjective after the noun, agreement, object case of a masculine article, future infinitive
    # at the end of the main clause
    s = Sentence(main=Clause(_np("woman", adjs=("old",)), VERB["see"], "future",
                             obj=_np("dog", adjs=("big", "red"))))
    assert render_source(s) == "the old woman will see the big red dog ."
    assert render_target(s) == "la fema veka volat ilen kano grando rubo vidir ."
    # plural agreement, number without article, subordinate clause verb-final after a comma
    sub = Clause(NounPhrase(pronoun=PRONOUN["we"]), VERB["buy"], "past",
                 obj=_np("car", det="two", adjs=("new",), plural=True))
    s = Sentence(main=Clause(_np("cat", det="my"), VERB["sleep"], "present"), link="because",
                 second=sub)
    assert render_source(s) == "my cat sleeps because we bought two new cars ."
    assert render_target(s) == "meja mirka dormat , kar nos du autos neui komprevamos ."
    # fronted subordinate clause: the main clause inverts (verb before subject)
    s = dataclasses.replace(s, fronted=True)
    assert render_source(s) == "because we bought two new cars , my cat sleeps ."
    assert render_target(s) == "kar nos du autos neui komprevamos , dormat meja mirka ."
    # time adverb inverts too; "a" becomes "an"; that-clause is extraposed and verb-final
    comp = Clause(NounPhrase(name="anna"), VERB["eat"], "present", obj=_np("apple", det="a"))
    s = Sentence(main=Clause(NounPhrase(pronoun=PRONOUN["i"]), VERB["think"], "past",
                             complement=comp), adverb=True)
    assert render_source(s) == "yesterday i thought that anna eats an apple ."
    assert render_target(s) == "jeri pensevo jo , ke anna una pomi manjat ."
    # coordination keeps main-clause order in both clauses
    s = Sentence(main=Clause(NounPhrase(pronoun=PRONOUN["they"]), VERB["run"], "present"),
                 link="but", second=Clause(NounPhrase(pronoun=PRONOUN["you"]), VERB["wait"],
                                           "future"))
    assert render_source(s) == "they run but you will wait ."
    assert render_target(s) == "lor kuran ma tu volas atendir ."


def test_deterministic_and_seeded():
    assert toy.toy_translation("valid", 50) == toy.toy_translation("valid", 50)
    assert toy.toy_translation("valid", 50) != toy.toy_translation("valid", 50, seed=1)
    # a prefix of a larger request is the smaller request
    assert toy.toy_translation("test", 80)[:30] == toy.toy_translation("test", 30)


def test_splits_are_disjoint_with_default_sizes(test_pairs):
    train = toy.toy_translation("train")
    valid = toy.toy_translation("valid")
    assert (len(train), len(valid), len(test_pairs)) == (20000, 500, 500)
    src = [{s for s, _ in seg} for seg in (train, valid, test_pairs)]
    assert [len(x) for x in src] == [20000, 500, 500]  # distinct within a segment
    assert not (src[0] & src[1]) and not (src[0] & src[2]) and not (src[1] & src[2])
    lengths = [len(side.split()) for pair in train for side in pair]
    assert min(lengths) == 3 and 35 <= max(lengths) <= toy.MAX_LENGTH
    src_types = {w for s, _ in train for w in s.split()}
    assert 200 <= len(src_types) <= 400
    with pytest.raises(ValueError, match="unknown segment"):
        toy.toy_translation("dev")


def _target_noun_agreement():
    """Toyish noun form -> agreement class (m/f/n/pl)."""
    table = {}
    for _, _, noun, gender, _ in toy._NOUNS:
        table[noun] = gender
        table[toy.toyish_plural(noun)] = "pl"
    return table


def test_adjectives_follow_and_agree_with_their_noun(test_pairs):
    nouns = _target_noun_agreement()
    stems = {stem for _, stem in toy._ADJECTIVES}
    ending_of = toy._AGREEMENT_ENDING
    checked = 0
    for src, tgt in test_pairs:
        words = tgt.split()
        for i, w in enumerate(words):
            if w[:-1] in stems and w not in nouns:
                j = i - 1
                while words[j][:-1] in stems and words[j] not in nouns:
                    j -= 1
                assert words[j] in nouns, (src, tgt)  # adjectives come right after a noun
                assert w[-1] == ending_of[nouns[words[j]]], (src, tgt)
                checked += 1
        # and in the source they come before it: every source adjective precedes a noun
        assert not re.search(r"\b(" + "|".join(ADJ) + r") (\.|,|will|that)\b", src)
    assert checked > 200


def test_subordinate_clauses_are_verb_final(test_pairs):
    finite = {toy.toyish_verb(stem, p, t)[0] for *_, stem, _ in toy._VERBS
              for p in toy._PERSON_ENDING for t in ("present", "past", "future")}
    subordinators = {t for _, t in toy._SUBORDINATORS} | {"ke"}
    checked = 0
    for src, tgt in test_pairs:
        for segment in re.split(r" [,.]", tgt):
            words = segment.split()
            if words and words[0] in subordinators:
                clause = " ".join(words).split(" e ")[0].split(" ma ")[0].split()
                assert clause[-1] in finite, (src, tgt)
                checked += 1
    assert checked > 100


def test_verb_agrees_with_pronoun_subject(test_pairs):
    checked = 0
    for src, tgt in test_pairs:
        first = src.split()[0]
        if first in PRONOUN:
            person = toy._PRONOUNS[PRONOUN[first]][4]
            verb = tgt.split()[1]
            assert verb.endswith(toy._PERSON_ENDING[person]), (src, tgt)
            if " will " in f" {src.split(' that ')[0]} " and src.split()[1] == "will":
                assert verb.startswith("vol"), (src, tgt)
            checked += 1
    assert checked > 50


def test_write_toy_translation(tmp_path):
    paths = toy.write_toy_translation(tmp_path, sizes={"train": 40, "valid": 5, "test": 5})
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"{s}.{x}" for s in ("train", "valid", "test") for x in ("src", "tgt"))
    src = paths["train.src"].read_text(encoding="utf-8").splitlines()
    tgt = paths["train.tgt"].read_text(encoding="utf-8").splitlines()
    assert list(zip(src, tgt)) == toy.toy_translation("train", 40)


def _perplexity(model, lines):
    nll, count = 0.0, 0
    for line in lines:
        prev = "<s>"
        for w in line.split() + ["</s>"]:
            nll -= math.log(model(prev, w))
            count += 1
            prev = w
    return math.exp(nll / count)


def test_lm_corpus_has_structure_beyond_unigrams(tmp_path):
    train = toy.toy_lm_corpus("train", 5000)
    valid = toy.toy_lm_corpus("valid", 500)
    assert not set(train) & set(valid)
    assert toy.toy_lm_corpus("valid", 500) == valid
    unigram = Counter(w for line in train for w in line.split() + ["</s>"])
    bigram = Counter((a, b) for line in train
                     for a, b in zip(["<s>"] + line.split(), line.split() + ["</s>"]))
    context = Counter()
    for (a, _), c in bigram.items():
        context[a] += c
    total, types = sum(unigram.values()), len(unigram) + 1

    def p_unigram(_, w):
        return (unigram[w] + 1) / (total + types)

    def p_bigram(a, w):  # interpolated with the unigram
        return 0.9 * bigram[(a, w)] / max(context[a], 1) + 0.1 * p_unigram(a, w)

    ppl_uni, ppl_bi = _perplexity(p_unigram, valid), _perplexity(p_bigram, valid)
    assert ppl_bi < 0.4 * ppl_uni, (ppl_bi, ppl_uni)
    paths = toy.write_toy_lm_corpus(tmp_path, sizes={"train": 20, "valid": 3, "test": 3})
    assert paths["train"].read_text(encoding="utf-8").splitlines() == toy.toy_lm_corpus(
        "train", 20)


def test_sentiment_labels_follow_words_and_negation():
    data = toy.toy_sentiment("train")
    assert len(data) == 4000 and len({s for s, _ in data}) == 4000
    assert 0.45 < sum(label for _, label in data) / len(data) < 0.55
    test = toy.toy_sentiment("test")
    assert not {s for s, _ in data} & {s for s, _ in test}
    positive, negative = set(toy._POSITIVE), set(toy._NEGATIVE)
    checked = Counter()
    for sentence, label in data:
        m = re.fullmatch(r"the \w+ (is|was|are|were)( not| never| hardly)?( \w+)? (\w+) \.",
                         sentence)
        if m and m.group(4) in positive | negative:
            expected = (m.group(4) in positive) != (m.group(2) is not None)
            assert label == int(expected), sentence
            checked[m.group(2) is not None] += 1
        m = re.fullmatch(r".* but the \w+ (is|was|are|were)( \w+)? (\w+) \.", sentence)
        if m and m.group(3) in positive | negative and m.group(2) not in (
                " not", " never", " hardly"):
            assert label == int(m.group(3) in positive), sentence
            checked["but"] += 1
    assert checked[True] > 100 and checked[False] > 100 and checked["but"] > 20
