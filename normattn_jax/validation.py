"""The one integer check behind every "must be a positive integer" error of the project: numpy
integers count, ``bool`` does not (``True`` would otherwise pass as 1). And the one float check
of every config field: NaN fails every comparison and infinity passes ``> 0``, so a bound alone
would let both through to training and into ``config.json``.

One vocabulary for what a value must be: a ``Rule`` (``integer``, ``number``, ``number_list``) is
a function of a value that says why it is refused; ``RULES`` holds, as data, the rule of each
config field that more than one kind of run has (a sweep, fine-tuning, pre-training, the
causal-LM and majority analyses), which every validator checks with ``check_fields``, so that a
field means the same wherever it appears; and an ``Option`` (a name, a default and such a rule)
is a setting that a registered object owns, a normalisation's option as a task's setting.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Callable, Optional

import numpy as np


def int_problem(value, low: int = 1) -> Optional[str]:
  """Why ``value`` is not an integer >= ``low``, or None when it is.

  Args:
    value: the value to check.
    low: the smallest value allowed.

  Returns:
    "must be a positive integer" (``low`` = 1) or "must be an integer >= low", or None.
  """
  if isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= low:
    return None
  return "must be a positive integer" if low == 1 else f"must be an integer >= {low}"


def check_int(name: str, value, low: int = 1) -> None:
  """Raise ``ValueError("<name> must be ..., got <value>")`` unless ``value`` is an integer
  >= ``low``.

  Args:
    name: the argument or field, as the error names it.
    value: the value to check.
    low: the smallest value allowed.
  """
  problem = int_problem(value, low)
  if problem:
    raise ValueError(f"{name} {problem}, got {value!r}")


def fail_config(field: str, value, why: str):
  """Raise the one form of a config error: ``config.<field>=<value>: <why>``.

  Args:
    field: the dotted field within the config, e.g. "train.batch_size".
    value: its value.
    why: what is wrong with it.

  Raises:
    ValueError: always.
  """
  raise ValueError(f"config.{field}={value!r}: {why}")


def check_config_int(field: str, value, low: int = 1) -> None:
  """``fail_config`` unless ``value`` is an integer >= ``low``.

  Args:
    field: the dotted field within the config.
    value: its value.
    low: the smallest value allowed.
  """
  problem = int_problem(value, low)
  if problem:
    fail_config(field, value, problem)


def _bounds(low, high, open_low: bool, open_high: bool) -> tuple[str, str]:
  """The bounds as a verb phrase ("lie in [0, 1)", "be > 0") and as a qualifier ("in [0, 1)",
  "> 0"); empty strings without bounds."""
  if low is not None and high is not None:
    span = f"{'(' if open_low else '['}{low:g}, {high:g}{')' if open_high else ']'}"
    return f"lie in {span}", f"in {span}"
  if low is not None:
    return f"be {'>' if open_low else '>='} {low:g}", f"{'>' if open_low else '>='} {low:g}"
  if high is not None:
    return f"be {'<' if open_high else '<='} {high:g}", f"{'<' if open_high else '<='} {high:g}"
  return "", ""


def float_problem(value, low: Optional[float] = None, high: Optional[float] = None, *,
                  open_low: bool = False, open_high: bool = False) -> Optional[str]:
  """Why ``value`` is not a finite real number within the bounds, or None when it is.

  Args:
    value: the value to check; ints and numpy floats count, ``bool`` does not.
    low: the lower bound, or None.
    high: the upper bound, or None.
    open_low: exclude ``low`` itself.
    open_high: exclude ``high`` itself.

  Returns:
    "must be a finite number[ <bounds>]" for NaN, infinities and non-numbers; "must lie in
    [low, high)", "must be > low" (...) for a finite number out of bounds; or None.
  """
  verb, qualifier = _bounds(low, high, open_low, open_high)
  if not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(value):
    return "must be a finite number" + (f" {qualifier}" if qualifier else "")
  below = low is not None and (value <= low if open_low else value < low)
  above = high is not None and (value >= high if open_high else value > high)
  return f"must {verb}" if below or above else None


def check_config_float(field: str, value, low: Optional[float] = None,
                       high: Optional[float] = None, *, open_low: bool = False,
                       open_high: bool = False) -> None:
  """``fail_config`` unless ``value`` is a finite number within the bounds (``float_problem``).

  Args:
    field: the dotted field within the config, e.g. "train.l2".
    value: its value.
    low: the lower bound, or None.
    high: the upper bound, or None.
    open_low: exclude ``low`` itself.
    open_high: exclude ``high`` itself.
  """
  problem = float_problem(value, low, high, open_low=open_low, open_high=open_high)
  if problem:
    fail_config(field, value, problem)


def check_config_floats(field: str, values, low: Optional[float] = None,
                        high: Optional[float] = None, *, open_low: bool = False,
                        open_high: bool = False) -> None:
  """``check_config_float`` on each of a non-empty sequence, naming each as ``field[i]``.

  Args:
    field: the dotted field of the sequence, e.g. "learning_rates".
    values: its values.
    low, high, open_low, open_high: the bounds of every value.
  """
  values = tuple(values)
  if not values:
    fail_config(field, values, "needs at least one value")
  for i, value in enumerate(values):
    check_config_float(f"{field}[{i}]", value, low, high, open_low=open_low,
                       open_high=open_high)


def check_float(name: str, value, low: Optional[float] = None, high: Optional[float] = None, *,
                open_low: bool = False, open_high: bool = False) -> None:
  """Raise ``ValueError("<name> must be ..., got <value>")`` unless ``value`` is a finite number
  within the bounds (``float_problem``): ``check_int``'s counterpart for an argument.

  Args:
    name: the argument or field, as the error names it.
    value: the value to check.
    low, high, open_low, open_high: the bounds, as ``float_problem`` takes them.
  """
  problem = float_problem(value, low, high, open_low=open_low, open_high=open_high)
  if problem:
    raise ValueError(f"{name} {problem}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class Rule:
  """What one config field must hold: an integer >= ``low`` (kind "integer"), a finite number
  within the bounds ("number") or a non-empty sequence of such numbers ("numbers").

  Attributes:
    kind: "integer", "number" or "numbers".
    low, high, open_low, open_high: the bounds (``int_problem``, ``float_problem``); an
      integer's ``low`` only.
  """
  kind: str
  low: Optional[float] = None
  high: Optional[float] = None
  open_low: bool = False
  open_high: bool = False

  def __post_init__(self):
    if self.kind not in ("integer", "number", "numbers"):
      raise ValueError(f"kind={self.kind!r}: choose from ('integer', 'number', 'numbers')")

  def __call__(self, value) -> Optional[str]:
    """Why ``value`` breaks the rule ("must be ..."), or None: a rule is an ``Option``'s
    ``problem`` as it is a config field's."""
    if self.kind == "integer":
      return int_problem(value, int(self.low))
    bounds = dict(low=self.low, high=self.high, open_low=self.open_low, open_high=self.open_high)
    if self.kind == "number":
      return float_problem(value, **bounds)
    values = tuple(value) if isinstance(value, (list, tuple)) else None
    if not values:
      return "must be a non-empty sequence of numbers"
    return next((f"[{i}] {problem}" for i, problem in
                 ((i, float_problem(v, **bounds)) for i, v in enumerate(values)) if problem), None)

  def check(self, field: str, value) -> None:
    """``fail_config`` naming ``field`` and ``value`` unless ``value`` keeps the rule."""
    if self.kind == "integer":
      check_config_int(field, value, int(self.low))
    elif self.kind == "number":
      check_config_float(field, value, self.low, self.high, open_low=self.open_low,
                         open_high=self.open_high)
    else:
      check_config_floats(field, value, self.low, self.high, open_low=self.open_low,
                          open_high=self.open_high)


