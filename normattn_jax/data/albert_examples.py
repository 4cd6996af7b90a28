"""ALBERT's pre-training examples (google-research/albert ``create_pretraining_data.py``) as a
deterministic, seeded numpy pipeline, and the batches of a run.

Per document (a list of sentences, each a list of token ids): chunks of consecutive sentences up
to a target length (``max_seq_length - 3``; with ``short_seq_prob`` a random shorter one), cut
at a random sentence boundary into A | B; with probability 0.5 A and B are swapped
(``sentence_order_label`` 1, else 0). As in ALBERT, a chunk of a single sentence takes B from a
random other document and is labelled 1 too. ``[CLS] A [SEP] B [SEP]`` with segment ids 0 / 1,
the longer side truncated at a random end. MLM: whole words (a piece that does not start with
"\u2581" joins the word before it) are masked as n-grams of n = 1..3 words with p(n) ~ 1/n,
``min(max_predictions_per_seq, max(1, round(0.15 * len(tokens))))`` predictions, each position
80% [MASK], 10% kept, 10% a random token; [CLS] and [SEP] never. One difference: random tokens
are drawn from the ordinary pieces (ALBERT's draw may pick a control symbol).

``PretrainingData.batch(step, ...)`` is a pure function of its arguments: a fresh seeded
permutation per epoch, so a resumed run sees exactly the batches of an uninterrupted one.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from typing import Sequence

import numpy as np

from normattn_jax.data import tfds_text
from normattn_jax.data.sentencepiece_vocab import (CLS, MASK, NUM_SPECIAL, SEP, Vocab,
                                                   train_sentencepiece)
from normattn_jax.validation import int_problem

FIELDS = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
          "masked_lm_weights", "sentence_order_label")
LINES_PER_DOCUMENT = 64  # a text file's non-empty lines per document
DOCUMENTS_PER_SPLIT = 2  # the fewest of a split: a one-sentence chunk pairs with another document


def _check(name, value, low, high=None, integer=True):
  bad = ((int_problem(value, low) if integer else isinstance(value, bool) or value < low)
         or (high is not None and value > high))
  if bad:
    kind = "an integer" if integer else "a number"
    bound = f">= {low}" if high is None else f"in [{low}, {high}]"
    raise ValueError(f"{name} must be {kind} {bound}, got {value!r}")


def mask_tokens(tokens: Sequence[int], word_starts: np.ndarray, rng: np.random.Generator, *,
                masked_lm_prob: float, max_predictions_per_seq: int, ngram: int,
                vocab_size: int) -> tuple[list[int], list[int], list[int]]:
  """ALBERT's ``create_masked_lm_predictions`` on ids: (output tokens, sorted positions, their
  original ids).

  Args:
    tokens: the ids of ``[CLS] A [SEP] B [SEP]``.
    word_starts: bool ``[vocab_size]``: whether each piece starts a word (``Vocab.word_starts``).
    rng: the random generator (advanced).
    masked_lm_prob: the share of tokens to predict, in [0, 1]; 0 masks nothing.
    max_predictions_per_seq: the most predictions.
    ngram: the longest n-gram of words masked together.
    vocab_size: random replacements are drawn from ``[NUM_SPECIAL, vocab_size)``.

  Returns:
    ``(output tokens, positions, original ids)``, lists of ints; the last two equally long.
  """
  if masked_lm_prob == 0:
    return list(tokens), [], []
  candidates: list[list[int]] = []
  for i, token in enumerate(tokens):
    if token in (CLS, SEP):
      continue
    if candidates and not word_starts[token]:
      candidates[-1].append(i)
    else:
      candidates.append([i])
  num_to_predict = min(max_predictions_per_seq, max(1, int(round(len(tokens) * masked_lm_prob))))
  pvals = 1.0 / np.arange(1, ngram + 1)
  pvals /= pvals.sum()
  starts = rng.permutation(len(candidates))
  output = list(tokens)
  covered: set[int] = set()
  masked: list[int] = []
  for start in starts:
    if len(masked) >= num_to_predict:
      break
    spans = [sum(candidates[start:start + n], []) for n in range(1, ngram + 1)]
    n = int(rng.choice(ngram, p=pvals))          # index of the n-gram, n - 1
    while n > 0 and len(masked) + len(spans[n]) > num_to_predict:
      n -= 1                                     # ALBERT shortens the n-gram to fit
    index_set = spans[n]
    if len(masked) + len(index_set) > num_to_predict or covered.intersection(index_set):
      continue
    for index in index_set:
      covered.add(index)
      if rng.random() < 0.8:
        output[index] = MASK
      elif rng.random() >= 0.5:
        output[index] = int(rng.integers(NUM_SPECIAL, vocab_size))
      masked.append(index)
  masked.sort()
  return output, masked, [tokens[i] for i in masked]


def _truncate_pair(a: list, b: list, max_tokens: int, rng: np.random.Generator) -> None:
  while len(a) + len(b) > max_tokens:
    longer = a if len(a) > len(b) else b
    if rng.random() < 0.5:
      del longer[0]
    else:
      longer.pop()


def document_instances(documents: Sequence[Sequence[Sequence[int]]], index: int,
                       max_seq_length: int, short_seq_prob: float,
                       rng: np.random.Generator) -> list[tuple[list[int], list[int], int]]:
  """ALBERT's ``create_instances_from_document`` (SOP): ``(tokens_a, tokens_b, label)``.

  Args:
    documents: every document: a list of sentences, each a list of token ids.
    index: the document to cut.
    max_seq_length: the examples' length, ``[CLS]`` and ``[SEP]``s included.
    short_seq_prob: the probability of a random shorter target length.
    rng: the random generator (advanced).

  Returns:
    A list of ``(tokens_a, tokens_b, sentence_order_label)``, both token lists non-empty.
  """
  document = documents[index]
  max_tokens = max_seq_length - 3
  target = max_tokens
  if rng.random() < short_seq_prob:
    target = int(rng.integers(2, max_tokens + 1))
  instances = []
  chunk: list = []
  length = 0
  i = 0
  while i < len(document):
    chunk.append(document[i])
    length += len(document[i])
    if i == len(document) - 1 or length >= target:
      a_end = int(rng.integers(1, len(chunk))) if len(chunk) >= 2 else 1
      tokens_a = [t for sentence in chunk[:a_end] for t in sentence]
      if len(chunk) == 1:  # B from a random other document, as ALBERT does
        label = 1
        tokens_b = []
        other = index
        for _ in range(10):
          other = int(rng.integers(len(documents)))
          if other != index:
            break
        random_document = documents[other]
        for sentence in random_document[int(rng.integers(len(random_document))):]:
          tokens_b.extend(sentence)
          if len(tokens_b) >= target - len(tokens_a):
            break
      else:
        tokens_b = [t for sentence in chunk[a_end:] for t in sentence]
        label = int(rng.random() < 0.5)
        if label:
          tokens_a, tokens_b = tokens_b, tokens_a
      _truncate_pair(tokens_a, tokens_b, max_tokens, rng)
      if tokens_a and tokens_b:
        instances.append((tokens_a, tokens_b, label))
      chunk, length = [], 0
    i += 1
  return instances


def create_examples(documents: Sequence[Sequence[Sequence[int]]], vocab_size: int,
                    word_starts: np.ndarray, *, max_seq_length: int = 512,
                    short_seq_prob: float = 0.1, masked_lm_prob: float = 0.15,
                    max_predictions_per_seq: int = 20, ngram: int = 3, dupe_factor: int = 1,
                    seed: int = 12345) -> dict:
  """Every document's instances, ``dupe_factor`` times with fresh cuts and masks, as
  fixed-shape arrays (``FIELDS``).

  Args:
    documents: lists of sentences, each a list of token ids; empty ones are dropped, at least 2
      non-empty documents must remain.
    vocab_size: the vocabulary size (random replacements are drawn below it).
    word_starts: bool ``[vocab_size]``: whether each piece starts a word.
    max_seq_length: the examples' length, >= 8.
    short_seq_prob: the probability of a random shorter target length, in [0, 1].
    masked_lm_prob: the share of tokens to predict, in [0, 1].
    max_predictions_per_seq: the most predictions per example, >= 1.
    ngram: the longest n-gram of words masked together, >= 1.
    dupe_factor: passes over the documents, >= 1.
    seed: the seed of the whole pipeline.

  Returns:
    ``FIELDS`` -> numpy arrays over the shuffled examples E: int32 ``input_ids``,
    ``input_mask``, ``segment_ids`` ``[E, max_seq_length]``; int32 ``masked_lm_positions``,
    ``masked_lm_ids`` and float32 ``masked_lm_weights`` ``[E, max_predictions_per_seq]``; int32
    ``sentence_order_label [E]``.

  Raises:
    ValueError: if a setting is out of range or fewer than 2 documents are non-empty.
  """
  _check("max_seq_length", max_seq_length, 8)
  _check("short_seq_prob", short_seq_prob, 0.0, 1.0, integer=False)
  _check("masked_lm_prob", masked_lm_prob, 0.0, 1.0, integer=False)
  _check("max_predictions_per_seq", max_predictions_per_seq, 1)
  _check("ngram", ngram, 1)
  _check("dupe_factor", dupe_factor, 1)
  documents = [[s for s in doc if len(s)] for doc in documents]
  documents = [doc for doc in documents if doc]
  if len(documents) < 2:
    raise ValueError(f"documents must hold at least 2 non-empty documents, got {len(documents)}")
  rng = np.random.default_rng(seed)
  rows = []
  for _ in range(dupe_factor):
    for index in range(len(documents)):
      for tokens_a, tokens_b, label in document_instances(documents, index, max_seq_length,
                                                          short_seq_prob, rng):
        tokens = [CLS] + tokens_a + [SEP] + tokens_b + [SEP]
        segments = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
        tokens, positions, labels = mask_tokens(
            tokens, word_starts, rng, masked_lm_prob=masked_lm_prob,
            max_predictions_per_seq=max_predictions_per_seq, ngram=ngram,
            vocab_size=vocab_size)
        rows.append((tokens, segments, positions, labels, label))
  rows = [rows[i] for i in rng.permutation(len(rows))]
  e, s, p = len(rows), max_seq_length, max_predictions_per_seq
  out = {"input_ids": np.zeros((e, s), np.int32), "input_mask": np.zeros((e, s), np.int32),
         "segment_ids": np.zeros((e, s), np.int32),
         "masked_lm_positions": np.zeros((e, p), np.int32),
         "masked_lm_ids": np.zeros((e, p), np.int32),
         "masked_lm_weights": np.zeros((e, p), np.float32),
         "sentence_order_label": np.zeros((e,), np.int32)}
  for row, (tokens, segments, positions, labels, label) in enumerate(rows):
    out["input_ids"][row, :len(tokens)] = tokens
    out["input_mask"][row, :len(tokens)] = 1
    out["segment_ids"][row, :len(segments)] = segments
    out["masked_lm_positions"][row, :len(positions)] = positions
    out["masked_lm_ids"][row, :len(labels)] = labels
    out["masked_lm_weights"][row, :len(labels)] = 1.0
    out["sentence_order_label"][row] = label
  return out


class PretrainingData:
  """The examples of one split and the batches drawn from them."""

  def __init__(self, arrays: dict):
    missing = set(FIELDS) - set(arrays)
    if missing:
      raise ValueError(f"arrays lack the fields {sorted(missing)}")
    self.arrays = {k: np.asarray(arrays[k]) for k in FIELDS}
    self.num_examples = len(self.arrays["sentence_order_label"])
    if self.num_examples == 0:
      raise ValueError("a split needs at least one example")

  def batch(self, step: int, batch_size: int, *, seed: int, process_index: int = 0,
            process_count: int = 1) -> dict:
    """Global batch ``step``: positions ``step * batch_size ...`` of an endless sequence of
    epochs, each a permutation seeded by (seed, epoch); this process gets its contiguous
    ``batch_size / process_count`` rows.

    Args:
      step: the global batch index, >= 0.
      batch_size: the global batch size, divisible by ``process_count``.
      seed: the seed of the epochs' permutations.
      process_index: this process's index.
      process_count: the number of processes.

    Returns:
      ``FIELDS`` -> numpy arrays with ``batch_size / process_count`` rows.

    Raises:
      ValueError: if ``step`` or ``batch_size`` is out of range, or ``batch_size`` does not divide
        by ``process_count``.
    """
    _check("step", step, 0)
    _check("batch_size", batch_size, 1)
    if batch_size % process_count:
      raise ValueError(f"batch_size ({batch_size}) must be divisible by the process count "
                       f"({process_count})")
    share = batch_size // process_count
    positions = step * batch_size + process_index * share + np.arange(share)
    epochs, offsets = np.divmod(positions, self.num_examples)
    rows = np.empty(share, np.int64)
    for epoch in np.unique(epochs):
      order = np.random.default_rng([seed, int(epoch)]).permutation(self.num_examples)
      rows[epochs == epoch] = order[offsets[epochs == epoch]]
    return {k: v[rows] for k, v in self.arrays.items()}

  def save(self, path: str) -> None:
    """One .npz, written atomically.

    Args:
      path: the file to write (its folder is created).
    """
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=folder, suffix=".npz", delete=False) as f:
      np.savez(f, **self.arrays)
    os.replace(f.name, path)

  @classmethod
  def load(cls, path: str) -> "PretrainingData":
    """The examples ``save`` wrote.

    Args:
      path: an .npz holding every field of ``FIELDS``.

    Returns:
      The ``PretrainingData``.
    """
    with np.load(path) as data:
      return cls({k: data[k] for k in FIELDS})


# Non-empty lines of a text file per document, unless a call says otherwise (pre-training's).
LINES_PER_DOCUMENT = 64


def _key(*parts) -> str:
  return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _prepare(sources: dict, cache: str, *, vocab_size: int, log, **settings):
  """Vocabulary (trained on the train documents) and both splits' examples, cached in
  ``cache``."""
  os.makedirs(cache, exist_ok=True)
  model_path = os.path.join(cache, "spm.model")
  documents = {}

  def load_documents(split):
    if split not in documents:
      documents[split] = [tfds_text._text(example["text"]).split("\n")
                          for example in sources[split]]
      if len(documents[split]) < DOCUMENTS_PER_SPLIT:
        raise tfds_text.TooFewDocuments(
            split, f"the {split!r} split has {len(documents[split])} document(s), ALBERT's "
            f"examples need {DOCUMENTS_PER_SPLIT}",
            f"add text, {tfds_text.fraction_change(split)} validation_fraction or, for local "
            f"text files, lower lines_per_document")
    return documents[split]

  if os.path.exists(model_path):
    vocab = Vocab.load(model_path)
  else:
    began = time.perf_counter()
    vocab = train_sentencepiece((s for doc in load_documents("train") for s in doc), model_path,
                                vocab_size)
    log(f"SentencePiece: {vocab.size} pieces in {time.perf_counter() - began:.0f} s")
  examples_key = _key(settings)
  splits = {}
  word_starts = vocab.word_starts()
  for offset, split in enumerate(tfds_text.SPLITS):
    path = os.path.join(cache, f"{split}_{examples_key}.npz")
    if not os.path.exists(path):
      began = time.perf_counter()
      docs = load_documents(split)
      flat = [s for doc in docs for s in doc]
      ids = iter(vocab.encode(flat))
      tokenised = [[next(ids) for _ in doc] for doc in docs]
      arrays = create_examples(tokenised, vocab.size, word_starts,
                               **dict(settings, seed=settings["seed"] + offset))
      PretrainingData(arrays).save(path)
      log(f"{split}: {len(docs)} documents, {len(flat)} sentences, "
          f"{len(arrays['sentence_order_label'])} examples in "
          f"{time.perf_counter() - began:.0f} s")
    splits[split] = PretrainingData.load(path)
  return vocab, splits


def prepare_pretraining_data(files: Sequence[str], workdir: str, *, vocab_size: int = 30000,
                             max_seq_length: int = 512, masked_lm_prob: float = 0.15,
                             max_predictions_per_seq: int = 20, ngram: int = 3,
                             short_seq_prob: float = 0.1, dupe_factor: int = 10,
                             validation_fraction: float = 0.05, seed: int = 12345,
                             lines_per_document: int = LINES_PER_DOCUMENT, log=print):
  """The one call of a pre-training run on local text files: the TFDS dataset
  (``workdir/data/tfds``), the SentencePiece vocabulary and the examples of both splits, each
  built once and cached under ``workdir/data/`` keyed by the files and settings. Returns
  ``(Vocab, {"train": PretrainingData, "validation": PretrainingData})``.

  Args:
    files: local text files.
    workdir: the run's workdir; the data go under ``workdir/data/``.
    vocab_size: SentencePiece pieces, > ``NUM_SPECIAL``.
    max_seq_length: the examples' length.
    masked_lm_prob: the share of tokens to predict.
    max_predictions_per_seq: the most predictions per example.
    ngram: the longest n-gram of words masked together.
    short_seq_prob: the probability of a random shorter target length.
    dupe_factor: passes over the documents.
    validation_fraction: the share of documents in the validation split.
    seed: the examples' seed (the validation split uses ``seed + 1``).
    lines_per_document: lines of a text file per document.
    log: takes the progress messages (strings).

  Raises:
    ValueError: if a setting is out of range or a split has fewer than 2 documents.
  """
  _check("vocab_size", vocab_size, NUM_SPECIAL + 1)
  sources = tfds_text.text_file_sources(
      [str(f) for f in files], os.path.join(workdir, "data", "tfds"),
      lines_per_document=lines_per_document, validation_fraction=validation_fraction)
  cache = os.path.join(workdir, "data", tfds_text._fingerprint(
      [str(f) for f in files], lines_per_document, validation_fraction, vocab_size))
  return _prepare(sources, cache, vocab_size=vocab_size, log=log,
                  max_seq_length=max_seq_length, masked_lm_prob=masked_lm_prob,
                  max_predictions_per_seq=max_predictions_per_seq, ngram=ngram,
                  short_seq_prob=short_seq_prob, dupe_factor=dupe_factor, seed=seed)


def prepare_wikipedia_pretraining_data(workdir: str, *, wikipedia_config: str = "20231101.en",
                                       vocab_size: int = 30000, validation_fraction: float = 0.05,
                                       log=print, **settings):
  """As ``prepare_pretraining_data`` on TFDS's English Wikipedia (needs a network and Apache
  Beam, see ``tfds_text.wikipedia_sources``).

  Args:
    workdir: the run's workdir; the data go under ``workdir/data/``.
    wikipedia_config: the TFDS ``wikipedia`` config (dump date and language).
    vocab_size: SentencePiece pieces, > ``NUM_SPECIAL``.
    validation_fraction: the share of articles in the validation split.
    log: takes the progress messages (strings).
    **settings: ``create_examples``' keyword settings; ``seed`` is required.

  Returns:
    ``(Vocab, {"train": PretrainingData, "validation": PretrainingData})``.
  """
  _check("vocab_size", vocab_size, NUM_SPECIAL + 1)
  sources = tfds_text.wikipedia_sources(os.path.join(workdir, "data", "tfds"), wikipedia_config,
                                        validation_fraction)
  key = _key(vocab_size, validation_fraction)
  cache = os.path.join(workdir, "data", f"wikipedia_{wikipedia_config}_{key}")
  return _prepare(sources, cache, vocab_size=vocab_size, log=log, **settings)


def masking_statistics(arrays: dict) -> dict:
  """Measured on examples: predictions per ordinary token and the shares of predicted
  positions shown as [MASK], kept, or replaced by another token.

  Args:
    arrays: examples, as ``create_examples`` returns them.

  Returns:
    ``{"predicted_fraction", "mask_share", "kept_share", "random_share"}`` (floats).
  """
  mask = arrays["input_mask"].astype(bool)
  ordinary = mask & ~np.isin(arrays["input_ids"], [CLS, SEP])
  weights = arrays["masked_lm_weights"] > 0
  out = {"predicted_fraction": float(weights.sum() / ordinary.sum())}
  rows = np.nonzero(weights)[0]
  seen = arrays["input_ids"][rows, arrays["masked_lm_positions"][weights]]
  labels = arrays["masked_lm_ids"][weights]
  out["mask_share"] = float(np.mean(seen == MASK))
  out["kept_share"] = float(np.mean(seen == labels))
  out["random_share"] = float(np.mean((seen != MASK) & (seen != labels)))
  return out
