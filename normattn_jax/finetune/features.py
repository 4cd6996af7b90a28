"""Downstream examples as fixed-length model inputs, the same for ALBERT's SentencePiece
vocabulary and a HuggingFace WordPiece tokenizer.

Every example becomes int32 arrays of one ``max_seq_length`` L, laid out as in pre-training
(``normattn_jax.data.albert_examples``): ``input_ids`` = ``[CLS] a [SEP] (b [SEP])`` then the
pad id, ``token_type_ids`` 0 up to the first [SEP] and 1 after it, ``attention_mask`` 1 on real
tokens and 0 on padding. Per task kind:

  classification   ``label`` int32 [N] (-1: an unlabelled test example)
  regression       ``label`` float32 [N]
  span             ``start_positions``, ``end_positions``, ``is_impossible``, ``example_index``
                   int32 [N] over the windows of the contexts; for evaluation also
                   ``offset_mapping`` [N, L, 2] (the context characters of each token, -1 off
                   the context), ``token_is_context`` and ``token_is_max_context`` [N, L]
  multiple choice  ``input_ids``, ``token_type_ids``, ``attention_mask`` [N, C, L] and
                   ``label`` int32 [N] in [0, C)

Pairs too long for L lose tokens from the end of the longer side (BERT's and ALBERT's
``_truncate_seq_pair``); SQuAD contexts are cut into windows with a document stride (BERT's
``run_squad.py``); RACE keeps the end of question + option and cuts the article (ALBERT's
``race_utils.py``).
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Optional, Protocol, Sequence

import numpy as np

from normattn_jax.validation import check_int

INPUT_FIELDS = ("input_ids", "token_type_ids", "attention_mask")
NOT_CONTEXT = -1  # offset_mapping of a token outside the context


class Tokenizer(Protocol):
  """What the feature builders need of a tokenizer: its special ids, and ids (with the
  character span of each token in the text) without special tokens."""
  cls_id: int
  sep_id: int
  pad_id: int

  def encode(self, texts: Sequence[str]) -> list[list[int]]:
    ...

  def encode_with_offsets(self, texts: Sequence[str]) -> list[tuple[list[int], np.ndarray]]:
    ...


def _check_int(name: str, value: Any, low: int) -> int:
  """``value`` as an int, once ``validation.check_int`` accepts it."""
  check_int(name, value, low)
  return int(value)


def _check_texts(name: str, texts: Sequence[str]) -> list[str]:
  if isinstance(texts, str):
    raise ValueError(f"{name} must be a sequence of texts, got a single str")
  texts = list(texts)
  for i, text in enumerate(texts):
    if not isinstance(text, str):
      raise ValueError(f"{name}[{i}] must be a str, got {type(text).__name__}")
  return texts


def _strip_leading_space(text: str, offsets: np.ndarray) -> np.ndarray:
  """Offsets that start after the whitespace a token absorbed (SentencePiece's word mark):
  an answer boundary then falls on the word itself."""
  array = np.array(offsets, np.int32).reshape(-1, 2)
  for row, (start, end) in enumerate(offsets):
    if start < end and text[start].isspace():
      while start < end and text[start].isspace():
        start += 1
      array[row, 0] = start
  return array


class SentencePieceTokenizer:
  """ALBERT's SentencePiece ``Vocab`` (``normattn_jax.data.sentencepiece_vocab``): [CLS] = 2,
  [SEP] = 3, <pad> = 0; character offsets from SentencePiece's offset mapping into the
  original (un-normalised) text."""

  def __init__(self, vocab):
    from normattn_jax.data import sentencepiece_vocab

    if not isinstance(vocab, sentencepiece_vocab.Vocab):
      raise ValueError(f"vocab must be a normattn_jax.data.Vocab, got {type(vocab).__name__}")
    self.vocab = vocab
    self.processor = vocab.processor
    self.cls_id, self.sep_id = sentencepiece_vocab.CLS, sentencepiece_vocab.SEP
    self.pad_id = sentencepiece_vocab.PAD
    try:
      self.processor.encode(["a"], out_type="offset_mapping", return_bytes=False)
    except (ValueError, TypeError) as err:
      raise ImportError("the installed sentencepiece cannot return offset mappings; install "
                        "sentencepiece>=0.2.2") from err

  def __repr__(self) -> str:
    return f"SentencePieceTokenizer({self.vocab.path!r})"

  def encode(self, texts: Sequence[str]) -> list[list[int]]:
    texts = _check_texts("texts", texts)
    return self.processor.encode(texts) if texts else []

  def encode_with_offsets(self, texts: Sequence[str]) -> list[tuple[list[int], np.ndarray]]:
    texts = _check_texts("texts", texts)
    if not texts:
      return []
    encoded = self.processor.encode(texts, out_type="offset_mapping", return_bytes=False)
    return [(list(e["ids"]), _strip_leading_space(text, e["offsets"]))
            for text, e in zip(texts, encoded)]


class WordPieceTokenizer:
  """A HuggingFace ``tokenizers.Tokenizer`` with [CLS], [SEP] and [PAD] (a BERT folder's
  ``tokenizer.json``); its own padding and truncation are switched off on a copy."""

  def __init__(self, tokenizer):
    from normattn_jax.models import bert

    self.tokenizer = bert.tokenizers_copy(tokenizer)
    self.tokenizer.no_padding()
    self.tokenizer.no_truncation()
    ids = {token: self.tokenizer.token_to_id(token) for token in ("[CLS]", "[SEP]", "[PAD]")}
    missing = [token for token, i in ids.items() if i is None]
    if missing:
      raise ValueError(f"the tokenizer has no {missing} token(s): it must be a BERT tokenizer")
    self.cls_id, self.sep_id, self.pad_id = ids["[CLS]"], ids["[SEP]"], ids["[PAD]"]

  def __repr__(self) -> str:
    return f"WordPieceTokenizer(vocab_size={self.tokenizer.get_vocab_size()})"

  def _encodings(self, texts):
    texts = _check_texts("texts", texts)
    return self.tokenizer.encode_batch(texts, add_special_tokens=False) if texts else []

  def encode(self, texts: Sequence[str]) -> list[list[int]]:
    return [list(e.ids) for e in self._encodings(texts)]

  def encode_with_offsets(self, texts: Sequence[str]) -> list[tuple[list[int], np.ndarray]]:
    texts = _check_texts("texts", texts)
    return [(list(e.ids), _strip_leading_space(text, e.offsets))
            for text, e in zip(texts, self._encodings(texts))]


def as_tokenizer(tokenizer) -> Tokenizer:
  """One of the two back ends from what a user has at hand.

  Args:
    tokenizer: a ``SentencePieceTokenizer`` or ``WordPieceTokenizer`` (returned as is); a
      ``normattn_jax.data.Vocab``; a ``tokenizers.Tokenizer``; the path of a SentencePiece
      ``.model`` file; or a HuggingFace model folder with ``tokenizer.json``.

  Returns:
    A ``Tokenizer``.
  """
  if isinstance(tokenizer, (SentencePieceTokenizer, WordPieceTokenizer)):
    return tokenizer
  if isinstance(tokenizer, (str, os.PathLike)):
    path = os.fspath(tokenizer)
    if os.path.isfile(path) and path.endswith(".model"):
      from normattn_jax.data.sentencepiece_vocab import Vocab

      return SentencePieceTokenizer(Vocab.load(path))
    if os.path.isfile(os.path.join(path, "tokenizer.json")):
      from normattn_jax.models import bert

      return WordPieceTokenizer(bert.load_tokenizer(path))
    raise ValueError(f"tokenizer {path!r} is neither a SentencePiece .model file nor a folder "
                     f"with tokenizer.json")
  module = type(tokenizer).__module__
  if module == "normattn_jax.data.sentencepiece_vocab":
    return SentencePieceTokenizer(tokenizer)
  if module.partition(".")[0] == "tokenizers":
    return WordPieceTokenizer(tokenizer)
  raise ValueError(f"tokenizer must be a Vocab, a tokenizers.Tokenizer or a path, got "
                   f"{type(tokenizer).__name__}")


# ----- sentences and pairs -----

def truncate_pair(tokens_a: Sequence[int], tokens_b: Sequence[int], max_tokens: int
                  ) -> tuple[list[int], list[int]]:
  """Drop tokens from the end of the longer side (the second on a tie) until both fit in
  ``max_tokens``, as BERT's and ALBERT's ``_truncate_seq_pair``."""
  a, b = list(tokens_a), list(tokens_b)
  while len(a) + len(b) > max_tokens:
    (a if len(a) > len(b) else b).pop()
  return a, b


def pack(tokenizer: Tokenizer, first: Sequence[int], second: Optional[Sequence[int]],
         max_seq_length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """``[CLS] first [SEP] (second [SEP])`` padded to ``max_seq_length`` (the caller has made it
  fit): (input_ids, token_type_ids, attention_mask), each int32 [L]."""
  ids = [tokenizer.cls_id, *first, tokenizer.sep_id]
  types = [0] * len(ids)
  if second is not None:
    ids += [*second, tokenizer.sep_id]
    types += [1] * (len(second) + 1)
  if len(ids) > max_seq_length:
    raise ValueError(f"{len(ids)} tokens do not fit max_seq_length={max_seq_length}")
  input_ids = np.full(max_seq_length, tokenizer.pad_id, np.int32)
  input_ids[:len(ids)] = ids
  token_type_ids = np.zeros(max_seq_length, np.int32)
  token_type_ids[:len(types)] = types
  attention_mask = np.zeros(max_seq_length, np.int32)
  attention_mask[:len(ids)] = 1
  return input_ids, token_type_ids, attention_mask


def _require_examples(count: int) -> None:
  """No examples is its own error, before any other check reads an empty list's dtype."""
  if not count:
    raise ValueError("there are no examples to build features from")


def _stack_inputs(rows: list) -> dict:
  return {name: np.stack([row[i] for row in rows]) for i, name in enumerate(INPUT_FIELDS)}


def _labels(labels, count: int, regression: bool, num_labels: Optional[int]) -> np.ndarray:
  labels = np.asarray(labels)
  if labels.shape != (count,):
    raise ValueError(f"labels must have one value per example ({count}), got shape "
                     f"{labels.shape}")
  if regression:
    if labels.dtype.kind not in "iuf" or not np.isfinite(labels.astype(np.float64)).all():
      raise ValueError(f"regression labels must be finite numbers, got {labels[:5]}")
    return labels.astype(np.float32)
  if labels.dtype.kind not in "iu":
    raise ValueError(f"classification labels must be integers, got dtype {labels.dtype}")
  bad = labels < -1 if num_labels is None else (labels < -1) | (labels >= num_labels)
  if bad.any():
    bound = "" if num_labels is None else f" and < num_labels={num_labels}"
    raise ValueError(f"labels must be >= -1 (-1: unlabelled){bound}, got {labels[bad][0]} "
                     f"at example {int(np.flatnonzero(bad)[0])}")
  return labels.astype(np.int32)


def classification_features(tokenizer, first: Sequence[str], second: Optional[Sequence[str]],
                            labels, max_seq_length: int, *, regression: bool = False,
                            num_labels: Optional[int] = None) -> dict:
  """Sentences or sentence pairs with a class (or a score) each.

  Args:
    tokenizer: anything ``as_tokenizer`` takes.
    first: the first text of each example.
    second: the second text of each example, or None for single sentences.
    labels: class index per example (-1 when unlabelled), or score when ``regression``.
    max_seq_length: L, the length of every row.
    regression: float32 scores instead of int32 classes.
    num_labels: if given, classes must lie in [0, num_labels) (or be -1).

  Returns:
    ``input_ids``, ``token_type_ids``, ``attention_mask`` int32 [N, L] and ``label`` [N].
  """
  tokenizer = as_tokenizer(tokenizer)
  first = _check_texts("first", first)
  _require_examples(len(first))
  minimum = 3 if second is None else 5
  max_seq_length = _check_int("max_seq_length", max_seq_length, minimum)
  if second is not None:
    second = _check_texts("second", second)
    if len(second) != len(first):
      raise ValueError(f"first and second must have one text per example, got {len(first)} "
                       f"and {len(second)}")
  label_array = _labels(labels, len(first), regression, num_labels)
  ids_a = tokenizer.encode(first)
  ids_b = tokenizer.encode(second) if second is not None else [None] * len(first)
  rows = []
  for a, b in zip(ids_a, ids_b):
    if b is None:
      a = a[:max_seq_length - 2]
    else:
      a, b = truncate_pair(a, b, max_seq_length - 3)
    rows.append(pack(tokenizer, a, b, max_seq_length))
  return dict(_stack_inputs(rows), label=label_array)


# ----- multiple choice (RACE) -----

def race_choice_text(question: str, option: str) -> str:
  """RACE's second segment: the option put in the question's blank "_" when it has one,
  else the question and the option joined by a space (ALBERT's ``race_utils.py``)."""
  return question.replace("_", option) if "_" in question else f"{question} {option}"


def multiple_choice_features(tokenizer, contexts: Sequence[str],
                             choices: Sequence[Sequence[str]], labels, max_seq_length: int, *,
                             max_qa_length: int = 128) -> dict:
  """One ``[CLS] context [SEP] choice [SEP]`` row per choice: the choice keeps its last
  ``max_qa_length`` tokens (at most L - 3) and the context loses tokens from its end to fit.

  Args:
    tokenizer: anything ``as_tokenizer`` takes.
    contexts: the passage of each example.
    choices: per example, C texts (for RACE ``race_choice_text`` of the question and option).
    labels: the index of the right choice per example, in [0, C).
    max_seq_length: L.
    max_qa_length: the most tokens a choice keeps (ALBERT's default 128).

  Returns:
    ``input_ids``, ``token_type_ids``, ``attention_mask`` int32 [N, C, L], ``label`` int32 [N].
  """
  tokenizer = as_tokenizer(tokenizer)
  contexts = _check_texts("contexts", contexts)
  max_seq_length = _check_int("max_seq_length", max_seq_length, 5)
  max_qa_length = min(_check_int("max_qa_length", max_qa_length, 1), max_seq_length - 3)
  if len(choices) != len(contexts):
    raise ValueError(f"choices must hold one list per context ({len(contexts)}), got "
                     f"{len(choices)}")
  _require_examples(len(contexts))
  num_choices = len(choices[0])
  for i, options in enumerate(choices):
    if isinstance(options, str) or len(options) != num_choices or num_choices < 2:
      raise ValueError(f"choices[{i}] must hold {max(num_choices, 2)} texts like choices[0], "
                       f"got {options!r}")
  label_array = _labels(labels, len(contexts), False, num_choices)
  if (label_array < 0).any():
    raise ValueError(f"labels must lie in [0, {num_choices}), got -1")
  context_ids = tokenizer.encode(contexts)
  choice_ids = iter(tokenizer.encode(
      _check_texts("choices", [text for options in choices for text in options])))
  rows = []
  for context in context_ids:
    per_choice = []
    for _ in range(num_choices):
      qa = next(choice_ids)[-max_qa_length:]
      per_choice.append(pack(tokenizer, context[:max_seq_length - 3 - len(qa)], qa,
                             max_seq_length))
    rows.append(tuple(np.stack(field) for field in zip(*per_choice)))
  return dict(_stack_inputs(rows), label=label_array)


# ----- span extraction (SQuAD) -----

@dataclasses.dataclass(frozen=True)
class SquadExample:
  """A question on a context.

  Attributes:
    id: the question id.
    question: its text.
    context: the paragraph.
    answers: the gold answer texts (empty when unanswerable): scoring takes the best of them,
      training the first.
    answer_starts: the character position of each answer in the context.
    is_impossible: SQuAD v2.0's unanswerable question.
  """
  id: str
  question: str
  context: str
  answers: tuple[str, ...] = ()
  answer_starts: tuple[int, ...] = ()
  is_impossible: bool = False

  def __post_init__(self):
    object.__setattr__(self, "answers", tuple(self.answers))
    object.__setattr__(self, "answer_starts", tuple(int(s) for s in self.answer_starts))
    if len(self.answers) != len(self.answer_starts):
      raise ValueError(f"example {self.id!r}: answers and answer_starts must have one entry "
                       f"each, got {len(self.answers)} and {len(self.answer_starts)}")
    if self.is_impossible and self.answers:
      raise ValueError(f"example {self.id!r} is_impossible but has answers {self.answers}")

  def answer_span(self) -> Optional[tuple[int, int]]:
    """The characters [start, end) of the first answer when the context holds its text there;
    None when unanswerable or misaligned."""
    if self.is_impossible or not self.answers:
      return None
    start, text = self.answer_starts[0], self.answers[0]
    if not text.strip() or start < 0 or self.context[start:start + len(text)] != text:
      return None
    return start, start + len(text)


def doc_windows(num_tokens: int, window: int, doc_stride: int) -> list[tuple[int, int]]:
  """(start, length) of the windows over ``num_tokens`` context tokens: each starts
  ``min(length, doc_stride)`` after the one before, the last ends at the end (BERT's
  ``_DocSpan``s); an empty context gets one empty window."""
  spans, start = [], 0
  while True:
    length = min(num_tokens - start, window)
    spans.append((start, length))
    if start + length >= num_tokens:
      return spans
    start += min(length, doc_stride)


def max_context_window(spans: Sequence[tuple[int, int]], num_tokens: int) -> np.ndarray:
  """Per context token, the window in which it has the most context: the largest
  min(tokens left, tokens right) + 0.01 * window length, the first window on a tie (BERT's
  ``_check_is_max_context``)."""
  scores = np.full((len(spans), num_tokens), -np.inf)
  for w, (start, length) in enumerate(spans):
    position = np.arange(start, start + length)
    scores[w, start:start + length] = np.minimum(position - start, start + length - 1 - position)
    scores[w, start:start + length] += 0.01 * length
  return scores.argmax(0) if num_tokens else np.zeros(0, np.int64)


def _answer_tokens(offsets: np.ndarray, span: tuple[int, int]) -> Optional[tuple[int, int]]:
  """The first and last context token that share characters with the answer."""
  begin, end = span
  overlap = (offsets[:, 1] > begin) & (offsets[:, 0] < end) & (offsets[:, 1] > offsets[:, 0])
  tokens = np.flatnonzero(overlap)
  return (int(tokens[0]), int(tokens[-1])) if len(tokens) else None


def span_features(tokenizer, examples: Sequence[SquadExample], max_seq_length: int, *,
                  doc_stride: int = 128, max_query_length: int = 64,
                  is_training: bool = True) -> dict:
  """SQuAD windows ``[CLS] question [SEP] context window [SEP]`` with the answer's tokens.

  The question keeps its first ``max_query_length`` tokens; the context is cut into windows of
  ``max_seq_length - 3 - question tokens`` tokens, ``doc_stride`` apart. A window's
  ``start_positions``/``end_positions`` index the answer's first and last token in it, or both
  0 ([CLS]) when the question is unanswerable or the answer lies outside the window
  (``is_impossible`` 1 then).

  Args:
    tokenizer: anything ``as_tokenizer`` takes.
    examples: the questions.
    max_seq_length: L.
    doc_stride: tokens between the starts of consecutive windows (BERT's 128).
    max_query_length: the most question tokens (BERT's 64).
    is_training: training needs every answerable example's first answer at its answer_start
      in the context (a ValueError names the example otherwise) and leaves out the evaluation
      fields; evaluation sets the positions of misaligned answers to 0 (scoring uses texts).

  Returns:
    The span features of the module docstring: one row per window.
  """
  tokenizer = as_tokenizer(tokenizer)
  max_query_length = _check_int("max_query_length", max_query_length, 1)
  doc_stride = _check_int("doc_stride", doc_stride, 1)
  max_seq_length = _check_int("max_seq_length", max_seq_length, max_query_length + 4)
  examples = list(examples)
  _require_examples(len(examples))
  spans = [example.answer_span() for example in examples]
  if is_training:
    for example, span in zip(examples, spans):
      if span is None and not example.is_impossible:
        raise ValueError(
            f"example {example.id!r}: its answer {example.answers[:1]} is not in the context "
            f"at answer_start {example.answer_starts[:1]}; leave such examples out of training")
  queries = tokenizer.encode([example.question for example in examples])
  contexts = tokenizer.encode_with_offsets([example.context for example in examples])
  columns: dict[str, list] = {name: [] for name in (
      *INPUT_FIELDS, "start_positions", "end_positions", "is_impossible", "example_index",
      "offset_mapping", "token_is_context", "token_is_max_context")}
  for index, (query, (context, offsets), span) in enumerate(zip(queries, contexts, spans)):
    query = query[:max_query_length]
    answer = None if span is None else _answer_tokens(offsets, span)
    if is_training and answer is None and not examples[index].is_impossible:
      raise ValueError(f"example {examples[index].id!r}: its answer covers no context token")
    windows = doc_windows(len(context), max_seq_length - 3 - len(query), doc_stride)
    best_window = max_context_window(windows, len(context))
    first = len(query) + 2  # the position of the window's first context token
    for w, (start, length) in enumerate(windows):
      row = pack(tokenizer, query, context[start:start + length], max_seq_length)
      positions = (0, 0)
      if answer is not None and start <= answer[0] and answer[1] < start + length:
        positions = (first + answer[0] - start, first + answer[1] - start)
      offset_row = np.full((max_seq_length, 2), NOT_CONTEXT, np.int32)
      offset_row[first:first + length] = offsets[start:start + length]
      is_context = np.zeros(max_seq_length, np.int32)
      is_context[first:first + length] = 1
      is_max = np.zeros(max_seq_length, np.int32)
      is_max[first:first + length] = best_window[start:start + length] == w
      for name, value in zip(columns, (*row, *positions, int(positions == (0, 0)), index,
                                       offset_row, is_context, is_max)):
        columns[name].append(value)
  if is_training:
    for name in ("offset_mapping", "token_is_context", "token_is_max_context"):
      del columns[name]
  return {name: np.asarray(values, np.int32) for name, values in columns.items()}
