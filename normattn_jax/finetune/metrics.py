"""The metrics of the downstream tasks, each as its official definition, in numpy.

GLUE: accuracy, binary F1 (MRPC, QQP), Matthews correlation (CoLA), Pearson and Spearman
correlation (STS-B). SQuAD: exact match and token F1 with the official answer normalisation
(v1.1 and v2.0 scripts), the decoding of start/end logits into answer texts across the windows
of a long context, and the no-answer decision of v2.0. Every score is a fraction in [0, 1] (the
papers print 100 times it).

Where a definition is undefined (a correlation of a constant series, an F1 without positives)
the function returns 0.0, as scikit-learn does for Matthews correlation, and says so: a score is
never NaN. Non-finite inputs raise a ValueError naming the argument.
"""
from __future__ import annotations

import collections
import dataclasses
import re
import string
from typing import Callable, Mapping, Sequence

import numpy as np

from normattn_jax.validation import check_int

NULL_SPAN = -1  # start/end of a prediction that is no span


# ----- checks -----

def _vector(name: str, values, dtype=None) -> np.ndarray:
  array = np.asarray(values, dtype)
  if array.ndim != 1:
    raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
  if array.dtype.kind == "f" and not np.isfinite(array).all():
    raise ValueError(f"{name} holds non-finite values at positions "
                     f"{np.flatnonzero(~np.isfinite(array))[:10].tolist()}")
  return array


def _pair(predictions, labels, dtype=None) -> tuple[np.ndarray, np.ndarray]:
  predictions = _vector("predictions", predictions, dtype)
  labels = _vector("labels", labels, dtype)
  if predictions.shape != labels.shape:
    raise ValueError(f"predictions and labels must have the same length, got "
                     f"{len(predictions)} and {len(labels)}")
  if len(labels) == 0:
    raise ValueError("predictions and labels must not be empty")
  return predictions, labels


def _integers(name: str, values: np.ndarray) -> np.ndarray:
  if values.dtype.kind not in "iub":
    if values.dtype.kind != "f" or not np.all(values == np.round(values)):
      raise ValueError(f"{name} must hold class indices (integers), got dtype {values.dtype}")
  return values.astype(np.int64)


# ----- classification and regression (GLUE) -----

def accuracy(predictions: Sequence[int], labels: Sequence[int]) -> float:
  """The fraction of predictions equal to their label.

  Args:
    predictions: predicted class per example.
    labels: true class per example.

  Returns:
    A fraction in [0, 1].
  """
  predictions, labels = _pair(predictions, labels)
  return float(np.mean(predictions == labels))


def _binary(name: str, values: np.ndarray) -> np.ndarray:
  values = _integers(name, values)
  bad = ~np.isin(values, (0, 1))
  if bad.any():
    raise ValueError(f"{name} must be 0 or 1 for binary F1, got {values[bad][0]}")
  return values


def binary_f1(predictions: Sequence[int], labels: Sequence[int]) -> float:
  """F1 of the positive class 1 (GLUE's MRPC and QQP): 2 tp / (2 tp + fp + fn).

  Args:
    predictions: predicted 0/1 per example.
    labels: true 0/1 per example.

  Returns:
    The F1 in [0, 1]; 0.0 when there is no true positive (also when neither the predictions nor
    the labels hold a positive, where precision and recall are undefined).
  """
  predictions, labels = _pair(predictions, labels)
  predictions, labels = _binary("predictions", predictions), _binary("labels", labels)
  true_positives = int(np.sum((predictions == 1) & (labels == 1)))
  wrong = int(np.sum(predictions != labels))
  if true_positives == 0:
    return 0.0
  return 2 * true_positives / (2 * true_positives + wrong)


def matthews_corrcoef(predictions: Sequence[int], labels: Sequence[int]) -> float:
  """Matthews correlation coefficient (GLUE's CoLA), in the multi-class form of Gorodkin (2004)
  that reduces to (tp tn - fp fn) / sqrt((tp + fp)(tp + fn)(tn + fp)(tn + fn)) for two classes.

  Args:
    predictions: predicted class per example.
    labels: true class per example.

  Returns:
    The coefficient in [-1, 1]; 0.0 when it is undefined (the predictions or the labels are
    one class), as scikit-learn returns.
  """
  predictions, labels = _pair(predictions, labels)
  predictions, labels = _integers("predictions", predictions), _integers("labels", labels)
  classes, codes = np.unique(np.concatenate([labels, predictions]), return_inverse=True)
  k, n = len(classes), len(labels)
  confusion = np.zeros((k, k), np.float64)
  np.add.at(confusion, (codes[:n], codes[n:]), 1.0)
  true_counts, predicted_counts = confusion.sum(1), confusion.sum(0)
  correct = np.trace(confusion)
  covariance = correct * n - true_counts @ predicted_counts
  denominator = np.sqrt((n * n - predicted_counts @ predicted_counts)
                        * (n * n - true_counts @ true_counts))
  if denominator == 0:
    return 0.0
  return float(covariance / denominator)