def integer(low: int = 1) -> Rule:
  """An integer >= ``low``."""
  return Rule("integer", low)


def number(low: Optional[float] = None, high: Optional[float] = None, *, open_low: bool = False,
           open_high: bool = False) -> Rule:
  """A finite number within the bounds."""
  return Rule("number", low, high, open_low, open_high)


def number_list(low: Optional[float] = None, *, open_low: bool = False) -> Rule:
  """A non-empty sequence of finite numbers, each >= (or >) ``low``."""
  return Rule("numbers", low, open_low=open_low)


def any_value(value) -> Optional[str]:
  """The rule of an option that takes any value: never a problem."""
  del value
  return None


def _is_number(value) -> bool:
  """A real number that is not a bool (numpy's scalars included)."""
  return isinstance(value, numbers.Real) and not isinstance(value, bool)


def kind_problem(default, value) -> Optional[str]:
  """Why ``value`` is not of its option's kind, which the default sets: a number (int or float
  alike), True or False, or a string; None for any other default (None, a tuple, ...) or a
  value of its kind.

  Args:
    default: the option's default.
    value: the value given.

  Returns:
    "must be a number", "must be True or False" or "must be a string"; or None.
  """
  if isinstance(default, bool):
    return None if isinstance(value, (bool, np.bool_)) else "must be True or False"
  if _is_number(default):
    return None if _is_number(value) else "must be a number"
  if isinstance(default, str):
    return None if isinstance(value, str) else "must be a string"
  return None


