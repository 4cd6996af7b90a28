"""The one integer check behind every "must be a positive integer" error of the project: numpy
integers count, ``bool`` does not (``True`` would otherwise pass as 1). And the one float check
of every config field: NaN fails every comparison and infinity passes ``> 0``, so a bound alone
would let both through to training and into ``config.json``."""
from __future__ import annotations

import math
import numbers
from typing import Optional


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
