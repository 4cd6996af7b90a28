"""The one integer check behind every "must be a positive integer" error."""
import re

import numpy as np
import pytest

from normattn_jax.validation import check_int, int_problem


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
