"""Text corpora as TFDS datasets in the array_record format (no TensorFlow needed: read through
``builder.as_data_source``), split into train and validation documents.

A document is a run of ``lines_per_document`` consecutive non-empty lines of one file (ALBERT's
input format: one sentence per line, documents apart); its split follows a hash of its id, so
it is the same on every machine. The builder's config name is a fingerprint of the files (paths,
sizes, modification times) and the settings: a cached build is never stale.
"""
from __future__ import annotations

import hashlib
import os
import pathlib
import re
from typing import Optional, Sequence

from normattn_jax._extras import require
from normattn_jax.validation import check_int

tfds = require("tensorflow_datasets", "pretrain")

SPLITS = ("train", "validation")


def _fingerprint(files: Sequence[str], *settings) -> str:
  h = hashlib.sha256(repr(settings).encode())
  for f in files:
    stat = os.stat(f)
    h.update(f"{os.path.abspath(f)}:{stat.st_size}:{stat.st_mtime_ns}".encode())
  return "files_" + h.hexdigest()[:16]


class TooFewDocuments(ValueError):
  """A split with fewer documents than it needs.

  ``facts`` says how many there are and why, ``split`` which split it is; the message adds
  what to change among the arguments of the call that raised it. A caller that set those
  arguments from its own fields (pre-training's config) names its fields instead.
  """

  def __init__(self, split: str, facts: str, advice: str):
    super().__init__(f"{facts}; {advice}")
    self.split, self.facts = split, facts


def split_of(document_id: str, validation_fraction: float) -> str:
  """"validation" for a deterministic ``validation_fraction`` of the document ids.

  Args:
    document_id: the document's id (a file's name and index, or an article's title).
    validation_fraction: the share of ids held out, in [0, 1].

  Returns:
    "validation" or "train".
  """
  bucket = int(hashlib.sha256(document_id.encode()).hexdigest()[:8], 16) / 0x100000000
  return "validation" if bucket < validation_fraction else "train"


def file_documents(path: str, lines_per_document: int):
  """``(id, text)`` of the documents of one file: runs of non-empty, whitespace-normalised
  lines joined by newlines.

  Args:
    path: a UTF-8 text file (undecodable bytes are replaced).
    lines_per_document: non-empty lines per document (the last may have fewer).

  Yields:
    ``("<file name>:<index>", text)``.
  """
  with open(path, encoding="utf-8", errors="replace") as f:
    lines = [" ".join(line.split()) for line in f]
  lines = [line for line in lines if line]
  name = pathlib.Path(path).name
  for start in range(0, len(lines), lines_per_document):
    yield f"{name}:{start // lines_per_document}", "\n".join(
        lines[start:start + lines_per_document])


def split_counts(files: Sequence[str], lines_per_document: int, validation_fraction: float,
                 enough: Optional[int] = None) -> dict:
  """Documents per split of the text files; with ``enough``, the count stops once every split
  has that many (a quick check of a large corpus)."""
  counts = dict.fromkeys(SPLITS, 0)
  for path in files:
    for doc_id, _ in file_documents(path, lines_per_document):
      counts[split_of(doc_id, validation_fraction)] += 1
    if enough is not None and min(counts.values()) >= enough:
      break
  return counts


def _check_splits(files: Sequence[str], lines_per_document: int,
                  validation_fraction: float) -> None:
  """An empty split raises here, naming the files and what to change, rather than as TFDS's
  "No examples were yielded" in the middle of the build."""
  counts = split_counts(files, lines_per_document, validation_fraction)
  if not sum(counts.values()):
    raise ValueError(f"the text files {list(files)} hold no non-empty line; add text")
  empty = [split for split in SPLITS if not counts[split]]
  if empty:
    raise TooFewDocuments(
        empty[0],
        f"the {empty[0]!r} split would have no document: the text files {list(files)} make "
        f"{sum(counts.values())} document(s) of {lines_per_document} non-empty lines, "
        f"{counts['validation']} of them held out for validation at a fraction of "
        f"{validation_fraction}",
        f"add text, lower lines_per_document={lines_per_document} or "
        f"{fraction_change(empty[0])} validation_fraction={validation_fraction}")


def fraction_change(split: str) -> str:
  """How the validation fraction must move to give ``split`` more documents."""
  return "raise" if split == "validation" else "lower"


