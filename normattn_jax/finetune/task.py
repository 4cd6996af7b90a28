"""What the fine-tuning grid needs of a downstream task: fixed-length features of a train and a
dev split, the head that fits them, and how to score the dev predictions.

Features are numpy arrays with a leading example axis: ``input_ids``, ``token_type_ids``,
``attention_mask`` (int32 ``[n, L]``, or ``[n, C, L]`` for multiple choice) and the head's
label fields (``label`` int32 or float32; ``start_positions``, ``end_positions``), checked
when a ``FinetuneTask`` is made (``check_split``) and against the encoder's vocabulary
(``FinetuneTask.check_ids``) before anything compiles. Tasks are registered by name
(``register(TaskLoader(name, load, check))``), their loaders making a ``FinetuneTask`` for a
tokenizer.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Optional

import numpy as np

from normattn_jax.finetune import heads as heads_lib
from normattn_jax.registry import Registry
from normattn_jax.validation import int_problem

FEATURES = ("input_ids", "token_type_ids", "attention_mask")


@dataclasses.dataclass(frozen=True)
class FinetuneTask:
  """A downstream task ready to train on.

  Attributes:
    name: the task's name.
    head: a registered head (``heads.REGISTRY``).
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
    if int_problem(self.num_labels):
      raise ValueError(f"task {self.name!r}: num_labels must be a positive integer, got "
                       f"{self.num_labels!r}")
    for split, arrays in (("train", self.train), ("dev", self.dev)):
      check_split(f"task {self.name!r}: the {split} split", arrays, head, self.num_labels)
    if not self.metrics:
      raise ValueError(f"task {self.name!r}: names no metric")

  def check_ids(self, vocab_size: int, type_vocab_size: int) -> None:
    """Refuse token ids the encoder has no embedding for (a lookup out of range gives NaN, and
    the run would count as diverged instead of failing)."""
    for split, arrays in (("train", self.train), ("dev", self.dev)):
      for field, size in (("input_ids", vocab_size), ("token_type_ids", type_vocab_size)):
        values = np.asarray(arrays[field])
        bad = values >= size
        if bad.any():
          raise ValueError(f"task {self.name!r}: the {split} split's {field} holds "
                           f"{_first(bad, values)}, beyond the encoder's {size} ids")

  @property
  def seq_len(self) -> int:
    """The examples' length in tokens (the last axis of the train split's ``input_ids``)."""
    return int(self.train["input_ids"].shape[-1])

  def arrays(self, split: str) -> dict:
    """The fields the head reads, as int32 features and labels of their own dtype."""
    head = heads_lib.get(self.head)
    source = self.train if split == "train" else self.dev
    out = {f: np.asarray(source[f], np.int32) for f in FEATURES}
    out.update({f: np.asarray(source[f]) for f in head.label_fields})
    return out


def _first(bad: np.ndarray, values: np.ndarray) -> str:
  """The first offending value and the example it is in."""
  index = tuple(np.argwhere(bad)[0])
  return f"{values[index].item()!r} at example {int(index[0])}"


def _check_integers(where: str, field: str, values: np.ndarray) -> None:
  if values.dtype.kind not in "iu":
    raise ValueError(f"{where}'s {field} must be integers, got dtype {values.dtype}")


def _check_range(where: str, field: str, values: np.ndarray, low, high) -> None:
  """Every value in [low, high)."""
  bad = (values < low) | (values >= high)
  if bad.any():
    raise ValueError(f"{where}'s {field} must lie in [{low}, {high}), got {_first(bad, values)}")


