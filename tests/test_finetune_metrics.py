"""Downstream metrics against hand-computed values: GLUE's classification and correlation
scores, SQuAD's official normalisation, exact match and F1, span decoding across windows and the
v2.0 no-answer decision."""
import math
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

from normattn_jax.finetune import metrics
from normattn_jax.finetune.metrics import SpanPrediction


@pytest.fixture(autouse=True)
def no_warnings():
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # a metric must not warn (scipy warns before a NaN)
    yield


# ----- GLUE -----

def test_accuracy_f1_and_matthews_by_hand():
  predictions, labels = [1, 1, 0, 0, 1], [1, 0, 0, 1, 1]
  # tp = 2, tn = 1, fp = 1, fn = 1
  assert metrics.accuracy(predictions, labels) == pytest.approx(3 / 5)
  assert metrics.binary_f1(predictions, labels) == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
  assert metrics.matthews_corrcoef(predictions, labels) == pytest.approx(
      (2 * 1 - 1 * 1) / math.sqrt(3 * 3 * 2 * 2))
  assert metrics.matthews_corrcoef(labels, labels) == pytest.approx(1.0)
  assert metrics.matthews_corrcoef([1 - y for y in labels], labels) == pytest.approx(-1.0)


def test_matthews_multiclass_by_hand():
  labels, predictions = [0, 1, 2, 0, 1, 2], [0, 2, 1, 0, 0, 2]
  # correct c = 3 of s = 6, true counts (2, 2, 2), predicted counts (3, 1, 2)
  covariance = 3 * 6 - (2 * 3 + 2 * 1 + 2 * 2)
  expected = covariance / math.sqrt((36 - (9 + 1 + 4)) * (36 - 12))
  assert metrics.matthews_corrcoef(predictions, labels) == pytest.approx(expected)


def test_undefined_scores_are_zero_not_nan():
  assert metrics.binary_f1([0, 0, 0], [0, 0, 0]) == 0.0
  assert metrics.binary_f1([0, 0, 0], [1, 0, 1]) == 0.0
  assert metrics.matthews_corrcoef([1, 1, 1, 1], [0, 1, 0, 1]) == 0.0
  assert metrics.pearson([2.0, 2.0, 2.0], [1.0, 2.0, 3.0]) == 0.0
  assert metrics.spearman([1.0, 2.0, 3.0], [5.0, 5.0, 5.0]) == 0.0
  assert metrics.pearson([1.0], [3.0]) == 0.0


def test_pearson_and_spearman_by_hand():
  # deviations (-1.5, -.5, .5, 1.5) and (-3, -1, 0, 4): 11 / sqrt(5 * 26)
  assert metrics.pearson([1, 2, 3, 4], [2, 4, 5, 9]) == pytest.approx(11 / math.sqrt(130))
  # a tie shares ranks: (1, 2.5, 2.5, 4) against (1, 3, 2, 4): 4.5 / sqrt(4.5 * 5)
  np.testing.assert_array_equal(metrics.tie_averaged_ranks([1, 2, 2, 3]), [1, 2.5, 2.5, 4])
  np.testing.assert_array_equal(metrics.tie_averaged_ranks([7, 7, 7]), [2, 2, 2])
  assert metrics.spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(4.5 / math.sqrt(22.5))
  # monotone but not linear: Spearman 1, Pearson below
  x = np.arange(1.0, 8.0)
  assert metrics.spearman(x, x ** 3) == pytest.approx(1.0)
  assert metrics.pearson(x, x ** 3) < 0.95
  # huge values do not overflow into a silent 0
  assert metrics.pearson([1e200, 2e200, 3e200], [1.0, 2.0, 3.0]) == pytest.approx(1.0)


