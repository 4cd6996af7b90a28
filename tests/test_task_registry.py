"""A task is one registered object: the built-ins are looked up, and one defined here (copy the
first token, with extra evaluation sets split by the first token's parity) trains through the
public API, ``run_sweep`` and ``train_grid`` alike."""
import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl import flags

from normattn_jax import tasks
from normattn_jax.registry import load_plugins
from normattn_jax.cli import command as cli
from normattn_jax.sweep import train_grid, validate
from normattn_jax.sweep.programs import Setup
from normattn_jax.train.optim import learning_rate_of
from normattn_jax.sweep.train import run_sweep
from helpers.sweeps import case_sweep_config, tiny_sweep_config

COPY_STEPS = 80


def copy_first(key, batch_size, seq_len, settings):
  """Uniform tokens; the label is the first one."""
  inputs = jax.random.randint(key, (batch_size, seq_len), 0, settings.vocab_size, jnp.int32)
  return inputs, inputs[:, 0]


def first_token_parity_sets(key, per_group, seq_len, settings):
  """``per_group`` sequences whose first token is even, then as many whose first is odd."""
  inputs, _ = copy_first(key, 2 * per_group, seq_len, settings)
  parity = jnp.repeat(jnp.arange(2), per_group)
  first = inputs[:, 0] - inputs[:, 0] % 2 + parity
  first = jnp.where(first < settings.vocab_size, first, parity)
  inputs = inputs.at[:, 0].set(first)
  return inputs, inputs[:, 0]


def check_copy_settings(settings):
  if settings.vocab_size < 2:
    tasks.registry.fail("vocab_size", settings.vocab_size, "must be >= 2 (two parities)")


COPY_FIRST = tasks.register(tasks.Task(
    "copy_first", copy_first, outputs=("classes",), validation_length=lambda n: 2 * n,
    positional=False, check=check_copy_settings,
    grouped_eval=tasks.GroupedEval("first_acc", ("even", "odd"), first_token_parity_sets)))


def copy_config(**overrides):
  settings = {"archs": ("mte",), "task.name": "copy_first", "task.output": "classes",
              "task.vocab_size": 8, "learning_rates": (0.1,), "num_seeds": 2,
              "train.num_steps": COPY_STEPS, "train.eval_every": COPY_STEPS // 2,
              "train.batch_size": 16, "train.checkpoint_every": 0,
              "eval.validation_case_sets": True}  # its grouped sets at 2N too
  return tiny_sweep_config(**dict(settings, **overrides))


def test_the_builtins_are_registered():
  assert tasks.names()[:3] == ("case_distinction", "mode_finding", "majority")
  assert tasks.BUILTIN_TASKS == ("case_distinction", "mode_finding", "majority")
  assert "copy_first" in tasks.TASKS
  case, mode, majority = (tasks.get(n) for n in tasks.BUILTIN_TASKS)
  assert [t.validation_length(128) for t in (case, mode, majority)] == [64, 256, 128]
  assert [t.positional for t in (case, mode, majority)] == [True, False, False]
  assert case.outputs == ("tokens", "first") and mode.outputs == ("classes",)
  assert case.extra_metrics() == ("case_acc_argmin", "case_acc_first", "case_acc_argmax",
                                  "val_case_acc_argmin", "val_case_acc_first",
                                  "val_case_acc_argmax")
  assert mode.extra_metrics() == () and mode.metric_groups(16) == ()


def test_metric_groups_name_the_figures_rows():
  rows = tasks.get("case_distinction").metric_groups(128)
  assert [(row.label, row.metrics[0]) for row in rows] == [("N=128", "case_acc_argmin"),
                                                          ("N=64", "val_case_acc_argmin")]
  assert [row.label for row in COPY_FIRST.metric_groups(8)] == ["N=8", "N=16"]


def test_unknown_names_fail_with_the_registered_ones():
  with pytest.raises(ValueError, match="task must be one of .*'copy_first'.*got 'sorting'"):
    tasks.get("sorting")
  with pytest.raises(ValueError, match=r"config.task.name='sorting': choose from .*copy_first"):
    validate(tiny_sweep_config(**{"task.name": "sorting"}))