def pearson(predictions: Sequence[float], labels: Sequence[float]) -> float:
  """Pearson's correlation coefficient (GLUE's STS-B).

  Args:
    predictions: predicted score per example.
    labels: true score per example.

  Returns:
    The coefficient in [-1, 1]; 0.0 when it is undefined (either series is constant, or has a
    single element): no linear association can be measured then.
  """
  x, y = _pair(predictions, labels, np.float64)
  x, y = _centred_unit_scale(x), _centred_unit_scale(y)
  norm = np.sqrt(np.sum(x * x) * np.sum(y * y))
  if norm == 0:
    return 0.0
  return float(np.clip(np.sum(x * y) / norm, -1.0, 1.0))


def _centred_unit_scale(values: np.ndarray) -> np.ndarray:
  """Centred and scaled to a largest magnitude of 1, so that squares cannot overflow."""
  centred = values - values.mean()
  scale = np.abs(centred).max()
  return centred / scale if scale > 0 else centred


def tie_averaged_ranks(values: Sequence[float]) -> np.ndarray:
  """Ranks 1..n, tied values sharing the mean of their ranks (Spearman's convention).

  Args:
    values: a one-dimensional series.

  Returns:
    float64 ranks of the same length.
  """
  values = _vector("values", values, np.float64)
  order = np.argsort(values, kind="stable")
  sorted_values = values[order]
  starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
  ends = np.r_[starts[1:], len(values)]
  average = (starts + ends + 1) / 2.0  # mean of the ranks start+1 .. end
  ranks = np.empty(len(values), np.float64)
  ranks[order] = np.repeat(average, ends - starts)
  return ranks


def spearman(predictions: Sequence[float], labels: Sequence[float]) -> float:
  """Spearman's rank correlation (GLUE's STS-B): Pearson's on tie-averaged ranks.

  Args:
    predictions: predicted score per example.
    labels: true score per example.

  Returns:
    The coefficient in [-1, 1]; 0.0 when it is undefined (either series is constant).
  """
  x, y = _pair(predictions, labels, np.float64)
  return pearson(tie_averaged_ranks(x), tie_averaged_ranks(y))


METRICS: Mapping[str, Callable[[Sequence, Sequence], float]] = {
    "accuracy": accuracy, "f1": binary_f1, "matthews_corrcoef": matthews_corrcoef,
    "pearson": pearson, "spearman": spearman}


def compute_metrics(names: Sequence[str], predictions, labels) -> dict[str, float]:
  """Several metrics of ``METRICS`` on the same predictions.

  Args:
    names: metric names, keys of ``METRICS``.
    predictions: predicted class (or score) per example.
    labels: true class (or score) per example.

  Returns:
    name -> value.
  """
  unknown = [name for name in names if name not in METRICS]
  if unknown:
    raise ValueError(f"unknown metric {unknown[0]!r}; one of {sorted(METRICS)}")
  return {name: METRICS[name](predictions, labels) for name in names}


# ----- SQuAD answers -----

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
  """SQuAD's normalisation: lower-case, drop punctuation, drop the articles a/an/the, and
  collapse whitespace."""
  text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
  return " ".join(_ARTICLES.sub(" ", text).split())


def _token_f1(prediction_tokens: list[str], gold_tokens: list[str]) -> float:
  common = collections.Counter(prediction_tokens) & collections.Counter(gold_tokens)
  same = sum(common.values())
  if same == 0:
    return 0.0
  precision, recall = same / len(prediction_tokens), same / len(gold_tokens)
  return 2 * precision * recall / (precision + recall)


def _check_version(version: str) -> None:
  if version not in ("v1.1", "v2.0"):
    raise ValueError(f"version must be 'v1.1' or 'v2.0', got {version!r}")