def test_bad_metric_input_names_the_argument():
  with pytest.raises(ValueError, match="predictions holds non-finite"):
    metrics.pearson([1.0, float("nan")], [1.0, 2.0])
  with pytest.raises(ValueError, match="labels holds non-finite"):
    metrics.spearman([1.0, 2.0], [1.0, float("inf")])
  with pytest.raises(ValueError, match="same length"):
    metrics.accuracy([1, 0], [1])
  with pytest.raises(ValueError, match="must not be empty"):
    metrics.accuracy([], [])
  with pytest.raises(ValueError, match="labels must be 0 or 1"):
    metrics.binary_f1([1, 0], [2, 0])
  with pytest.raises(ValueError, match="class indices"):
    metrics.matthews_corrcoef([0.5, 1.0], [0, 1])
  with pytest.raises(ValueError, match="unknown metric 'auc'"):
    metrics.compute_metrics(["accuracy", "auc"], [1], [1])
  assert metrics.compute_metrics(["accuracy", "f1"], [1, 0], [1, 1]) == {
      "accuracy": 0.5, "f1": pytest.approx(2 / 3)}


# ----- SQuAD answers -----

@pytest.mark.parametrize("text, normalized", [
    ("The  Cat!", "cat"), ("an apple, a pear", "apple pear"),
    ("Theory of the day", "theory of day"), ("U.S. ", "us"), ("  \tA\n", ""), ("the", ""),
    ("Café", "café")])
def test_normalize_answer(text, normalized):
  assert metrics.normalize_answer(text) == normalized


def test_exact_match_and_f1_by_hand():
  assert metrics.squad_exact_match("The  Cat!", ["cat"]) == 1.0
  assert metrics.squad_exact_match("cat", ["dog", "the cat"]) == 1.0  # best gold
  assert metrics.squad_exact_match("cats", ["cat"]) == 0.0
  # tokens (cat sat on mat) vs (cat on mat): P = 3/4, R = 1
  assert metrics.squad_f1("the cat sat on the mat", ["a cat on a mat"]) == pytest.approx(
      2 * 0.75 / 1.75)
  # repeated tokens count once per occurrence in both: P = 1/2, R = 1
  assert metrics.squad_f1("cat cat", ["cat"]) == pytest.approx(2 / 3)
  assert metrics.squad_f1("dog", ["cat", "big dog"]) == pytest.approx(2 / 3)
  assert metrics.squad_f1("dog", ["cat"]) == 0.0


def test_unanswerable_questions_score_only_an_empty_prediction():
  assert metrics.squad_exact_match("", [], "v2.0") == 1.0
  assert metrics.squad_f1("", [], "v2.0") == 1.0
  assert metrics.squad_exact_match("cat", [], "v2.0") == 0.0
  assert metrics.squad_f1("cat", [], "v2.0") == 0.0
  assert metrics.squad_f1("", ["cat"], "v2.0") == 0.0
  # a gold answer that normalises to nothing: v2.0 treats it as no answer, v1.1 scores F1 0
  assert metrics.squad_f1("", ["the"], "v2.0") == 1.0
  assert metrics.squad_f1("", ["the"], "v1.1") == 0.0
  assert metrics.squad_exact_match("", ["the"], "v1.1") == 1.0
  with pytest.raises(ValueError, match="v1.1"):
    metrics.squad_f1("", [], "v1.1")
  with pytest.raises(ValueError, match="version must be"):
    metrics.squad_f1("", ["x"], "v3")
  with pytest.raises(ValueError, match="sequence of answer texts"):
    metrics.squad_f1("cat", "cat")


def test_squad_scores_average_and_split_by_answerability():
  golds = {"q1": ["The cat"], "q2": [], "q3": ["red dog"], "q4": []}
  predictions = {"q1": "cat!", "q2": "", "q3": "dog", "q4": "dog"}
  scores = metrics.squad_scores(predictions, golds, "v2.0")
  assert scores["exact_match"] == pytest.approx((1 + 1 + 0 + 0) / 4)
  assert scores["f1"] == pytest.approx((1 + 1 + 2 / 3 + 0) / 4)
  assert scores["has_answer_f1"] == pytest.approx((1 + 2 / 3) / 2)
  assert scores["no_answer_exact_match"] == pytest.approx(0.5)
  v1 = metrics.squad_scores({"q1": "cat", "q3": "a red dog"}, {"q1": ["the cat"],
                                                              "q3": ["red dog"]}, "v1.1")
  assert v1 == {"exact_match": 1.0, "f1": 1.0}
  with pytest.raises(ValueError, match="predictions lack 1 question"):
    metrics.squad_scores({"q1": "cat"}, {"q1": ["cat"], "q2": []})