def test_registration_is_checked():
  with pytest.raises(ValueError, match="already registered"):
    tasks.register(tasks.Task("mode_finding", copy_first, outputs=("classes",)))
  assert tasks.register(COPY_FIRST) is COPY_FIRST
  with pytest.raises(ValueError, match="outputs"):
    tasks.register(tasks.Task("no_head", copy_first, outputs=("logits",)))
  with pytest.raises(TypeError):
    tasks.register(copy_first)
  assert "no_head" not in tasks.TASKS
  temporary = tasks.register(tasks.Task("temporary", copy_first, outputs=("classes",)))
  assert tasks.register(tasks.Task("temporary", copy_first, outputs=("classes",)),
                        replace=True) is not temporary
  tasks.unregister("temporary")
  assert "temporary" not in tasks.TASKS


def test_config_validation_asks_the_task():
  with pytest.raises(ValueError, match=r"config.task.output='tokens': the copy_first task needs "
                                       r"one of \('classes',\)"):
    validate(copy_config(**{"task.output": "tokens"}))
  with pytest.raises(ValueError, match="config.task.vocab_size=1: must be >= 2"):
    validate(copy_config(**{"task.vocab_size": 1}))
  with pytest.raises(ValueError, match="config.task.vocab_size=60: must exceed 64"):
    validate(case_sweep_config(**{"task.vocab_size": 60}))
  c = copy_config()  # a swept value passes the task's rules too
  c.sweep.name, c.sweep.grid = "task.vocab_size", (8, 1)
  with pytest.raises(ValueError, match=r"sweep.grid\[1\]=1 .*config.task.vocab_size=1"):
    validate(c)


@pytest.mark.parametrize("sample, said", [
    (lambda key, b, n, s: (jnp.full((b, n), s.vocab_size, jnp.int32), jnp.zeros(b, jnp.int32)),
     r"holds tokens 8, outside \[0, 8\) \(config.task.vocab_size=8\)"),
    (lambda key, b, n, s: (jnp.zeros((b, n), jnp.int32), jnp.full(b, 9, jnp.int32)),
     r"holds labels 9, outside \[0, 8\) \(the 8 classes\)"),
    (lambda key, b, n, s: (jnp.zeros((b, n), jnp.int32), jnp.full(b, -1, jnp.int32)),
     r"holds labels -1, outside"),
    (lambda key, b, n, s: (jnp.zeros((b, n), jnp.float32), jnp.zeros(b, jnp.int32)),
     "must have integer tokens"),
])
def test_a_task_whose_batches_the_model_cannot_take_is_refused_before_training(sample, said):
  """Out-of-range tokens or labels would train to the end as "every learning rate diverged":
  one batch per length is drawn and checked by the config's validation, naming the task."""
  task = tasks.register(tasks.Task("broken", sample, outputs=("classes",)))
  try:
    with pytest.raises(ValueError, match=r"task 'broken': .*" + said):
      validate(copy_config(**{"task.name": "broken"}))
  finally:
    tasks.unregister(task.name)


def test_a_position_label_past_the_sequence_is_refused():
  sample = lambda key, b, n, s: (jnp.zeros((b, n), jnp.int32), jnp.full(b, n, jnp.int32))
  task = tasks.register(tasks.Task("broken", sample, outputs=("first",)))
  try:
    with pytest.raises(ValueError, match=r"holds labels 16, outside \[0, 16\) \(the N = 16 "
                                         r"positions\)"):
      validate(copy_config(**{"task.name": "broken", "task.output": "first",
                              "task.seq_len": 16}))
  finally:
    tasks.unregister(task.name)


@pytest.mark.parametrize("task,output,positional,expected", [
    ("case_distinction", "tokens", None, True),
    ("case_distinction", "tokens", False, False),
    ("mode_finding", "classes", None, False),
    ("mode_finding", "classes", True, True),  # an explicit choice is kept
    ("copy_first", "classes", None, False),
])
def test_the_task_decides_positional_embeddings_unless_the_config_does(task, output, positional,
                                                                       expected):
  c = tiny_sweep_config(**{"task.name": task, "task.output": output, "task.vocab_size": 70,
                     "model.positional": positional})
  setup = Setup("mte", c)
  params = jax.eval_shape(setup.model().init, jax.random.key(0),
                          jnp.zeros((1, 8), jnp.int32))["params"]
  assert setup.positional is expected
  assert ("position_embedding" in params) is expected


