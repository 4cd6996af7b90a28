"""The one integer check behind every "must be a positive integer" error of the project: numpy
integers count, ``bool`` does not (``True`` would otherwise pass as 1)."""
from __future__ import annotations

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