# ----- SQuAD decoding -----

def window_features(offsets_per_window, example_index, length, max_context=None):
  """Evaluation features of windows whose context tokens sit at positions 3.. (after
  [CLS] q [SEP])."""
  windows = len(offsets_per_window)
  offsets = np.full((windows, length, 2), -1, np.int32)
  is_context = np.zeros((windows, length), np.int32)
  for w, token_offsets in enumerate(offsets_per_window):
    offsets[w, 3:3 + len(token_offsets)] = np.reshape(token_offsets, (-1, 2))
    is_context[w, 3:3 + len(token_offsets)] = 1
  is_max = is_context.copy() if max_context is None else np.asarray(max_context, np.int32)
  return {"example_index": np.asarray(example_index, np.int32), "offset_mapping": offsets,
          "token_is_context": is_context, "token_is_max_context": is_max}


CONTEXT = "alpha beta gamma delta epsilon"
WORDS = [(0, 5), (6, 10), (11, 16), (17, 22), (23, 30)]


def test_decoding_picks_the_best_valid_span_across_windows():
  length = 9
  # window 0 holds alpha beta gamma delta, window 1 gamma delta epsilon
  features = window_features([WORDS[:4], WORDS[2:]], [0, 0], length)
  start = np.zeros((2, length))
  end = np.zeros((2, length))
  start[0, 6], end[0, 3] = 4.0, 4.0  # 8 as a pair, but the end lies before the start
  start[1, 3], end[1, 4] = 2.0, 3.0  # gamma delta in window 1
  start[0, 1], end[0, 1] = 50.0, 50.0  # the question: not context
  (prediction,) = metrics.decode_spans(start, end, features, [CONTEXT])
  assert prediction.text == "gamma delta"
  assert (prediction.window, prediction.start_token, prediction.end_token) == (1, 3, 4)
  assert prediction.span_score == pytest.approx(5.0)
  assert prediction.null_score == 0.0  # the smaller [CLS] score of the two windows


def test_decoding_limits_the_answer_length_and_respects_max_context():
  length = 9
  features = window_features([WORDS], [0], length)
  start, end = np.zeros((1, length)), np.zeros((1, length))
  start[0, 3], end[0, 7] = 5.0, 5.0  # alpha .. epsilon: 5 tokens
  start[0, 4] = 1.0
  (long,) = metrics.decode_spans(start, end, features, [CONTEXT])
  assert long.text == CONTEXT
  (short,) = metrics.decode_spans(start, end, features, [CONTEXT], max_answer_length=4)
  assert short.text == "beta gamma delta epsilon"  # start 4 + end 7 beats 5 + any end <= 6
  not_max = features["token_is_max_context"].copy()
  not_max[0, 3] = 0  # "alpha" has more context in another window: no span starts there
  (moved,) = metrics.decode_spans(start, end, dict(features, token_is_max_context=not_max),
                                  [CONTEXT])
  assert moved.text == "beta gamma delta epsilon"


def test_decoding_without_any_span_and_bad_logits():
  features = window_features([[]], [0], 5)
  (nothing,) = metrics.decode_spans(np.zeros((1, 5)), np.zeros((1, 5)), features, [""])
  assert nothing.text == "" and nothing.span_score == -np.inf
  assert metrics.answer_texts([nothing]) == [""]
  with pytest.raises(ValueError, match="start_logits holds non-finite"):
    metrics.decode_spans(np.full((1, 5), np.nan), np.zeros((1, 5)), features, [""])
  with pytest.raises(ValueError, match="end_logits must have shape"):
    metrics.decode_spans(np.zeros((1, 5)), np.zeros((1, 4)), features, [""])
  with pytest.raises(ValueError, match="max_answer_length"):
    metrics.decode_spans(np.zeros((1, 5)), np.zeros((1, 5)), features, [""], 0)


