"""What the fine-tuning grid needs of a downstream task: fixed-length features of a train and a
dev split, the head that fits them, and how to score the dev predictions.

Features are numpy arrays with a leading example axis: ``input_ids``, ``token_type_ids``,
``attention_mask`` (int32 ``[n, L]``, or ``[n, C, L]`` for multiple choice) and the head's
label fields (``label`` int32 or float32; ``start_positions``, ``end_positions``). Tasks are
registered by name (``register``) as loaders ``(tokenizer, task_config) -> FinetuneTask``.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Mapping

import numpy as np

from normattn_jax.finetune import heads as heads_lib

FEATURES = ("input_ids", "token_type_ids", "attention_mask")


@dataclasses.dataclass(frozen=True)
class FinetuneTask:
  """A downstream task ready to train on.

  Attributes:
    name: the task's name.
    head: a registered head (``heads.HEADS``).
    num_labels: classes (classification), 1 (regression), options (multiple choice).
    train: the train split's features and labels.
    dev: the dev split's, scored by ``score``.
    score: ``(predictions for every dev example) -> {metric: value}``.
    metrics: the names ``score`` returns, the main one first.
    description: how the task was made (for the summary).
  """
  name: str
  head: str
  num_labels: int
  train: Mapping[str, np.ndarray]
  dev: Mapping[str, np.ndarray]
  score: Callable[[np.ndarray], dict]
  metrics: tuple
  description: str = ""

  def __post_init__(self):
    head = heads_lib.get(self.head)
    for split, arrays in (("train", self.train), ("dev", self.dev)):
      missing = [f for f in FEATURES + head.label_fields if f not in arrays]
      if missing:
        raise ValueError(f"task {self.name!r}: the {split} split lacks {missing}")
      sizes = {len(arrays[f]) for f in FEATURES + head.label_fields}
      if len(sizes) != 1 or not sizes.pop():
        raise ValueError(f"task {self.name!r}: the {split} split's fields differ in length or "
                         f"are empty")
    if not self.metrics:
      raise ValueError(f"task {self.name!r}: names no metric")

  @property
  def seq_len(self) -> int:
    return int(self.train["input_ids"].shape[-1])

  def arrays(self, split: str) -> dict:
    """The fields the head reads, as int32 features and labels of their own dtype."""
    head = heads_lib.get(self.head)
    source = self.train if split == "train" else self.dev
    out = {f: np.asarray(source[f], np.int32) for f in FEATURES}
    out.update({f: np.asarray(source[f]) for f in head.label_fields})
    return out


TASKS: dict = {}


def register(name: str, loader: Callable) -> None:
  """Make ``loader(tokenizer, task_config) -> FinetuneTask`` known as ``name``."""
  TASKS[name] = loader


def known(name: str) -> bool:
  """Whether ``name`` is a registered task or one of ``finetune.tfds_tasks``."""
  if name in TASKS:
    return True
  from normattn_jax.finetune import tfds_tasks
  return name in tfds_tasks.TASKS


def load(name: str, tokenizer, task_config) -> FinetuneTask:
  """The task ``name`` for an encoder's tokenizer: a registered one, else the TFDS task of
  that name (``finetune.tfds_tasks``; its first download needs a network)."""
  if name in TASKS:
    return TASKS[name](tokenizer, task_config)
  if not known(name):
    raise ValueError(f"config.task.name={name!r}: must be a registered task {tuple(TASKS)} "
                     f"or a TFDS task of finetune.tfds_tasks")
  return tfds_task(name, tokenizer, task_config)


def tfds_task(name: str, tokenizer, c) -> FinetuneTask:
  """A GLUE, SQuAD or RACE task of ``finetune.tfds_tasks``: its train split and the first of
  the splits the papers report, scored by the task's metrics (SQuAD: decoded answer texts
  against the gold ones, the official exact match and F1)."""
  from normattn_jax.finetune import metrics, tfds_tasks
  spec = tfds_tasks.task_spec(name)
  options = dict(data_dir=c.data_dir or None, max_examples=c.max_examples or None)
  train = tfds_tasks.load_task(name, "train", tokenizer, c.max_seq_length, **options)
  dev = tfds_tasks.load_task(name, spec.dev_splits[0], tokenizer, c.max_seq_length, **options)
  if spec.kind == tfds_tasks.SPAN:
    score = _squad_scorer(dev, spec.squad_version)
  else:
    labels = dev.features["label"]
    score = lambda predictions: metrics.compute_metrics(spec.metrics, predictions, labels)
  return FinetuneTask(name, spec.kind, spec.num_labels, train.features, dev.features, score,
                      spec.metrics, description=f"{name} ({', '.join(spec.tfds_names)}): "
                      f"train and {spec.dev_splits[0]}")


def _squad_scorer(dev, version: str) -> Callable:
  """Span logits ``[windows, L, 2]`` -> the official exact match and F1 of the answer texts."""
  from normattn_jax.finetune import metrics, tfds_tasks
  contexts = [example.context for example in dev.examples]
  answers = tfds_tasks.evaluation_answers(dev)

  def score(logits):
    decoded = metrics.decode_spans(logits[..., 0], logits[..., 1], dev.features, contexts)
    texts = metrics.answer_texts(decoded, version)
    scores = metrics.squad_scores({e.id: t for e, t in zip(dev.examples, texts)}, answers,
                                  version)
    return {"exact_match": scores["exact_match"], "f1": scores["f1"]}
  return score
