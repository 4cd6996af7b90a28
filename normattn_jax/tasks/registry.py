"""The task registry: one ``Task`` object per name, carrying all that differs between tasks.

The grid engine, the config validation and the figures look a task up here instead of testing
for its name, so a task registered from user code (``register(Task(...))``) trains through
``run_sweep`` and the sweep CLI (``--plugins=my_tasks``) like a built-in one. A task owns its
settings as a normalisation owns its options (``validation.Option``: name, default, rule): a
sweep sets them in its ``task`` section (``--config.task.<setting>=...``), and the task's
functions read them, defaults filled in, from ``resolved_settings``.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import jax
import numpy as np

from normattn_jax import _moved
from normattn_jax.models.sequence import OUTPUTS
from normattn_jax.registry import Registry
from normattn_jax.validation import Option, fail_config

Array = jax.Array
# The fields of a config's ``task`` section that every task shares (``train.config``): a setting
# of one task may not take their names, which the validation would read as the shared field.
SHARED_FIELDS = ("name", "seq_len", "vocab_size", "output")
# sample(key, batch_size, seq_len, settings) -> (inputs [batch, seq_len] int32, labels)
Sampler = Callable[[Array, int, int, Any], tuple[Array, Array]]


def fail(field: str, value, why: str):
  """Raise the config error of a task setting: ``config.task.<field>=<value>: <why>``.

  Args:
    field: the setting's name within ``config.task``.
    value: the setting's value.
    why: what is wrong with it.

  Raises:
    ValueError: always.
  """
  fail_config(f"task.{field}", value, why)


def same_length(seq_len: int) -> int:
  """The default ``validation_length``: validate at the training length.

  Args:
    seq_len: the training sequence length.

  Returns:
    ``seq_len``.
  """
  return seq_len


def no_rules(settings) -> None:
  """The default ``check``: accept any settings.

  Args:
    settings: the config's ``task`` section (ignored).
  """
  del settings


@dataclasses.dataclass(frozen=True)
class GroupedEval:
  """Fixed evaluation sets scored per group, shared by every model of a grid (the case task's
  balanced argmin / first / argmax sets): groups too rare in random batches to read off the
  validation accuracy.

  The set at the training length gives the metrics ``f"{prefix}_{group}"``, the set at the
  validation length ``f"val_{prefix}_{group}"``.

  Attributes:
    prefix: the metrics' common name, e.g. "case_acc".
    groups: one name per group, e.g. ("argmin", "first", "argmax").
    sample: ``(key, per_group, seq_len, settings) -> (inputs, labels)`` with ``per_group``
      examples of each group, the groups one after another.
  """
  prefix: str
  groups: tuple[str, ...]
  sample: Callable[[Array, int, int, Any], tuple[Array, Array]]

  def metric_names(self, validation: bool = False) -> tuple[str, ...]:
    """The metrics of the set at the training length (or at the validation length).

    Args:
      validation: name the metrics of the set at the validation length.

    Returns:
      ``f"{prefix}_{group}"`` per group, with a ``val_`` prefix if ``validation``.
    """
    prefix = ("val_" if validation else "") + self.prefix
    return tuple(f"{prefix}_{group}" for group in self.groups)


@dataclasses.dataclass(frozen=True)
class MetricGroup:
  """Metrics a figure shows together (one colour each), with a label for the row."""
  label: str
  metrics: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Task:
  """Everything that makes one synthetic task differ from another.

  Attributes:
    name: the ``config.task.name`` that selects it.
    sample: ``(key, batch_size, seq_len, settings) -> (inputs, labels)``, a pure function of the
      key run inside the compiled step; ``settings`` is the config's ``task`` section.
    outputs: the output heads (``config.task.output``) whose logits match its labels.
    validation_length: training length -> the length of the validation batches.
    positional: whether the model has positional embeddings when ``config.model.positional`` is
      None (the paper's counting tasks have none).
    check: ``settings -> None``, raising ``ValueError`` (``fail``) for settings the task cannot
      run with; called by the config validation before anything compiles.
    grouped_eval: extra evaluation sets scored per group, or None.
    num_classes: ``settings -> classes`` of a class output, or None for one per token type.
    settings: the settings the task owns (``Option``), in the config's ``task`` section
      beside the fields every task shares; its functions find them there, each at its default
      where the config leaves it out.
  """
  name: str
  sample: Sampler
  outputs: tuple[str, ...]
  validation_length: Callable[[int], int] = same_length
  positional: bool = True
  check: Callable[[Any], None] = no_rules
  grouped_eval: Optional[GroupedEval] = None
  num_classes: Optional[Callable[[Any], int]] = None
  settings: tuple[Option, ...] = ()

  def setting_defaults(self) -> dict[str, Any]:
    """Each setting the task owns -> its default."""
    return {setting.name: setting.default for setting in self.settings}

  def metric_groups(self, seq_len: int) -> tuple[MetricGroup, ...]:
    """The figures' hook: the extra metrics (those of ``grouped_eval``), one group per length,
    e.g. the case accuracies at N and at N/2; empty for a task without any.

    Args:
      seq_len: the training sequence length.

    Returns:
      A tuple of ``MetricGroup``: one for the training length, one for the validation length.
    """
    if self.grouped_eval is None:
      return ()
    return tuple(MetricGroup(f"N={length}", self.grouped_eval.metric_names(validation))
                 for validation, length in ((False, seq_len),
                                            (True, self.validation_length(seq_len))))

  def extra_metrics(self) -> tuple[str, ...]:
    """Every metric a grid of this task reports beyond loss, accuracies and divergence.

    Returns:
      The metric names at the training length, then those at the validation length (or ()).
    """
    if self.grouped_eval is None:
      return ()
    return self.grouped_eval.metric_names(False) + self.grouped_eval.metric_names(True)


def _check(task: Task) -> None:
  """A task's labels must match one of the output heads; its settings are ``Option`` objects
  of distinct names, none a shared field's (``SHARED_FIELDS``), each default kept by its rule."""
  if not task.outputs or any(output not in OUTPUTS for output in task.outputs):
    raise ValueError(f"task {task.name!r}: outputs must be a non-empty tuple from {OUTPUTS}, "
                     f"got {task.outputs!r}")
  setting_names = [getattr(setting, "name", None) for setting in task.settings]
  if (not all(isinstance(s, Option) for s in task.settings)
      or len(set(setting_names)) != len(setting_names)):
    raise ValueError(f"task {task.name!r}: settings must be Option objects of distinct names, "
                     f"got {task.settings!r}")
  shared = sorted(set(setting_names) & set(SHARED_FIELDS))
  if shared:
    raise ValueError(f"task {task.name!r}: settings {shared} take the names of fields every "
                     f"task shares {SHARED_FIELDS}, which the config would read instead")
  for setting in task.settings:
    why = setting.refusal(setting.default)
    if why:
      raise ValueError(f"task {task.name!r}: setting {setting.name}'s default "
                       f"{setting.default!r} breaks its own rule: {why}")


def check_settings(task: Task, section) -> None:
  """Refuse a value of a setting the task owns that its rule does not accept.

  Args:
    task: the task.
    section: the config's ``task`` section (a setting left out takes its default, unchecked).

  Raises:
    ValueError: ``config.task.<setting>=<value>: <why>``.
  """
  for setting in task.settings:
    if setting.name in section:
      why = setting.refusal(section[setting.name])
      if why:
        fail(setting.name, section[setting.name], why)


def resolved_settings(task: Task, section):
  """The ``task`` section the task's functions read: a copy of ``section`` with each setting the
  task owns at its default where ``section`` leaves it out.

  Args:
    task: the task.
    section: the config's ``task`` section (an ``ml_collections.ConfigDict``).

  Returns:
    ``section`` itself when it lacks none, else the completed copy.
  """
  missing = {name: value for name, value in task.setting_defaults().items()
             if name not in section}
  if not missing:
    return section
  resolved = section.copy_and_resolve_references()
  with resolved.unlocked():
    resolved.update(missing)
  return resolved


CHECKED_EXAMPLES = 1024  # drawn per length by check_batches


def label_shape(output: str, batch: int, seq_len: int) -> tuple:
  """The shape of a batch's labels for an output head (``OUTPUTS``): one per example, or one per
  token for "token_classes"."""
  return (batch, seq_len) if output == "token_classes" else (batch,)


def check_batches(task: Task, settings, output: str, classes: int, lengths) -> None:
  """Refuse a task whose batches the model cannot take: inside the compiled step a token past
  the embeddings or a label past the output's logits gives NaN or a clipped lookup, and float
  or misshapen labels train too, so that every learning rate would count as diverged instead of
  the run failing. ``CHECKED_EXAMPLES`` examples per length, drawn eagerly before anything
  compiles: their tokens' and labels' dtype and shape (``label_shape``), and every value's
  range. A sample, not a proof: a label out of range in one example of 100 is missed with
  odds of 3e-5, one of 10^4 with odds of 0.9.

  Args:
    task: the task.
    settings: the config's ``task`` section.
    output: the output head (``config.task.output``).
    classes: the logits of a class output (``num_classes``, or the vocabulary).
    lengths: the sequence lengths the run samples at (training and validation).

  Raises:
    ValueError: naming the task, the field (tokens or labels), the value or the dtype and shape,
      and what the output takes.
  """
  vocab, batch = int(settings.vocab_size), CHECKED_EXAMPLES
  for n in dict.fromkeys(int(length) for length in lengths):
    try:
      inputs, labels = task.sample(jax.random.key(0), batch, n, settings)
    except (ArithmeticError, TypeError, ValueError) as err:  # a setting the sampler cannot take
      own = {s.name: settings[s.name] for s in task.settings if s.name in settings}
      raise ValueError(f"task {task.name!r}: its sampler fails on a batch at N = {n} with the "
                       f"settings {own}: {type(err).__name__}: {err}") from err
    inputs, labels = np.asarray(inputs), np.asarray(labels)
    if inputs.shape != (batch, n) or inputs.dtype.kind not in "iu":
      raise ValueError(f"task {task.name!r}: a batch of {batch} at N = {n} must have integer "
                       f"tokens of shape ({batch}, {n}), got {inputs.dtype} {inputs.shape}")
    want = label_shape(output, batch, n)
    if labels.shape != want or labels.dtype.kind not in "iu":
      raise ValueError(f"task {task.name!r}: the {output!r} output takes integer labels of "
                       f"shape {want} for a batch of {batch} at N = {n}, got {labels.dtype} "
                       f"{labels.shape}")
    limit, what = ((n, f"the N = {n} positions") if output in ("tokens", "first") else
                    (classes, f"the {classes} classes"))
    for field, values, top, of in (("tokens", inputs, vocab, f"config.task.vocab_size={vocab}"),
                                   ("labels", labels, limit, what)):
      bad = (values < 0) | (values >= top)
      if bad.any():
        examples = int(bad.reshape(batch, -1).any(-1).sum())
        raise ValueError(f"task {task.name!r}: a batch at N = {n} holds {field} "
                         f"{values[bad][0].item()!r}, outside [0, {top}) ({of}), in {examples} "
                         f"of its {batch} examples")


# register(task, *, replace=False) also raises ValueError for outputs that are empty or not in
# OUTPUTS; get(name) names the registered tasks when ``name`` is none of them.
REGISTRY: Registry[Task] = Registry("task", Task, _check)
register = REGISTRY.register
unregister = REGISTRY.unregister
get = REGISTRY.get
names = REGISTRY.names
TASKS = REGISTRY.view  #: the live, tuple-like view of the names


def __getattr__(name: str):
  """The previous release's names of this module (``normattn_jax._moved``)."""
  return _moved.moved_attribute(__name__, name)