def _golds(gold_answers: Sequence[str], version: str) -> list[str]:
  """The gold answers a prediction is compared with: v2.0 drops the ones that normalise to
  nothing and stands an unanswerable question's empty list for [""]."""
  if isinstance(gold_answers, str):
    raise ValueError(f"gold_answers must be a sequence of answer texts, got the str "
                     f"{gold_answers!r}")
  golds = list(gold_answers)
  if version == "v2.0":
    golds = [g for g in golds if normalize_answer(g)] or [""]
  elif not golds:
    raise ValueError("gold_answers must not be empty in SQuAD v1.1 (every question has an "
                     "answer); use version='v2.0' for unanswerable questions")
  return golds


def squad_exact_match(prediction: str, gold_answers: Sequence[str], version: str = "v2.0"
                      ) -> float:
  """1.0 when the normalised prediction equals a normalised gold answer, else 0.0.

  Args:
    prediction: the predicted answer text ("" for no answer).
    gold_answers: the question's answer texts (empty for an unanswerable v2.0 question).
    version: "v1.1" or "v2.0", the official script followed.

  Returns:
    0.0 or 1.0: the maximum over the gold answers.
  """
  _check_version(version)
  normalized = normalize_answer(prediction)
  return float(max(normalized == normalize_answer(g) for g in _golds(gold_answers, version)))


def squad_f1(prediction: str, gold_answers: Sequence[str], version: str = "v2.0") -> float:
  """Token F1 between the normalised prediction and the best gold answer.

  v2.0 scores a pair in which either side normalises to no token 1.0 when both do, else 0.0
  (so an unanswerable question scores 1.0 only for an empty prediction); v1.1 scores it 0.0.

  Args:
    prediction: the predicted answer text ("" for no answer).
    gold_answers: the question's answer texts (empty for an unanswerable v2.0 question).
    version: "v1.1" or "v2.0", the official script followed.

  Returns:
    The F1 in [0, 1]: the maximum over the gold answers.
  """
  _check_version(version)
  prediction_tokens = normalize_answer(prediction).split()
  scores = []
  for gold in _golds(gold_answers, version):
    gold_tokens = normalize_answer(gold).split()
    if version == "v2.0" and (not gold_tokens or not prediction_tokens):
      scores.append(float(gold_tokens == prediction_tokens))
    else:
      scores.append(_token_f1(prediction_tokens, gold_tokens))
  return max(scores)


def squad_scores(predictions: Mapping[str, str], gold_answers: Mapping[str, Sequence[str]],
                 version: str = "v2.0") -> dict[str, float]:
  """The official evaluation of a prediction per question id.

  Args:
    predictions: question id -> predicted text ("" for no answer).
    gold_answers: question id -> its answer texts (empty when unanswerable).
    version: "v1.1" or "v2.0".

  Returns:
    ``exact_match`` and ``f1`` averaged over the questions of ``gold_answers``; for v2.0 also
    ``has_answer_*`` and ``no_answer_*`` over the answerable and unanswerable ones (where there
    are any).
  """
  _check_version(version)
  if not gold_answers:
    raise ValueError("gold_answers must hold at least one question")
  missing = [qid for qid in gold_answers if qid not in predictions]
  if missing:
    raise ValueError(f"predictions lack {len(missing)} question(s), e.g. {missing[0]!r}")
  ids = list(gold_answers)
  exact = np.array([squad_exact_match(predictions[q], gold_answers[q], version) for q in ids])
  f1 = np.array([squad_f1(predictions[q], gold_answers[q], version) for q in ids])
  out = {"exact_match": float(exact.mean()), "f1": float(f1.mean())}
  if version == "v2.0":
    answerable = np.array([bool(_golds(gold_answers[q], version)[0]) for q in ids])
    for name, subset in (("has_answer", answerable), ("no_answer", ~answerable)):
      if subset.any():
        out[f"{name}_exact_match"] = float(exact[subset].mean())
        out[f"{name}_f1"] = float(f1[subset].mean())
  return out


# ----- SQuAD decoding -----

@dataclasses.dataclass(frozen=True)
class SpanPrediction:
  """The decoding of one question over all windows of its context.

  Attributes:
    text: the best non-null span's text ("" when no window has a valid span).
    span_score: its start + end logit (-inf when there is none).
    null_score: the smallest start + end logit of [CLS] over the windows (BERT's choice).
    window: the window (feature row) of the best span, or -1.
    start_token, end_token: its token positions in that window, or -1.
  """
  text: str
  span_score: float
  null_score: float
  window: int = NULL_SPAN
  start_token: int = NULL_SPAN
  end_token: int = NULL_SPAN

  @property
  def score_diff(self) -> float:
    """null_score - span_score: the larger, the surer the question has no answer."""
    return self.null_score - self.span_score


