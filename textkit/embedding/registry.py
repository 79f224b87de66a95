"""Registry of pretrained vector sources: GloVe, fastText, word2vec.

``create(kind, source)`` finds the vector file under ``root`` or the cache
``textkit_home() / "embeddings" / kind``, downloads and unpacks it into the cache when absent
(never into a user's ``root``; through
``textkit.data.download``: progress bar, checksum check, no half-written files, an
``OfflineError`` naming the file and folder when offline), loads it, and keeps a binary cache
folder in the cache so the next ``create`` maps the matrix instead of parsing text.

Checksums are SHA-1 digests published by MXNet's ``contrib.text`` embedding module (GloVe
archives and text files, three fastText ``wiki.*.vec`` files); sources without a published
digest are downloaded unchecked. ``textkit.data`` is imported only when a file is fetched, so
reloading a cache stays cheap.
"""

from __future__ import annotations

import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

from textkit.embedding.token_embedding import TokenEmbedding, Unknown

__all__ = ["PretrainedSource", "create", "get_source", "list_sources", "register_source"]


@dataclass(frozen=True)
class PretrainedSource:
    """Where a pretrained embedding comes from.

    Attributes:
      kind: ``"glove"``, ``"fasttext"`` or ``"word2vec"``.
      name: the source name passed to ``create``.
      url: the file to download (an archive when ``member`` is set or it ends in ``.bin.gz``).
      filename: the vector file loaded from the folder.
      format: its format (see ``textkit.embedding.formats``).
      member: the archive member to extract as ``filename``, or None.
      url_sha1: published SHA-1 of the download, or None.
      file_sha1: published SHA-1 of ``filename``, or None.
    """

    kind: str
    name: str
    url: str
    filename: str
    format: str
    member: str | None = None
    url_sha1: str | None = None
    file_sha1: str | None = None

    @property
    def needs_extraction(self) -> bool:
        return self.member is not None or (self.url.endswith(".gz")
                                           and not self.filename.endswith(".gz"))


_SOURCES: dict[tuple[str, str], PretrainedSource] = {}


def register_source(source: PretrainedSource) -> None:
    """Add (or replace) a source, e.g. a mirror or a private file:// copy."""
    _SOURCES[(source.kind, source.name)] = source


# ---------------------------------------------------------------------------- GloVe
_GLOVE_URL = "https://nlp.stanford.edu/data/"
_GLOVE_ARCHIVES = {  # archive -> published SHA-1
    "glove.6B.zip": "b64e54f1877d2f735bdd000c1d7d771e25c7dfdc",
    "glove.42B.300d.zip": "f8e722b39578f776927465b71b231bae2ae8776a",
    "glove.840B.300d.zip": "8084fbacc2dee3b1fd1ca4cc534cbfff3519ed0d",
    "glove.twitter.27B.zip": "dce69c404025a8312c323197347695e81fd529fc",
}
_GLOVE_FILES = {  # name -> published SHA-1 of name + ".txt"
    "glove.6B.50d": "21bf566a9d27f84d253e0cd4d4be9dcc07976a6d",
    "glove.6B.100d": "16b1dbfaf35476790bd9df40c83e2dfbd05312f1",
    "glove.6B.200d": "17d0355ddaa253e298ede39877d1be70f99d9148",
    "glove.6B.300d": "646443dd885090927f8215ecf7a677e9f703858d",
    "glove.42B.300d": "876767977d6bd4d947c0f84d44510677bc94612a",
    "glove.840B.300d": "294b9f37fa64cce31f9ebb409c266fc379527708",
    "glove.twitter.27B.25d": "767d80889d8c8a22ae7cd25e09d0650a6ff0a502",
    "glove.twitter.27B.50d": "9585f4be97e286339bf0112d0d3aa7c15a3e864d",
    "glove.twitter.27B.100d": "1bbeab8323c72332bd46ada0fc3c99f2faaa8ca8",
    "glove.twitter.27B.200d": "7921c77a53aa5977b1d9ce3a7c4430cbd9d1207a",
}
for _name, _sha1 in _GLOVE_FILES.items():
    _archive = ("glove.twitter.27B.zip" if "twitter" in _name
                else "glove.6B.zip" if ".6B." in _name else _name + ".zip")
    register_source(PretrainedSource(
        "glove", _name, _GLOVE_URL + _archive, _name + ".txt", "glove", member=_name + ".txt",
        url_sha1=_GLOVE_ARCHIVES[_archive], file_sha1=_sha1))

