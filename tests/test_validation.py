"""The one integer check behind every "must be a positive integer" error."""
import re

import numpy as np
import pytest

from normattn_jax import validation
from normattn_jax.validation import (RULES, check_config_float, check_fields, check_int,
                                     float_problem, int_problem)


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


def test_check_fields_names_the_field_and_value_by_its_rule():
  config = {"num_seeds": 2, "learning_rates": (0.1, float("inf")),
            "train": {"clip_norm": 0.0, "warmup_steps": 0}}
  check_fields(config, ("num_seeds", "train.warmup_steps"))
  with pytest.raises(ValueError, match=re.escape("config.learning_rates[1]=inf: must be a "
                                                 "finite number > 0")):
    check_fields(config, ("learning_rates",))
  with pytest.raises(ValueError, match=re.escape("config.train.clip_norm=0.0: must be > 0")):
    check_fields(config, ("train.clip_norm",))
  with pytest.raises(KeyError, match="'train.l3' has no rule"):
    check_fields(config, ("train.l3",))


def _validators():
  """Each kind of run's default config and validator."""
  from normattn_jax.configs import unselectable_lm
  from normattn_jax.analysis import causal_lm_keys, majority
  from normattn_jax.finetune import train as finetune
  from normattn_jax.card import train as report_card
  from normattn_jax.sweep import config as sweep
  from normattn_jax.pretrain import train as pretrain
  return {"sweep": (sweep.base_config(), sweep.validate),
          "finetuning": (finetune.base_finetune_config(),
                         lambda c: finetune.validate_finetune_config(c, check_paths=False)),
          "pretraining": (pretrain.base_pretrain_config(), pretrain.validate_pretrain_config),
          "causal_lm_keys": (unselectable_lm.get_config(), causal_lm_keys.validate_config),
          "majority": (majority.base_config(), majority.validate_config),
          "report_card": (report_card.base_card_config(), report_card.validate_config)}


def _set(config, field, value):
  section, _, key = field.rpartition(".")
  (config[section] if section else config)[key] = value


@pytest.mark.parametrize("field, value", [
    ("train.checkpoint_every", -1), ("train.num_steps", 0), ("train.batch_size", -4),
    ("train.clip_norm", float("nan")), ("train.weight_decay", -0.1),
    ("train.learning_rate", float("inf")), ("data.validation_fraction", 1.0),
    ("num_seeds", 0), ("seed", -1), ("learning_rates", (0.1, -0.1)),
])
def test_a_shared_field_is_refused_alike_by_every_run_that_has_it(field, value):
  """One rule per field (``validation.RULES``): the same message from every validator."""
  expected = RULES[field]
  messages = {}
  for kind, (config, validate) in _validators().items():
    try:
      original = validation._value(config, field)
    except (KeyError, AttributeError):
      continue  # this kind of run has no such field
    expected.check(field, original)  # the default keeps the rule
    _set(config, field, value)
    with pytest.raises(ValueError) as err:
      validate(config)
    messages[kind] = str(err.value)
  assert len(messages) >= 2, messages  # a field of several kinds of run
  with pytest.raises(ValueError) as err:
    expected.check(field, value)
  assert set(messages.values()) == {str(err.value)}, messages


def test_the_majority_settings_refuse_an_infinite_rate_and_a_negative_seed():
  from normattn_jax.analysis import majority
  config = majority.base_config()
  config.learning_rate = float("inf")
  with pytest.raises(ValueError, match=re.escape("config.learning_rate=inf: must be a finite "
                                                 "number > 0")):
    majority.validate_config(config)


def _flag_fields(tree, prefix=""):
  """The dotted fields of a config whose default is True or False."""
  for name, value in tree.items():
    if hasattr(value, "items"):
      yield from _flag_fields(value, f"{prefix}{name}.")
    elif isinstance(value, bool):
      yield f"{prefix}{name}"


def test_a_true_or_false_field_refuses_none_in_every_kind_of_run():
  """``--config.train.shard_parameters=None`` read as False; every such field is refused."""
  checked = []
  for kind, (config, validate) in _validators().items():
    for field in _flag_fields(config):
      original = validation._value(config, field)
      _set(config, field, None)
      with pytest.raises(ValueError, match=re.escape(f"config.{field}=None: must be True or "
                                                     f"False")):
        validate(config)
      _set(config, field, original)
      checked.append(field)
  assert {"train.shard_parameters", "show_progress"} <= set(checked)