def test_null_threshold_decision():
  assert metrics.predicts_no_answer(5.0, 3.0, 1.0)  # 2 > 1
  assert not metrics.predicts_no_answer(5.0, 3.0, 2.0)  # not strictly greater
  assert metrics.predicts_no_answer(5.0, -np.inf)
  span = SpanPrediction("cat", span_score=4.0, null_score=5.0)
  assert metrics.answer_texts([span], "v2.0", threshold=0.0) == [""]
  assert metrics.answer_texts([span], "v2.0", threshold=1.5) == ["cat"]
  assert metrics.answer_texts([span], "v1.1") == ["cat"]


def test_best_null_threshold_by_hand():
  predictions = [SpanPrediction("cat", 0.0, 1.0),    # diff 1, answerable, span right
                 SpanPrediction("dog", 0.0, 2.0),    # diff 2, unanswerable
                 SpanPrediction("red", 0.0, 3.0),    # diff 3, answerable, span right
                 SpanPrediction("", -np.inf, 0.0)]   # no span at all, unanswerable
  golds = [["cat"], [], ["red"], []]
  # t < 1: 2 of 4 (the no-answers); t in [1, 2): 3; [2, 3): 2; >= 3: 3 -> the first wins
  score, threshold = metrics.best_null_threshold(predictions, golds, "exact_match")
  assert score == pytest.approx(3 / 4) and threshold == pytest.approx(1.0)
  texts = metrics.answer_texts(predictions, "v2.0", threshold)
  assert (metrics.squad_scores(dict(enumerate(texts)), dict(enumerate(golds)))["exact_match"]
          == pytest.approx(score))


# ----- the core install -----

WITHOUT_EXTRAS = textwrap.dedent("""
    import sys

    class Blocker:
      # the optional packages are not installed
      def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in sys.argv[1].split(","):
          raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

    sys.meta_path.insert(0, Blocker())
    from normattn_jax.finetune import features, metrics, task, tfds_tasks

    print(metrics.squad_f1("The cat", ["a cat"]), metrics.pearson([1, 2], [2, 4]))
    print("cola" in task.FINETUNE_TASKS)
    try:
      tfds_tasks.load_task("cola", "train", None, 16)
    except ImportError as err:
      print(err)
    """)


def test_metrics_and_features_import_without_the_extras():
  """Metrics, features and the registry of tasks (the TFDS ones among them) import without the
  extras; reading a TFDS task names the extra it needs."""
  blocked = ("tensorflow_datasets", "array_record", "sentencepiece", "tokenizers", "scipy",
             "safetensors", "ml_collections", "matplotlib")
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  done = subprocess.run([sys.executable, "-c", WITHOUT_EXTRAS, ",".join(blocked)], cwd=root,
                        capture_output=True, text=True, timeout=300,
                        env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert done.returncode == 0, done.stderr
  assert done.stdout.splitlines() == [
      "1.0 1.0", "True", "normattn_jax.finetune.tfds_tasks needs the optional package "
      "tensorflow_datasets: pip install 'normattn_jax[pretrain]'"]


def test_a_learning_rate_whose_seeds_diverged_is_never_the_best():
  """Rate 0.1: one seed reached 0.9, two diverged; rate 0.01: three seeds at 0.6."""
  from types import SimpleNamespace
  from normattn_jax.finetune.train import summarise
  config = SimpleNamespace(learning_rates=(0.1, 0.01), num_seeds=3,
                           train=SimpleNamespace(num_steps=10, eval_every=10))
  task = SimpleNamespace(name="t", description="", head="classification", metrics=("accuracy",),
                         train={"input_ids": np.zeros((4, 2))}, dev={"input_ids": np.zeros((2, 2))})
  nan = np.nan
  history = {"diverged": np.array([[0, 1, 1, 0, 0, 0]]),
             "train_loss": np.array([[0.1, nan, nan, 0.5, 0.5, 0.5]]),
             "accuracy": np.array([[0.9, nan, nan, 0.6, 0.6, 0.6]])}
  summary = summarise(config, task, history)
  assert summary["cells"][0]["accuracy"]["mean"] == 0.9 and summary["cells"][0]["diverged"] == 2
  assert summary["best"]["learning_rate"] == 0.01