def check_split(where: str, arrays: Mapping[str, np.ndarray], head: heads_lib.Head,
                num_labels: int) -> None:
  """Refuse features the head cannot train on, before anything compiles: every field
  present, int features ``[n, L]`` (``[n, C, L]`` with options), one label per example, and
  labels of the head's kind in range. ``where`` names the task and the split in errors."""
  missing = [f for f in FEATURES + head.label_fields if f not in arrays]
  if missing:
    raise ValueError(f"{where} lacks {missing}")
  values = {f: np.asarray(arrays[f]) for f in FEATURES + head.label_fields}
  ids = values["input_ids"]
  layout = "[examples, options, length]" if head.option_axis else "[examples, length]"
  if ids.ndim != 2 + head.option_axis:
    raise ValueError(f"{where}'s input_ids must be {layout}, got shape {ids.shape}")
  if not len(ids):
    raise ValueError(f"{where} is empty")
  for field in FEATURES:
    _check_integers(where, field, values[field])
    if values[field].shape != ids.shape:
      raise ValueError(f"{where}'s {field} must be shaped as input_ids {ids.shape}, got "
                       f"{values[field].shape}")
  _check_range(where, "input_ids", ids, 0, np.inf)
  _check_range(where, "token_type_ids", values["token_type_ids"], 0, np.inf)
  _check_range(where, "attention_mask", values["attention_mask"], 0, 2)
  if head.option_axis and ids.shape[1] != num_labels:
    raise ValueError(f"{where} has {ids.shape[1]} options per example, but num_labels is "
                     f"{num_labels}")
  for field in head.label_fields:
    labels = values[field]
    if labels.shape != (len(ids),):
      raise ValueError(f"{where}'s {field} must hold one value per example, shape "
                       f"({len(ids)},), got {labels.shape}")
    if head.labels == "classes":
      _check_integers(where, field, labels)
      _check_range(where, field, labels, 0, num_labels)
    elif head.labels == "positions":
      _check_integers(where, field, labels)
      _check_range(where, field, labels, 0, ids.shape[-1])
    elif head.labels == "values":
      if labels.dtype.kind not in "iuf":
        raise ValueError(f"{where}'s {field} must be numbers, got dtype {labels.dtype}")
      bad = ~np.isfinite(labels)
      if bad.any():
        raise ValueError(f"{where}'s {field} must be finite, got {_first(bad, labels)}")


@dataclasses.dataclass(frozen=True)
class TaskLoader:
  """A downstream task by name: how to make it for an encoder's tokenizer, and how to refuse a
  config it cannot be made from before anything is written.

  Attributes:
    name: the task's name (``config.task.name``).
    load: ``(tokenizer, task_config) -> FinetuneTask``.
    check: ``task_config -> None``, raising a ValueError naming the field and the value where
      ``load`` would refuse the config; it runs before the workdir is written, so that the
      corrected command needs no ``--afresh``. It may read the task's data (no tokenizer).
      None checks nothing.
  """
  name: str
  load: Callable
  check: Optional[Callable] = None


def _check_loader(loader: TaskLoader) -> None:
  for field in ("load", "check"):
    value = getattr(loader, field)
    if not callable(value) and not (field == "check" and value is None):
      raise ValueError(f"fine-tuning task {loader.name!r}: {field} must be callable, got "
                       f"{value!r}")


# Every fine-tuning task, built-in or a user's, is one ``TaskLoader`` here: the package
# registers the offline and the TFDS tasks as it is imported (``normattn_jax.finetune``), a user
# their own with ``register(TaskLoader(...))`` (in a module given to ``--plugins``).
# register(loader, *, replace=False) refuses a name already taken; get(name) names the registered
# tasks when ``name`` is none of them.
REGISTRY: Registry[TaskLoader] = Registry("fine-tuning task", TaskLoader, _check_loader)
register = REGISTRY.register
unregister = REGISTRY.unregister
get = REGISTRY.get
names = REGISTRY.names
FINETUNE_TASKS = REGISTRY.view  # the live, tuple-like view of the names


def check_config(name: str, task_config) -> None:
  """The registered task's ``check`` of its config, if it has one."""
  check = get(name).check
  if check is not None:
    check(task_config)


def load(name: str, tokenizer, task_config) -> FinetuneTask:
  """The registered task ``name`` for an encoder's tokenizer (a TFDS task's first download
  needs a network)."""
  return get(name).load(tokenizer, task_config)