def test_a_task_may_set_its_number_of_classes():
  parity = tasks.register(tasks.Task(
      "count_parity", lambda key, b, n, s: (jnp.zeros((b, n), jnp.int32), jnp.zeros(b, jnp.int32)),
      outputs=("classes",), num_classes=lambda settings: 2))
  try:
    c = tiny_sweep_config(**{"task.name": parity.name, "task.output": "classes",
                             "task.vocab_size": 9})
    params = jax.eval_shape(Setup("nap", c).model().init, jax.random.key(0),
                            jnp.zeros((1, 8), jnp.int32))
    assert params["params"]["head"]["kernel"].shape == (8, 2)
  finally:
    tasks.unregister(parity.name)


def test_first_token_parity_sets_are_balanced_and_labelled():
  settings = copy_config().task
  inputs, labels = jax.jit(lambda key: first_token_parity_sets(key, 50, 8, settings))(
      jax.random.key(1))
  inputs, labels = np.asarray(inputs), np.asarray(labels)
  np.testing.assert_array_equal(labels % 2, np.repeat([0, 1], 50))
  np.testing.assert_array_equal(labels, inputs[:, 0])
  assert inputs.min() >= 0 and inputs.max() < 8


@pytest.fixture(scope="module")
def copy_sweep(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("copy_first")
  summary = run_sweep(copy_config(), str(workdir), show_progress=False, tensorboard=False)
  return workdir, summary


def test_a_registered_task_trains_through_run_sweep(copy_sweep):
  workdir, summary = copy_sweep
  cell, = summary["cells"]
  assert cell["arch"] == "mte" and cell["diverged"] == 0
  assert set(cell["metrics"]) >= {"train_acc", "val_acc", "first_acc_even", "first_acc_odd",
                                  "val_first_acc_even", "val_first_acc_odd"}
  assert cell["metrics"]["val_acc"]["mean"] > 0.6  # chance is 1/8
  assert cell["metrics"]["val_first_acc_odd"]["mean"] > 0.6
  assert os.path.exists(workdir / "metrics.npz")


def test_train_grid_gives_the_sweeps_numbers(copy_sweep):
  """The public one-grid function and the sweep train the same models to the same numbers."""
  workdir, _ = copy_sweep
  c = copy_config()
  run = train_grid(c, "mte")
  saved = np.load(workdir / "metrics.npz")
  for name, curve in run.metrics.items():
    assert curve.shape == (COPY_STEPS // c.train.eval_every, 2)  # evaluations x models
    np.testing.assert_array_equal(curve, saved[f"mte/{name}"].reshape(curve.shape), err_msg=name)
  assert np.asarray(run.state.step).tolist() == [COPY_STEPS, COPY_STEPS]
  np.testing.assert_allclose(jax.vmap(learning_rate_of)(run.state.opt_state), [0.1, 0.1])


def test_train_grid_checks_its_models_axis():
  c = copy_config()
  keys = np.zeros((2, 2), np.uint32)
  with pytest.raises(ValueError, match="both"):
    train_grid(c, "mte", keys=keys)
  with pytest.raises(ValueError, match=r"lack \['l2', 'dropout'\]"):
    train_grid(c, "mte", hyperparameters={"learning_rate": np.ones(2)}, keys=keys)
  with pytest.raises(ValueError, match=r"hyperparameters\['l2'\] has shape \(3,\)"):
    train_grid(c, "mte", hyperparameters={"learning_rate": np.ones(2), "l2": np.zeros(3),
                                          "dropout": np.zeros(2)}, keys=keys)
  with pytest.raises(ValueError, match=r"hyperparameters\['dropout'\] holds non-zero rates"):
    train_grid(c, "mte", hyperparameters={"learning_rate": np.ones(2), "l2": np.zeros(2),
                                          "dropout": np.full(2, 0.1)}, keys=keys)
  with pytest.raises(ValueError, match="config.train.eval_every"):
    train_grid(copy_config(**{"train.eval_every": 7}), "mte")


# A plugin file of the user's: a task with a setting of its own, registered with no library edit.
OFFSET_PLUGIN = '''
import jax
import jax.numpy as jnp
from normattn_jax import tasks
from normattn_jax.validation import integer


def first_plus_offset(key, batch_size, seq_len, settings):
  """Uniform tokens; the label is the first one shifted by the task's own setting."""
  inputs = jax.random.randint(key, (batch_size, seq_len), 0, settings.vocab_size, jnp.int32)
  return inputs, (inputs[:, 0] + settings.offset) % settings.vocab_size


tasks.register(tasks.Task("first_plus_offset", first_plus_offset, outputs=("classes",),
                          positional=False,
                          settings=(tasks.Option("offset", 1, integer(1)),)))
'''

OFFSET_CONFIG = '''
from normattn_jax.sweep.config import base_config


def get_config():
  c = base_config()
  c.archs = ("mte",)
  c.task.update(name="first_plus_offset", output="classes", seq_len=8, vocab_size=8)
  c.model.update(d_model=8, num_heads=2, num_layers=1)
  c.learning_rates, c.num_seeds = (0.1,), 1
  c.train.update(num_steps=4, eval_every=2, batch_size=4, checkpoint_every=0)
  c.eval.update(val_batches=1, case_set_size=4)
  return c
'''


@pytest.fixture
def offset_plugin(tmp_path, monkeypatch):
  """A plugin module and a config file in ``tmp_path``, the plugin loaded as ``--plugins``
  loads it; the task unregistered afterwards."""
  (tmp_path / "offset_task_plugin.py").write_text(OFFSET_PLUGIN)
  (tmp_path / "offset_config.py").write_text(OFFSET_CONFIG)
  monkeypatch.syspath_prepend(str(tmp_path))
  load_plugins(["offset_task_plugin"])
  yield tmp_path
  tasks.unregister("first_plus_offset")
  sys.modules.pop("offset_task_plugin", None)


def parsed_config(monkeypatch, path, *overrides):
  """The config as the sweep script parses it: the file, then ``--config.<field>=...`` (new
  fields too, which the config flag finds in ``sys.argv``)."""
  argv = ["sweep.py", f"--config={path}", *overrides]
  monkeypatch.setattr(sys, "argv", argv)
  flag_values = flags.FlagValues()
  holder = cli.define_config_flag(None, "a config", flag_values)
  flag_values(argv)
  return holder.value


def test_a_plugin_task_owns_a_setting_the_command_line_sets(offset_plugin, monkeypatch):
  path = str(offset_plugin / "offset_config.py")
  default = parsed_config(monkeypatch, path)
  validate(default)
  assert "offset" not in default.task and Setup("mte", default).settings.offset == 1
  c = parsed_config(monkeypatch, path, "--config.task.offset=3")
  validate(c)
  inputs, labels = Setup("mte", c).sample(jax.random.key(0), 16, 8)
  np.testing.assert_array_equal(labels, (np.asarray(inputs)[:, 0] + 3) % 8)
  summary = run_sweep(c, str(offset_plugin / "run"), show_progress=False, tensorboard=False)
  assert summary["cells"][0]["diverged"] == 0
  assert json.loads((offset_plugin / "run" / "config.json").read_text())["task"]["offset"] == 3


@pytest.mark.parametrize("override, said", [
    ("--config.task.offset=0", r"config.task.offset=0: must be a positive integer"),
    ("--config.task.offset=1.5", r"config.task.offset=1.5: must be a positive integer"),
    ("--config.task.offset='3'", r"config.task.offset='3': must be a number"),
    ("--config.task.ofset=2", r"config.task.ofset=2: no such field"),
])
def test_a_bad_task_setting_is_refused_naming_the_field(offset_plugin, monkeypatch, override,
                                                        said):
  c = parsed_config(monkeypatch, str(offset_plugin / "offset_config.py"), override)
  with pytest.raises(ValueError, match=said):
    validate(c)


def test_a_setting_is_the_tasks_own_and_registration_checks_them(offset_plugin, monkeypatch):
  c = parsed_config(monkeypatch, str(offset_plugin / "offset_config.py"))
  c.task.update(name="copy_first")
  with c.task.unlocked():
    c.task.offset = 2  # copy_first owns no offset
  with pytest.raises(ValueError, match=r"config.task.offset=2: no such field"):
    validate(c)
  sample = lambda key, b, n, s: (jnp.zeros((b, n), jnp.int32), jnp.zeros(b, jnp.int32))
  with pytest.raises(ValueError, match="settings must be Option objects of distinct names"):
    tasks.register(tasks.Task("twice", sample, outputs=("classes",),
                              settings=(tasks.Option("k", 1), tasks.Option("k", 2))))


@pytest.mark.parametrize("output, sample, said", [
    ("classes", lambda key, b, n, s: (  # one example in 16 at the vocabulary size
        jnp.zeros((b, n), jnp.int32), jnp.where(jnp.arange(b) % 16 == 0, s.vocab_size, 0)),
     r"holds labels 8, outside \[0, 8\) \(the 8 classes\), in 64 of its 1024 examples"),
    ("classes", lambda key, b, n, s: (jnp.zeros((b, n), jnp.int32), jnp.full(b, jnp.nan)),
     r"the 'classes' output takes integer labels of shape \(1024,\) .* got float32 \(1024,\)"),
    ("classes", lambda key, b, n, s: (jnp.zeros((b, n), jnp.int32), jnp.zeros((b, n), jnp.int32)),
     r"the 'classes' output takes integer labels of shape \(1024,\) .* got int32 \(1024, 16\)"),
    ("token_classes", lambda key, b, n, s: (jnp.zeros((b, n), jnp.int32), jnp.zeros(b, jnp.int32)),
     r"the 'token_classes' output takes integer labels of shape \(1024, 16\)"),
])
def test_labels_are_checked_per_output_head_in_dtype_shape_and_range(output, sample, said):
  """A label at the vocabulary size in 1 of 16 examples, NaN float labels and labels of the
  wrong shape all trained to "every learning rate diverged", the table blaming the model."""
  task = tasks.register(tasks.Task("broken", sample, outputs=(output,)))
  try:
    with pytest.raises(ValueError, match=r"task 'broken': .*" + said):
      validate(copy_config(**{"task.name": "broken", "task.output": output,
                              "task.seq_len": 16}))
  finally:
    tasks.unregister(task.name)


def test_a_tasks_settings_are_checked_as_it_is_registered():
  """A default that breaks its own rule, and a setting named like a shared field (the config
  would read the shared field: the setting silently ignored), are refused by register."""
  from normattn_jax.sweep.config import base_config
  from normattn_jax.validation import integer
  assert set(tasks.SHARED_FIELDS) == set(base_config().task.keys())
  for settings, said in (
      ((tasks.Option("offset", 0, integer(1)),),
       r"setting offset's default 0 breaks its own rule: must be "),
      ((tasks.Option("seq_len", 3),), r"settings \['seq_len'\] take the names of fields every "
                                      r"task shares")):
    with pytest.raises(ValueError, match=r"task 'bad_settings': " + said):
      tasks.register(tasks.Task("bad_settings", copy_first, outputs=("classes",),
                                settings=settings))
    assert "bad_settings" not in tasks.TASKS


def test_a_setting_the_sampler_cannot_take_is_named():
  """2**70 passed the integer rule and failed inside the sampler as an anonymous
  OverflowError; a sampler's failure on the checked batches names the task and its settings."""
  from normattn_jax.validation import integer
  shifted = lambda key, b, n, s: (jnp.zeros((b, n), jnp.int32),
                                  (jnp.zeros(b, jnp.int32) + s.offset) % s.vocab_size)
  tasks.register(tasks.Task("shifted", shifted, outputs=("classes",),
                            settings=(tasks.Option("offset", 1, integer(1)),)))
  try:
    with pytest.raises(ValueError, match=r"task 'shifted': its sampler fails on a batch at "
                                         r"N = 16 with the settings \{'offset': "
                                         r"1180591620717411303424\}: OverflowError"):
      validate(copy_config(**{"task.name": "shifted", "task.seq_len": 16,
                              "task.offset": 2**70}))
  finally:
    tasks.unregister("shifted")