class TextFiles(tfds.core.GeneratorBasedBuilder):
  """Local text files as a TFDS dataset of documents ``{"id", "text"}``."""
  VERSION = tfds.core.Version("1.0.0")

  def __init__(self, *, files: Sequence[str], lines_per_document: int = 64,
               validation_fraction: float = 0.05, **kwargs):
    if not files:
      raise ValueError("files must list at least one text file")
    missing = [str(f) for f in files if not os.path.isfile(f)]
    if missing:
      raise ValueError(f"files: no such file(s): {missing}")
    if not 0.0 < validation_fraction < 1.0:
      raise ValueError(f"validation_fraction must lie in (0, 1), got {validation_fraction!r}")
    check_int("lines_per_document", lines_per_document, low=2)
    self._files = [str(f) for f in files]
    self._lines_per_document = lines_per_document
    self._validation_fraction = validation_fraction
    name = _fingerprint(self._files, lines_per_document, validation_fraction)
    kwargs.setdefault("file_format", "array_record")
    super().__init__(config=tfds.core.BuilderConfig(name=name), **kwargs)

  def _info(self):
    return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(
        {"id": tfds.features.Text(), "text": tfds.features.Text()}))

  def _split_generators(self, dl_manager):
    del dl_manager
    _check_splits(self._files, self._lines_per_document, self._validation_fraction)
    return {split: self._generate_examples(split) for split in SPLITS}

  def _generate_examples(self, split):
    for path in self._files:
      for doc_id, text in file_documents(path, self._lines_per_document):
        if split_of(doc_id, self._validation_fraction) == split:
          yield doc_id, {"id": doc_id, "text": text}


def text_file_sources(files: Sequence[str], data_dir: str, *, lines_per_document: int = 64,
                      validation_fraction: float = 0.05) -> dict:
  """Build (once) and open the dataset: split name -> random-access data source.

  Args:
    files: local text files, at least one.
    data_dir: TFDS's data folder.
    lines_per_document: non-empty lines per document, an integer >= 2.
    validation_fraction: the share of documents held out, in (0, 1).

  Returns:
    ``{"train": source, "validation": source}``, each yielding ``{"id", "text"}``.

  Raises:
    ValueError: if a file is missing, a setting is out of range, or a split would be empty.
  """
  builder = TextFiles(files=files, lines_per_document=lines_per_document,
                      validation_fraction=validation_fraction, data_dir=data_dir)
  builder.download_and_prepare()
  return {split: builder.as_data_source(split=split) for split in SPLITS}


def wikipedia_sources(data_dir: str, config: str = "20231101.en",
                      validation_fraction: float = 0.05) -> dict:
  """English Wikipedia through TFDS's ``wikipedia`` builder (array_record): needs a network,
  and TFDS prepares it with Apache Beam (``pip install apache-beam mwparserfromhell``). It has
  one split; validation takes a deterministic fraction of the articles by title.

  Args:
    data_dir: TFDS's data folder.
    config: the ``wikipedia`` config (dump date and language).
    validation_fraction: the share of articles held out.

  Returns:
    ``{"train": source, "validation": source}``, iterables of ``{"id", "text"}``.
  """
  builder = tfds.builder(f"wikipedia/{config}", data_dir=data_dir, file_format="array_record")
  builder.download_and_prepare()
  source = builder.as_data_source(split="train")
  return {split: _FilteredSource(source, split, validation_fraction) for split in SPLITS}


class _FilteredSource:
  """The articles of one split of a single-split source, as ``{"id", "text"}`` documents
  with one sentence per line."""

  def __init__(self, source, split, validation_fraction):
    self._source, self._split, self._fraction = source, split, validation_fraction

  def __iter__(self):
    for example in self._source:
      title = _text(example["title"])
      if split_of(title, self._fraction) == self._split:
        yield {"id": title, "text": "\n".join(sentences(_text(example["text"])))}


def _text(value) -> str:
  return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def sentences(text: str) -> list[str]:
  """Lines of a text split further at sentence ends (". ", "! ", "? ").

  Args:
    text: the text.

  Returns:
    The non-empty sentences, stripped.
  """
  out = []
  for line in text.split("\n"):
    out += [s.strip() for s in re.split(r"(?<=[.!?])\s+", line) if s.strip()]
  return out