def _logits(name: str, values, shape=None) -> np.ndarray:
  array = np.asarray(values, np.float64)
  if array.ndim != 2 or (shape is not None and array.shape != shape):
    raise ValueError(f"{name} must have shape [windows, max_seq_length]"
                     f"{'' if shape is None else f' = {list(shape)}'}, got {list(array.shape)}")
  if not np.isfinite(array).all():
    raise ValueError(f"{name} holds non-finite values")
  return array


def best_window_spans(start_logits: np.ndarray, end_logits: np.ndarray,
                      valid_start: np.ndarray, valid_end: np.ndarray,
                      max_answer_length: int = 30, chunk: int = 256
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Per window, the exact best span: the (start, end) maximising start + end logit over
  start <= end < start + max_answer_length with a valid start and a valid end token.

  Args:
    start_logits, end_logits: [W, L] logits.
    valid_start, valid_end: [W, L] booleans: the tokens a span may start / end at.
    max_answer_length: the most tokens a span may have (SQuAD's default 30).
    chunk: windows scored at once (bounds memory to chunk * L * max_answer_length).

  Returns:
    (score [W] float64, start [W] int64, end [W] int64); -inf and -1 where a window has no
    valid span.
  """
  check_int("max_answer_length", max_answer_length)
  windows, length = start_logits.shape
  span = min(int(max_answer_length), length)
  scores = np.full(windows, -np.inf)
  starts = np.full(windows, NULL_SPAN, np.int64)
  ends = np.full(windows, NULL_SPAN, np.int64)
  for low in range(0, windows, chunk):
    rows = slice(low, min(low + chunk, windows))
    end_scores = np.where(valid_end[rows], end_logits[rows], -np.inf)
    padded = np.concatenate([end_scores, np.full((end_scores.shape[0], span), -np.inf)], 1)
    # candidate[w, i, k]: the span from token i to token i + k
    shifted = np.stack([padded[:, k:k + length] for k in range(span)], -1)
    candidate = np.where(valid_start[rows][..., None], start_logits[rows][..., None], -np.inf)
    candidate = candidate + shifted
    flat = candidate.reshape(candidate.shape[0], -1).argmax(1)
    best = candidate.reshape(candidate.shape[0], -1)[np.arange(len(flat)), flat]
    found = np.isfinite(best)
    start, offset = np.divmod(flat, span)
    scores[rows] = best
    starts[rows] = np.where(found, start, NULL_SPAN)
    ends[rows] = np.where(found, start + offset, NULL_SPAN)
  return scores, starts, ends


def decode_spans(start_logits, end_logits, features: Mapping[str, np.ndarray],
                 contexts: Sequence[str], max_answer_length: int = 30) -> list[SpanPrediction]:
  """Answer texts of the questions from the start/end logits of their windows, as BERT's
  ``run_squad.py`` decodes them: a span starts at a context token of the window where that
  token has its maximal context and ends at a context token; the best span over all windows
  wins. Its text is the context's characters from the start token's first to the end token's
  last (tokens without characters, such as a lone SentencePiece word mark, are no boundary).

  Args:
    start_logits, end_logits: [W, L] logits of the W windows.
    features: the evaluation features of ``features.span_features``: ``example_index``,
      ``offset_mapping``, ``token_is_context``, ``token_is_max_context``.
    contexts: the context of each question, indexed by ``example_index``.
    max_answer_length: the most tokens an answer may have.

  Returns:
    One ``SpanPrediction`` per context, in order.
  """
  missing = [k for k in ("example_index", "offset_mapping", "token_is_context",
                         "token_is_max_context") if k not in features]
  if missing:
    raise ValueError(f"features lack {missing}: pass the evaluation features of span_features "
                     f"(is_training=False)")
  offsets = np.asarray(features["offset_mapping"])
  start_logits = _logits("start_logits", start_logits)
  end_logits = _logits("end_logits", end_logits, start_logits.shape)
  if offsets.shape[:2] != start_logits.shape:
    raise ValueError(f"start_logits has shape {list(start_logits.shape)}, the features "
                     f"{list(offsets.shape[:2])}")
  example_index = np.asarray(features["example_index"])
  if len(example_index) and (example_index.min() < 0 or example_index.max() >= len(contexts)):
    raise ValueError(f"features' example_index reaches {example_index.max()}, but there are "
                     f"{len(contexts)} contexts")
  has_characters = offsets[..., 1] > offsets[..., 0]
  in_context = (np.asarray(features["token_is_context"]) > 0) & has_characters
  valid_start = in_context & (np.asarray(features["token_is_max_context"]) > 0)
  scores, starts, ends = best_window_spans(start_logits, end_logits, valid_start, in_context,
                                           max_answer_length)
  null_scores = start_logits[:, 0] + end_logits[:, 0]
  out = []
  for example, context in enumerate(contexts):
    windows = np.flatnonzero(example_index == example)
    if not len(windows):
      raise ValueError(f"no window of the features belongs to example {example}")
    null_score = float(null_scores[windows].min())
    best = windows[np.argmax(scores[windows])]
    if not np.isfinite(scores[best]):
      out.append(SpanPrediction("", -np.inf, null_score))
      continue
    begin, finish = offsets[best, starts[best], 0], offsets[best, ends[best], 1]
    out.append(SpanPrediction(context[begin:finish], float(scores[best]), null_score,
                              int(best), int(starts[best]), int(ends[best])))
  return out


def predicts_no_answer(null_score: float, span_score: float, threshold: float = 0.0) -> bool:
  """SQuAD v2.0's decision: no answer when score(CLS) - best non-null span score > threshold.

  Args:
    null_score: the start + end logit of [CLS].
    span_score: the best non-null span's start + end logit (-inf when there is none).
    threshold: tuned on the dev set (``best_null_threshold``); BERT's default 0.

  Returns:
    True for no answer.
  """
  if not np.isfinite(null_score) or np.isnan(span_score) or np.isnan(threshold):
    raise ValueError(f"null_score must be finite and span_score and threshold numbers, got "
                     f"{null_score}, {span_score}, {threshold}")
  return bool(null_score - span_score > threshold)


def answer_texts(predictions: Sequence[SpanPrediction], version: str = "v2.0",
                 threshold: float = 0.0) -> list[str]:
  """The predicted text per question: v1.1 always the best span; v2.0 "" where
  ``predicts_no_answer``.

  Args:
    predictions: the output of ``decode_spans``.
    version: "v1.1" or "v2.0".
    threshold: the null-score threshold of v2.0.

  Returns:
    One text per question.
  """
  _check_version(version)
  if version == "v1.1":
    return [p.text for p in predictions]
  return ["" if predicts_no_answer(p.null_score, p.span_score, threshold) else p.text
          for p in predictions]


def best_null_threshold(predictions: Sequence[SpanPrediction],
                        gold_answers: Sequence[Sequence[str]], metric: str = "f1"
                        ) -> tuple[float, float]:
  """The threshold of ``predicts_no_answer`` that maximises a v2.0 score on labelled data (the
  official ``find_best_thresh``, evaluated only between distinct score differences so that the
  returned threshold reproduces the returned score).

  Args:
    predictions: the output of ``decode_spans``.
    gold_answers: each question's answer texts (empty when unanswerable).
    metric: "f1" or "exact_match".

  Returns:
    (best mean score, threshold).
  """
  if metric not in ("f1", "exact_match"):
    raise ValueError(f"metric must be 'f1' or 'exact_match', got {metric!r}")
  if len(predictions) != len(gold_answers) or not predictions:
    raise ValueError(f"predictions and gold_answers must be non-empty and of one length, got "
                     f"{len(predictions)} and {len(gold_answers)}")
  score = squad_f1 if metric == "f1" else squad_exact_match
  diffs = np.array([p.score_diff for p in predictions])
  span_scores = np.array([score(p.text, g) for p, g in zip(predictions, gold_answers)])
  null_scores = np.array([score("", g) for g in gold_answers])
  order = np.argsort(diffs, kind="stable")
  # threshold t: questions with diff <= t answer with their span, the others with "".
  gains = np.cumsum(span_scores[order] - null_scores[order])
  last_of_group = np.r_[diffs[order][1:] != diffs[order][:-1], True]
  totals = null_scores.sum() + np.r_[0.0, gains[last_of_group]]
  thresholds = np.r_[diffs[order][0] - 1.0, diffs[order][last_of_group]]
  best = int(np.argmax(totals))
  threshold = float(thresholds[best])
  if not np.isfinite(threshold):
    # Questions without any span (diff +inf) answer "" either way: the largest finite
    # difference decides the same for every question.
    finite = diffs[np.isfinite(diffs)]
    threshold = float(finite.max()) if len(finite) else 0.0
  return float(totals[best] / len(predictions)), threshold
