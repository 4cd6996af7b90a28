"""The one integer check behind every "must be a positive integer" error."""
import re

import numpy as np
import pytest

from normattn_jax.validation import check_config_float, check_int, float_problem, int_problem


@pytest.mark.parametrize("value", [1, 7, np.int64(3), np.int32(1)])
def test_integers_at_least_low_pass(value):
  assert int_problem(value) is None
  check_int("num_heads", value)


@pytest.mark.parametrize("value", [0, -2, True, 2.0, "3", None, np.float32(4)])
def test_anything_else_is_refused_naming_the_field_and_value(value):
  message = f"num_heads must be a positive integer, got {value!r}"
  with pytest.raises(ValueError, match=re.escape(message)):
    check_int("num_heads", value)


def test_other_lower_bounds():
  assert int_problem(0, low=0) is None
  assert int_problem(-1, low=0) == "must be an integer >= 0"
  with pytest.raises(ValueError, match="max_length must be an integer >= 2, got 1"):
    check_int("max_length", 1, low=2)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), 1e999,
                                   np.float32("nan"), True, "0.1", None])
def test_a_config_float_must_be_a_finite_number(value):
  assert float_problem(value) == "must be a finite number"
  with pytest.raises(ValueError, match=re.escape(f"config.train.l2={value!r}: must be a finite "
                                                 "number >= 0")):
    check_config_float("train.l2", value, low=0)


@pytest.mark.parametrize("value, kwargs, problem", [
    (0.5, dict(low=0, high=1), None), (0, dict(low=0), None), (3, {}, None),
    (np.float64(0.1), dict(low=0, open_low=True), None),
    (-0.1, dict(low=0), "must be >= 0"), (0.0, dict(low=0, open_low=True), "must be > 0"),
    (1.0, dict(low=0, high=1, open_high=True), "must lie in [0, 1)"),
    (1.5, dict(low=0, high=1), "must lie in [0, 1]"),
    (0.0, dict(low=0, high=1, open_low=True, open_high=True), "must lie in (0, 1)"),
    (float("nan"), dict(low=0, high=1, open_high=True), "must be a finite number in [0, 1)"),
])
def test_a_config_float_within_its_bounds(value, kwargs, problem):
  assert float_problem(value, **kwargs) == problem