@dataclasses.dataclass(frozen=True)
class Option:
  """A named setting that a registered object owns, with its default and its rule: a
  normalisation's option (``attention.registry.Normalization.options``) and a task's setting
  (``tasks.Task.settings``) alike. A value must be of the default's kind (``kind_problem``) and
  pass ``problem``; both are checked before anything compiles.

  Attributes:
    name: the keyword its functions take it by, and its field in a config section.
    default: the value where it is left out; it must pass its own rule.
    problem: ``problem(value)``: why ``value`` is refused ("must be ..."), or None when it is
      accepted: a ``Rule`` (``integer(1)``, ``number(0, 1)``, ...) or any such function.
    init_only: a normalisation's option that only its per-head parameters' initialisers read
      (HNAS's ``hybrid_init``): its weight and fast functions are not passed it.
  """
  name: str
  default: Any
  problem: Callable[[Any], Optional[str]] = any_value
  init_only: bool = False

  def refusal(self, value) -> Optional[str]:
    """Why ``value`` is refused: of another kind than the default (``kind_problem``), or by
    the rule; None when it is accepted.

    Args:
      value: the value given for this option.

    Returns:
      "must be ..." or None.
    """
    return kind_problem(self.default, value) or self.problem(value)


# The config fields of more than one kind of run, each with its one rule.
RULES = {
    "num_seeds": integer(1),
    "seed": integer(0),
    "learning_rates": number_list(0, open_low=True),
    "train.batch_size": integer(1),
    "train.num_steps": integer(1),
    "train.eval_every": integer(1),
    "train.log_every": integer(1),
    "train.warmup_steps": integer(0),
    "train.checkpoint_every": integer(0),
    "train.models_per_vmap": integer(0),
    "train.learning_rate": number(0, open_low=True),
    "train.clip_norm": number(0, open_low=True),
    "train.weight_decay": number(0),
    "data.validation_fraction": number(0, 1, open_low=True, open_high=True),
}


def _value(config, field: str) -> Any:
  """The value of the dotted ``field`` of a config (a ConfigDict or nested dicts)."""
  node = config
  for part in field.split("."):
    node = node[part]
  return node


def check_fields(config, fields) -> None:
  """Check each of ``fields`` of ``config`` by its rule in ``RULES``, in order.

  Args:
    config: a config holding every one of ``fields``.
    fields: dotted names, each a key of ``RULES``.

  Raises:
    ValueError: ``config.<field>=<value>: <why>`` for the first field that breaks its rule.
    KeyError: for a field ``RULES`` has no rule for (a mistake in the caller, not the config).
  """
  for field in fields:
    if field not in RULES:
      raise KeyError(f"{field!r} has no rule in normattn_jax.validation.RULES")
    RULES[field].check(field, _value(config, field))


def check_known_fields(config, reference,
                       *, free: tuple = ()) -> None:
  """Refuse fields that ``reference`` (the kind's base config) does not have, except under the
  sections ``free`` (dotted paths, e.g. "attention.options"), whose keys are the user's.

  Args:
    config: the config to check.
    reference: the run kind's base config.
    free: dotted paths of sections that take any key.

  Raises:
    ValueError: ``config.<field>=<value>: no such field`` for the first unknown field.
  """
  known = flat_fields(reference.to_dict())
  for field, value in sorted(flat_fields(config.to_dict()).items()):
    if field not in known and not any(field.startswith(f"{f}.") for f in free):
      fail_config(field, value, "no such field (misspelt?)")


def flat_fields(tree: dict, prefix: str = "") -> dict:
  """Dotted field -> value of a nested dict (an empty dict is a field of its own).

  Args:
    tree: e.g. a config's ``to_dict()`` or a stored ``config.json``.
    prefix: put before every field.

  Returns:
    ``{"model.d_model": 128, ...}``.
  """
  flat = {}
  for key, value in tree.items():
    if isinstance(value, dict) and value:
      flat.update(flat_fields(value, f"{prefix}{key}."))
    else:
      flat[prefix + key] = value
  return flat


def dotted_holder(tree: dict, field: str) -> tuple[Optional[dict], str]:
  """The dict of a nested ``tree`` that holds a dotted ``field`` (None if there is none) and the
  field's key in it: ``dotted_holder(tree, "model.attention") -> (tree["model"], "attention")``."""
  *sections, key = field.split(".")
  for section in sections:
    tree = tree.get(section) if isinstance(tree, dict) else None
  return (tree if isinstance(tree, dict) else None), key


def check_bool_fields(config, base, prefix: str = "") -> None:
  """Refuse a value that is not True or False in each field whose default in ``base`` is one
  (``--config.train.shard_parameters=None`` would otherwise read as False).

  Args:
    config: the config (a ConfigDict or nested dicts), holding ``base``'s fields.
    base: the kind's config at its defaults.
    prefix: the dotted path of ``base`` within the whole config.

  Raises:
    ValueError: ``config.<field>=<value>: must be True or False`` for the first such field.
  """
  for name, default in base.items():
    field = f"{prefix}{name}"
    if hasattr(default, "items") and hasattr(config.get(name), "items"):
      check_bool_fields(config[name], default, f"{field}.")
    elif isinstance(default, bool) and name in config and not isinstance(config[name], bool):
      fail_config(field, config[name], "must be True or False")