# ---------------------------------------------------------------------------- fastText
_FASTTEXT_URL = "https://dl.fbaipublicfiles.com/fasttext/"
_FASTTEXT_VEC_SHA1 = {
    "wiki.en": "c1e418f144ceb332b4328d27addf508731fa87df",
    "wiki.simple": "55267c50fbdf4e4ae0fbbda5c73830a379d68795",
    "wiki.zh": "117ab34faa80e381641fbabf3a24bc8cfba44050",
}
_ENGLISH = _FASTTEXT_URL + "vectors-english/"
for _source in (
    PretrainedSource("fasttext", "crawl-300d-2M", _ENGLISH + "crawl-300d-2M.vec.zip",
                     "crawl-300d-2M.vec", "word2vec_text", member="crawl-300d-2M.vec"),
    PretrainedSource("fasttext", "crawl-300d-2M-subword", _ENGLISH + "crawl-300d-2M-subword.zip",
                     "crawl-300d-2M-subword.vec", "word2vec_text",
                     member="crawl-300d-2M-subword.vec"),
    PretrainedSource("fasttext", "crawl-300d-2M-subword.bin",
                     _ENGLISH + "crawl-300d-2M-subword.zip", "crawl-300d-2M-subword.bin",
                     "fasttext_bin", member="crawl-300d-2M-subword.bin"),
    PretrainedSource("fasttext", "wiki-news-300d-1M", _ENGLISH + "wiki-news-300d-1M.vec.zip",
                     "wiki-news-300d-1M.vec", "word2vec_text", member="wiki-news-300d-1M.vec"),
    PretrainedSource("fasttext", "wiki-news-300d-1M-subword",
                     _ENGLISH + "wiki-news-300d-1M-subword.vec.zip",
                     "wiki-news-300d-1M-subword.vec", "word2vec_text",
                     member="wiki-news-300d-1M-subword.vec"),
):
    register_source(_source)

_WIKI = re.compile(r"wiki\.([a-z_\-]+)(\.bin)?")
_CC = re.compile(r"cc\.([a-z_\-]+)\.300(\.bin)?")


def _fasttext_language_source(name: str) -> PretrainedSource | None:
    """``wiki.<lang>[.bin]`` and ``cc.<lang>.300[.bin]`` for any language code."""
    if match := _WIKI.fullmatch(name):
        lang, binary = match.groups()
        if binary:  # the zip holds the model and its .vec
            return PretrainedSource(
                "fasttext", name, f"{_FASTTEXT_URL}vectors-wiki/wiki.{lang}.zip",
                f"wiki.{lang}.bin", "fasttext_bin", member=f"wiki.{lang}.bin")
        return PretrainedSource(
            "fasttext", name, f"{_FASTTEXT_URL}vectors-wiki/wiki.{lang}.vec", f"wiki.{lang}.vec",
            "word2vec_text", url_sha1=_FASTTEXT_VEC_SHA1.get(name),
            file_sha1=_FASTTEXT_VEC_SHA1.get(name))
    if match := _CC.fullmatch(name):
        lang, binary = match.groups()
        if binary:
            return PretrainedSource(
                "fasttext", name, f"{_FASTTEXT_URL}vectors-crawl/cc.{lang}.300.bin.gz",
                f"cc.{lang}.300.bin", "fasttext_bin")
        return PretrainedSource(  # text vectors are read gzip-compressed as they are
            "fasttext", name, f"{_FASTTEXT_URL}vectors-crawl/cc.{lang}.300.vec.gz",
            f"cc.{lang}.300.vec.gz", "word2vec_text")
    return None


# ---------------------------------------------------------------------------- word2vec
register_source(PretrainedSource(
    "word2vec", "GoogleNews-vectors-negative300",
    "https://s3.amazonaws.com/dl4j-distribution/GoogleNews-vectors-negative300.bin.gz",
    "GoogleNews-vectors-negative300.bin", "word2vec_bin"))


