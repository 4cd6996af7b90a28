"""The downstream tasks of the DNAS paper through TFDS's builders: GLUE, SQuAD v1.1/v2.0 and
RACE as fixed-length features (``normattn_jax.finetune.features``).

TFDS downloads and prepares a task on first use (a network is needed then) into ``data_dir``
and reads it back through ``as_data_source`` (array_record, no TensorFlow needed to read).
Preparing ``race`` needs TensorFlow, as TFDS writes its nested option lists with it.

``LOADERS`` makes every task of ``TFDS_TASKS`` a fine-tuning task (``finetune_task``), registered
with the others as the package is imported (``normattn_jax.finetune``). TFDS itself is imported
when a task is read (``load_task``), so that the tasks are known without the extra that reads
them.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
from typing import Any, Callable, Optional, Sequence

import numpy as np

from normattn_jax._extras import require
from normattn_jax.finetune import features as features_lib
from normattn_jax.finetune import metrics
from normattn_jax.finetune import task as task_lib

CLASSIFICATION, REGRESSION, SPAN, MULTIPLE_CHOICE = (
    "classification", "regression", "span", "multiple_choice")
# ``import tensorflow_datasets`` registers its builders lazily and, without TensorFlow, skips
# whole packages that hold these: their own modules register them.
_BUILDER_MODULES = ("tensorflow_datasets.text.glue",
                    "tensorflow_datasets.question_answering.squad",
                    "tensorflow_datasets.text.race")
_GLUE_SPLITS = ("train", "validation", "test")
_MNLI_SPLITS = ("train", "validation_matched", "validation_mismatched", "test_matched",
                "test_mismatched")
_SQUAD_SPLITS = ("train", "validation")
_RACE_SPLITS = ("train", "dev", "test")
RACE_NUM_CHOICES = 4


@dataclasses.dataclass(frozen=True)
class DownstreamTask:
  """One downstream task.

  Attributes:
    name: the project's name of the task.
    tfds_names: the TFDS datasets it reads, concatenated in this order.
    text_fields: the TFDS feature names of its texts, first segment first.
    kind: "classification", "regression", "span" or "multiple_choice".
    num_labels: classes; 1 for a score; 2 (start, end) per token for spans; the choices.
    metrics: names in ``metrics.METRICS`` (classification, regression, multiple choice) or the
      SQuAD scores "exact_match" and "f1".
    dev_splits: the splits the papers report (GLUE's and SQuAD's validation, RACE's dev).
    splits: every split of the TFDS dataset.
  """
  name: str
  tfds_names: tuple[str, ...]
  text_fields: tuple[str, ...]
  kind: str
  num_labels: int
  metrics: tuple[str, ...]
  dev_splits: tuple[str, ...]
  splits: tuple[str, ...]

  @property
  def squad_version(self) -> str:
    """"v1.1" or "v2.0" for the SQuAD tasks."""
    if self.kind != SPAN:
      raise ValueError(f"task {self.name!r} is no SQuAD task")
    return self.tfds_names[0].rpartition("/")[2]


def _glue(name, fields, num_labels=2, metrics=("accuracy",), kind=CLASSIFICATION,
          dev_splits=("validation",), splits=_GLUE_SPLITS):
  return DownstreamTask(name, (f"glue/{name}",), fields, kind, num_labels, metrics, dev_splits,
                        splits)


TFDS_TASKS = {task.name: task for task in (
    _glue("cola", ("sentence",), metrics=("matthews_corrcoef",)),
    _glue("sst2", ("sentence",)),
    _glue("mrpc", ("sentence1", "sentence2"), metrics=("f1", "accuracy")),
    _glue("qqp", ("question1", "question2"), metrics=("f1", "accuracy")),
    _glue("stsb", ("sentence1", "sentence2"), num_labels=1, metrics=("pearson", "spearman"),
          kind=REGRESSION),
    _glue("mnli", ("premise", "hypothesis"), num_labels=3,
          dev_splits=("validation_matched", "validation_mismatched"), splits=_MNLI_SPLITS),
    _glue("qnli", ("question", "sentence")),
    _glue("rte", ("sentence1", "sentence2")),
    _glue("wnli", ("sentence1", "sentence2")),
    DownstreamTask("squad_v1.1", ("squad/v1.1",), ("question", "context"), SPAN, 2,
                   ("exact_match", "f1"), ("validation",), _SQUAD_SPLITS),
    DownstreamTask("squad_v2.0", ("squad/v2.0",), ("question", "context"), SPAN, 2,
                   ("exact_match", "f1"), ("validation",), _SQUAD_SPLITS),
    DownstreamTask("race", ("race/middle", "race/high"), ("article", "questions", "options"),
                   MULTIPLE_CHOICE, RACE_NUM_CHOICES, ("accuracy",), ("dev",), _RACE_SPLITS),
    DownstreamTask("race_middle", ("race/middle",), ("article", "questions", "options"),
                   MULTIPLE_CHOICE, RACE_NUM_CHOICES, ("accuracy",), ("dev",), _RACE_SPLITS),
    DownstreamTask("race_high", ("race/high",), ("article", "questions", "options"),
                   MULTIPLE_CHOICE, RACE_NUM_CHOICES, ("accuracy",), ("dev",), _RACE_SPLITS),
)}
GLUE_TASKS = tuple(name for name, task in TFDS_TASKS.items()
                   if task.tfds_names[0].startswith("glue"))


@dataclasses.dataclass(frozen=True)
class TaskSplit:
  """One split of a task as features.

  Attributes:
    task: the task.
    split: the split.
    features: the arrays of ``normattn_jax.finetune.features`` for the task's kind.
    examples: the SQuAD questions, indexed by the features' ``example_index`` (the contexts
      and gold answers that scoring needs); None for the other kinds.
    num_skipped: training questions left out because their answer is not in the context
      where the data says.
  """
  task: DownstreamTask
  split: str
  features: dict
  examples: Optional[tuple[features_lib.SquadExample, ...]] = None
  num_skipped: int = 0

  @property
  def num_examples(self) -> int:
    return len(self.examples) if self.examples is not None else len(self.features["label"])


def task_spec(name: str) -> DownstreamTask:
  """The task called ``name``, or a ValueError listing the known ones."""
  if name not in TFDS_TASKS:
    raise ValueError(f"unknown task {name!r}; one of {sorted(TFDS_TASKS)}")
  return TFDS_TASKS[name]


# ----- reading TFDS values -----

def _text(value) -> str:
  """A TFDS text as str: decoded arrays hold bytes (or str, or 0-d object arrays)."""
  if isinstance(value, np.ndarray):
    value = value.item() if value.ndim == 0 else value
  if isinstance(value, bytes):
    return value.decode("utf-8")
  if isinstance(value, str):
    return value
  raise ValueError(f"expected a text, got {type(value).__name__}: {value!r}")


def _texts(values) -> list[str]:
  return [_text(v) for v in (values.tolist() if isinstance(values, np.ndarray) else values)]


def _number(value):
  return np.asarray(value).item()


def _records(source, limit: Optional[int]):
  count = len(source) if limit is None else min(len(source), limit)
  return (source[key] for key in range(count))


def _open(tfds, tfds_name: str, split: str, data_dir: Optional[str]):
  for module in _BUILDER_MODULES:
    importlib.import_module(module)
  builder = tfds.builder(tfds_name, data_dir=data_dir)
  try:
    builder.download_and_prepare()
  except ImportError as err:
    if not _lacks_tensorflow(err):
      raise
    raise ImportError(f"TFDS needs TensorFlow to prepare {tfds_name}: pip install tensorflow "
                      f"(reading it back does not)", name="tensorflow") from err
  return builder.as_data_source(split=split)


def _lacks_tensorflow(err: BaseException) -> bool:
  """Whether a missing TensorFlow caused ``err`` (TFDS re-raises it with a longer message)."""
  while err is not None:
    if isinstance(err, ModuleNotFoundError) and (
        err.name == "tensorflow" or "No module named 'tensorflow'" in str(err)):
      return True
    err = err.__cause__ or err.__context__
  return False


# ----- the kinds of task -----

def _glue_features(task, records, tokenizer, max_seq_length) -> dict:
  records = list(records)
  texts = [[_text(r[field]) for r in records] for field in task.text_fields]
  labels = np.array([_number(r["label"]) for r in records],
                    np.float32 if task.kind == REGRESSION else np.int64)
  return features_lib.classification_features(
      tokenizer, texts[0], texts[1] if len(texts) > 1 else None, labels, max_seq_length,
      regression=task.kind == REGRESSION,
      num_labels=None if task.kind == REGRESSION else task.num_labels)


def squad_example(record) -> features_lib.SquadExample:
  """A TFDS ``squad`` record (v1.1 or v2.0) as a ``SquadExample``."""
  answers = record["answers"]
  return features_lib.SquadExample(
      id=_text(record["id"]), question=_text(record["question"]),
      context=_text(record["context"]), answers=tuple(_texts(answers["text"])),
      answer_starts=tuple(int(s) for s in np.asarray(answers["answer_start"]).reshape(-1)),
      is_impossible=bool(_number(record["is_impossible"])) if "is_impossible" in record
      else False)


def race_questions(record) -> list[tuple[str, list[str], int]]:
  """The questions of a TFDS ``race`` article: (article, the 4 choice texts, label) each."""
  article = _text(record["article"])
  questions, answers = _texts(record["questions"]), _texts(record["answers"])
  options = [_texts(o) for o in record["options"]]
  example_id = _text(record["example_id"])
  if not len(questions) == len(answers) == len(options):
    raise ValueError(f"race article {example_id!r} has {len(questions)} questions, "
                     f"{len(answers)} answers and {len(options)} option lists")
  out = []
  for question, answer, choices in zip(questions, answers, options):
    label = ord(answer) - ord("A") if len(answer) == 1 else -1
    if len(choices) != RACE_NUM_CHOICES or not 0 <= label < RACE_NUM_CHOICES:
      raise ValueError(f"race article {example_id!r}: a question needs {RACE_NUM_CHOICES} "
                       f"options and an answer A-D, got {len(choices)} options and answer "
                       f"{answer!r}")
    out.append((article, [features_lib.race_choice_text(question, c) for c in choices], label))
  return out


def load_task(name: str, split: str, tokenizer, max_seq_length: int,
              data_dir: Optional[str] = None, *, doc_stride: int = 128,
              max_query_length: int = 64, max_qa_length: int = 128,
              max_examples: Optional[int] = None,
              log: Callable[[str], Any] = print) -> TaskSplit:
  """One split of a task as fixed-length features.

  Args:
    name: a key of ``TFDS_TASKS``.
    split: one of the task's ``splits`` (MNLI's dev: "validation_matched" or
      "validation_mismatched"; RACE's: "dev").
    tokenizer: anything ``features.as_tokenizer`` takes (ALBERT's SentencePiece ``Vocab`` or
      a BERT ``tokenizers.Tokenizer``, or their paths).
    max_seq_length: L.
    data_dir: TFDS's data folder (its default when None).
    doc_stride: SQuAD's stride between context windows.
    max_query_length: SQuAD's question tokens.
    max_qa_length: RACE's question + option tokens.
    max_examples: read only the first so many records of each TFDS dataset (a quick run).
    log: reports skipped training questions.

  Returns:
    A ``TaskSplit``.
  """
  task = task_spec(name)
  if split not in task.splits:
    raise ValueError(f"split {split!r} is not a split of {name}; one of {task.splits}")
  features_lib._check_int("max_seq_length", max_seq_length, 5)
  if max_examples is not None:
    features_lib._check_int("max_examples", max_examples, 1)
  tfds = require("tensorflow_datasets", "pretrain")
  tokenizer = features_lib.as_tokenizer(tokenizer)
  records = [record for tfds_name in task.tfds_names
             for record in _records(_open(tfds, tfds_name, split, data_dir), max_examples)]
  if not records:
    raise ValueError(f"{name} {split!r} holds no example")
  if task.kind in (CLASSIFICATION, REGRESSION):
    return TaskSplit(task, split, _glue_features(task, records, tokenizer, max_seq_length))
  if task.kind == MULTIPLE_CHOICE:
    questions = [q for record in records for q in race_questions(record)]
    arrays = features_lib.multiple_choice_features(
        tokenizer, [q[0] for q in questions], [q[1] for q in questions],
        np.array([q[2] for q in questions]), max_seq_length, max_qa_length=max_qa_length)
    return TaskSplit(task, split, arrays)
  examples = [squad_example(record) for record in records]
  is_training = split == "train"
  skipped = 0
  if is_training:
    kept = [e for e in examples if e.is_impossible or e.answer_span() is not None]
    skipped = len(examples) - len(kept)
    if skipped:
      log(f"{name} {split}: left out {skipped} of {len(examples)} questions whose answer is "
          f"not in the context at its answer_start")
    examples = kept
  if not examples:
    raise ValueError(f"{name} {split!r}: no question has its answer where the data says")
  arrays = features_lib.span_features(tokenizer, examples, max_seq_length,
                                      doc_stride=doc_stride, max_query_length=max_query_length,
                                      is_training=is_training)
  return TaskSplit(task, split, arrays, tuple(examples), skipped)


def evaluation_answers(task_split: TaskSplit) -> dict[str, Sequence[str]]:
  """Question id -> gold answer texts of a SQuAD split (for ``metrics.squad_scores``)."""
  if task_split.examples is None:
    raise ValueError(f"task {task_split.task.name!r} has no SQuAD examples")
  return {example.id: example.answers for example in task_split.examples}


# ----- as a fine-tuning task -----

def finetune_task(name: str, tokenizer, c) -> task_lib.FinetuneTask:
  """The task ``name`` of ``TFDS_TASKS`` to fine-tune on: its train split and the first of the
  splits the papers report, scored by the task's metrics (SQuAD: decoded answer texts against
  the gold ones, the official exact match and F1).

  Args:
    name: a key of ``TFDS_TASKS``.
    tokenizer: the encoder's tokenizer.
    c: the fine-tuning config's ``task`` section.

  Returns:
    A ``task.FinetuneTask``.
  """
  spec = task_spec(name)
  options = dict(data_dir=c.data_dir or None, max_examples=c.max_examples or None)
  train = load_task(name, "train", tokenizer, c.max_seq_length, **options)
  dev = load_task(name, spec.dev_splits[0], tokenizer, c.max_seq_length, **options)
  if spec.kind == SPAN:
    score = _squad_scorer(dev, spec.squad_version)
  else:
    labels = dev.features["label"]
    score = lambda predictions: metrics.compute_metrics(spec.metrics, predictions, labels)
  return task_lib.FinetuneTask(name, spec.kind, spec.num_labels, train.features, dev.features,
                               score, spec.metrics, description=f"{name} "
                               f"({', '.join(spec.tfds_names)}): train and {spec.dev_splits[0]}")


def _squad_scorer(dev: TaskSplit, version: str) -> Callable:
  """Span logits ``[windows, L, 2]`` -> the official exact match and F1 of the answer texts."""
  contexts = [example.context for example in dev.examples]
  answers = evaluation_answers(dev)

  def score(logits):
    decoded = metrics.decode_spans(logits[..., 0], logits[..., 1], dev.features, contexts)
    texts = metrics.answer_texts(decoded, version)
    scores = metrics.squad_scores({e.id: t for e, t in zip(dev.examples, texts)}, answers,
                                  version)
    return {"exact_match": scores["exact_match"], "f1": scores["f1"]}
  return score


# The fine-tuning tasks of this module, registered by ``normattn_jax.finetune`` as it loads.
LOADERS = tuple(task_lib.TaskLoader(name, functools.partial(finetune_task, name))
                for name in TFDS_TASKS)