# ---------------------------------------------------------------------------- API
def list_sources(kind: str | None = None) -> dict[str, list[str]]:
    """Registered source names per kind. fastText also accepts ``wiki.<lang>[.bin]`` and
    ``cc.<lang>.300[.bin]`` for every language fastText publishes (listed as patterns)."""
    names: dict[str, list[str]] = {}
    for source_kind, name in _SOURCES:
        names.setdefault(source_kind, []).append(name)
    names.setdefault("fasttext", []).extend(
        ["wiki.<lang>", "wiki.<lang>.bin", "cc.<lang>.300", "cc.<lang>.300.bin"])
    if kind is not None:
        if kind not in names:
            raise KeyError(f"unknown embedding kind {kind!r}; known: {sorted(names)}")
        return {kind: names[kind]}
    return names


def get_source(kind: str, name: str) -> PretrainedSource:
    """The registered source ``name`` of ``kind``; a ``KeyError`` lists the known names."""
    source = _SOURCES.get((kind, name))
    if source is None and kind == "fasttext":
        source = _fasttext_language_source(name)
    if source is None:
        known = list_sources().get(kind)
        if known is None:
            raise KeyError(f"unknown embedding kind {kind!r}; known: {sorted(list_sources())}")
        raise KeyError(f"unknown {kind} source {name!r}; known: {', '.join(known)}")
    return source


def _fetch(source: PretrainedSource, folders: list[Path], progress: bool) -> Path:
    """The vector file: the first of ``folders/<filename>`` that exists (verified), else
    downloaded and unpacked into the last folder (the cache)."""
    from textkit.data.download import ChecksumError, check_existing, fetch, fetch_archive

    file_checksum = None if source.file_sha1 is None else ("sha1", source.file_sha1)
    for folder in folders:
        if check_existing(folder / source.filename, file_checksum):
            return folder / source.filename
    cache = folders[-1]
    target = cache / source.filename
    checksum = None if source.url_sha1 is None else ("sha1", source.url_sha1)
    if not source.needs_extraction:
        return fetch([source.url], target, checksum=checksum, progress=progress)
    archive = cache / source.url.rsplit("/", 1)[-1]
    members = None if source.member is None else [source.member]
    fetch_archive([source.url], archive, cache, checksum=checksum, members=members,
                  flatten=True, progress=progress)
    if not target.exists():
        raise FileNotFoundError(f"{archive}: extracting it gave no {source.filename}")
    try:
        check_existing(target, file_checksum)
    except ChecksumError:
        target.unlink()  # extracted by us into the cache just now
        raise ChecksumError(f"{archive}: the extracted {source.filename} does not match the "
                            f"published SHA-1 {source.file_sha1}; it was deleted") from None
    return target


def create(kind: str, source: str, *, root: str | os.PathLike | None = None, cache: bool = True,
           unknown: Unknown | None = None, progress: bool = True,
           encoding_errors: str = "strict", allow_nonfinite: bool = False) -> TokenEmbedding:
    """Load the pretrained embedding ``source`` of ``kind`` (see ``list_sources``).

    ``root`` is a folder holding the vector file; a file not found there is taken from, or
    downloaded into, the cache ``textkit_home()/embeddings/<kind>`` (the default ``root``).
    Nothing is downloaded into a ``root`` you pass, and a file there whose published checksum
    differs raises ``ChecksumError`` and is left unchanged. With ``cache`` the parsed matrix is
    kept in the cache (``<source>.cache``, or ``<source>-<crc of the path>.cache`` for a file in
    ``root``) and later calls map it; a ``<root>/<source>.cache`` made by ``save`` is read too.
    """
    from textkit.data.download import textkit_home

    spec = get_source(kind, source)
    home = textkit_home() / "embeddings" / kind
    folders = list(dict.fromkeys([Path(root) if root is not None else home, home]))
    user_file = folders[0] / spec.filename
    cache_dir = home / (f"{spec.name}.cache" if folders[0] == home or not user_file.is_file()
                        else f"{spec.name}-{zlib.crc32(os.fsencode(user_file.resolve())):08x}"
                             ".cache")
    if cache:
        for candidate in (folders[0] / f"{spec.name}.cache", cache_dir):
            if (candidate / "meta.json").is_file():
                return TokenEmbedding.load(candidate, unknown=unknown)
    path = _fetch(spec, folders, progress)
    embedding = TokenEmbedding.from_file(path, spec.format, unknown=unknown,
                                         encoding_errors=encoding_errors, progress=progress,
                                         allow_nonfinite=allow_nonfinite)
    if cache:
        embedding.save(cache_dir)
    return embedding
