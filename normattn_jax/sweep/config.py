"""The sweep configuration: defaults at the NAP paper's settings, and its validation.

Every experiment config in ``configs/`` starts from ``base_config()``; ``validate`` runs before
anything compiles and names the offending field.
"""
from __future__ import annotations


import jax
import ml_collections
from ml_collections import config_dict

from normattn_jax import tasks
from normattn_jax.attention.module import check_fusable
from normattn_jax.attention.module_spec import ADDITIONS, AttentionModuleSpec
from normattn_jax.blocks import ARCHITECTURES
from normattn_jax.feedforward import check_ffn_implementation
from normattn_jax.models.sequence import OUTPUTS
from normattn_jax.precision import AUTO, DTYPES, check_compute_dtype, resolve_dtype
from normattn_jax.train import kinds
from normattn_jax.attention.section import attention_section, attention_spec
from normattn_jax.validation import check_known_fields
from normattn_jax.validation import check_config_float, check_config_int, check_fields
from normattn_jax.validation import fail_config as _fail

# Switches that are True, False, or None for the arch's (model.positional: the task's) own choice.
SWITCHES = ("model.positional", "model.normalize", "model.attention_gelu", "train.warmup",
            "train.clip")
PAPER_ARCHS = ("bert", "mte", "nap", "non", "sum", "max")
PAPER_LEARNING_RATES = tuple(0.3 ** k for k in range(1, 11))
# Hyper-parameters that keep the shapes of the compiled program: swept inside it (vmap), each
# model's value data of the one program (train.dropout a program per value where
# sweep.in_program is False, as sweeps stored before the rate was data).
VMAPPED_SWEEPS = ("train.l2", "train.dropout")
# Hyper-parameters that change shapes or the graph: an outer loop of compiled programs.
STATIC_SWEEPS = ("model.d_model", "model.num_heads", "model.num_layers", "task.seq_len",
                 "task.vocab_size", "train.batch_size", "ablation")
# A static sweep over an option of the normalisation: "attention.options.<its name>".
OPTION_SWEEP = "attention.options."
# Table 1 of the NAP paper: BERT, - warm up, - grad. clip, + normalize, + GELU (= MTE).
ABLATION_STAGES = ("BERT", "- warm up", "- grad. clip", "+ normalize", "+ GELU")
STEPS_SCALES = ("", "inverse", "proportional")
SWEEPS = ("",) + VMAPPED_SWEEPS + STATIC_SWEEPS


def base_config() -> ml_collections.ConfigDict:
  """The default sweep config: the NAP paper's settings, the case task, all six archs.

  Returns:
    A fresh ``ml_collections.ConfigDict`` (sections ``sweep``, ``task``, ``model``, ``train``,
    ``eval``) for an experiment config to change.
  """
  c = ml_collections.ConfigDict()
  c.kind = "sweep"  # the kind of run (train.kinds): normattn-run dispatches on it
  c.archs = PAPER_ARCHS
  # attention.name: "" keeps each arch's own; else e.g. "dnas" on attention archs, with its
  # options in attention.options (e.g. --config.attention.options.sinkhorn_iters=5)
  c.attention = attention_section()
  c.learning_rates = PAPER_LEARNING_RATES
  c.num_seeds = 5
  c.seed = 0
  # sweep.steps_scale: "inverse" keeps the examples seen constant over a batch-size sweep
  # (steps x reference / value), "proportional" the examples per class over a vocabulary sweep
  # (steps x value / reference); evaluations scale along, so every point has as many.
  # sweep.grid: the values sweep.name takes (a program each for a static sweep, vmapped for
  # train.l2 and train.dropout); the field was named sweep.values in older workdirs' config.json.
  # sweep.in_program: False trains a train.dropout sweep as a program per value (the layout of
  # sweeps stored before the rate was data of one program)
  c.sweep = ml_collections.ConfigDict(
      {"name": "", "grid": (), "steps_scale": "", "steps_reference": 1, "in_program": True})

  c.task = ml_collections.ConfigDict()
  c.task.name = "case_distinction"
  c.task.seq_len = 128
  c.task.vocab_size = 100
  c.task.output = "tokens"      # tokens | first | classes | token_classes

  c.model = ml_collections.ConfigDict()
  c.model.d_model = 128
  c.model.num_layers = 2
  c.model.num_heads = 4
  c.model.positional = config_dict.placeholder(bool)      # None: the task's own
  c.model.normalize = config_dict.placeholder(bool)       # None: the arch's own
  c.model.attention_gelu = config_dict.placeholder(bool)  # None: the arch's own
  # MultiHeadAttention's options, attention archs only (docs/guides/modules.md): None | "headwise"
  # | "elementwise"; None | "rms" | "layer"; differential attention (head width even)
  c.model.output_gate = config_dict.placeholder(str)
  c.model.qk_norm = config_dict.placeholder(str)
  c.model.differential = False
  # the compute dtype ("float32" | "bfloat16" | "auto": normattn_jax.precision's policy,
  # parameters float32; "auto" is bfloat16 on an accelerator where the normalisations allow it,
  # float32 on a CPU, recorded resolved in the workdir) and the attention's path ("auto" |
  # "quadratic" | "fast" | "fused", attention.module)
  c.model.dtype = "auto"
  c.model.attention_implementation = "auto"
  # the feed-forward sub-block's path ("xla" | "pallas" | "auto": normattn_jax.feedforward; the
  # Pallas kernels only where measured faster on the device at hand with "auto")
  c.model.ffn_implementation = "xla"

  c.train = ml_collections.ConfigDict()
  c.train.num_steps = 3200
  c.train.batch_size = 32
  c.train.eval_every = 100
  c.train.warmup = config_dict.placeholder(bool)  # None: BERT only (first 10% of steps)
  c.train.clip = config_dict.placeholder(bool)    # None: BERT only (per-tensor norm 1.0)
  c.train.l2 = 0.0
  c.train.dropout = 0.0
  # Adam's moments as one flat buffer per model (optax.flatten: a few kernels per step, not a
  # few per parameter tensor; the same arithmetic, its rounding not bit for bit under XLA's
  # optimised CPU compile, so opt-in); False: one per parameter tensor (a checkpoint holds the
  # layout it was saved in)
  c.train.flat_adam = False
  # leave the L2 term out of the program where train.l2 is 0 and not swept (adds exact zeros:
  # the same bits as the tests compile, its rounding not bit for bit under XLA's optimised CPU
  # compile, and no kernel fewer, so opt-in)
  c.train.drop_zero_l2 = False
  c.train.checkpoint_every = 4  # in evaluations; 0 disables checkpoints
  # also checkpoint after the first evaluation that ends this many minutes after the last
  # checkpoint (a long grid on a machine that may be taken away); 0: not by time
  c.train.checkpoint_minutes = 0.0
  # models vmapped together, the vmaps one after another (lax.map); 0 = one on a CPU, each
  # device's whole share on an accelerator. At a fixed width a model's numbers do not depend
  # on the rest of the grid.
  c.train.models_per_vmap = 0
  # devices that split each model's batch (the "data" axis of a models x data mesh; the models
  # lie over the rest): must divide the devices and train.batch_size; 1 = each model on one,
  # 0 = auto (grid.data_shards_for: data shards only where there are more devices than models)
  c.train.data_shards = 1

  c.eval = ml_collections.ConfigDict()
  c.eval.val_batches = 32
  c.eval.case_set_size = 1000   # per case, at the training and at the validation length
  # the case sets at the validation length too (no paper reads them; half the sets' work)
  c.eval.validation_case_sets = False
  return c


def _positive_int(config, field, low=1):
  check_config_int(field, get_field(config, field), low)


def _non_negative_int(config, field):
  _positive_int(config, field, low=0)


def point_label(values: dict) -> str:
  """A short label of a sweep point, e.g. ``"model.d_model=64,train.l2=0.01"``.

  Args:
    values: field -> number (formatted with ``:g``).

  Returns:
    ``"field=value"`` per entry, joined by commas ("" for ``{}``).
  """
  return ",".join(f"{k}={v:g}" for k, v in values.items())


def get_field(config, field: str):
  """The value of a dotted ``field`` ("model.d_model") of ``config``."""
  node = config
  for part in field.split("."):
    node = node[part]
  return node


def _switch(config, field):
  if get_field(config, field) is not None and not isinstance(get_field(config, field), bool):
    _fail(field, get_field(config, field), "must be True, False or None (the arch's own choice)")


def _task(config) -> tasks.Task:
  """The registered task that ``task.name`` names."""
  if config.task.name not in tasks.TASKS:
    _fail("task.name", config.task.name, f"choose from {tasks.TASKS}")
  return tasks.get(config.task.name)


def with_task_settings(config: ml_collections.ConfigDict,
                       task_name: str) -> ml_collections.ConfigDict:
  """``config`` with the settings that task ``task_name`` owns in its ``task`` section, at their
  defaults: the fields a config of that task may have (none added for an unknown name, which
  the validation names).

  Args:
    config: a sweep config, e.g. ``base_config()`` (changed in place).
    task_name: a task's name.

  Returns:
    ``config``.
  """
  if task_name in tasks.TASKS:
    with config.task.unlocked():
      for name, default in tasks.get(task_name).setting_defaults().items():
        if name not in config.task:
          config.task[name] = default
  return config


def validate(config: ml_collections.ConfigDict) -> None:
  """Raise ``ValueError`` naming the field for any invalid value. Each swept value must pass the
  rules of the field it sets, on the config it trains with: one rule per field.

  Args:
    config: a sweep config (as ``base_config()`` makes).

  Raises:
    ValueError: ``config.<field>=<value>: <why>`` for the first invalid field; for a swept value,
      prefixed with ``config.sweep.grid[i]=<value> (as <sweep.name>)``.
  """
  check_known_fields(config, with_task_settings(base_config(), config.task.name),
                     free=(OPTION_SWEEP[:-1],))
  kinds.check_kind(config, "sweep", absent_is_expected=True)
  _validate_fields(config)
  _validate_sweep(config)
  for i, value in enumerate(config.sweep.grid):
    try:
      _validate_fields(_swept_config(config, value))
    except ValueError as err:
      raise ValueError(
          f"config.sweep.grid[{i}]={value!r} (as {config.sweep.name}): {err}") from None


def _validate_fields(config) -> None:
  """Every field's rules, the sweep aside."""
  archs = tuple(config.archs)
  if not archs:
    _fail("archs", config.archs, "needs at least one architecture")
  for arch in archs:
    if arch not in ARCHITECTURES:
      _fail("archs", config.archs, f"unknown arch {arch!r}; choose from {tuple(ARCHITECTURES)}")
  if len(set(archs)) != len(archs):
    _fail("archs", config.archs, "lists an architecture twice")
  if (attention_spec(config.attention, "attention", keep=True) is not None
      and any(ARCHITECTURES[a].mixer != "attention" for a in archs)):
    _fail("attention.name", config.attention.name, "applies to attention archs only")
  _validate_attention_options(config.model, "model", archs)
  _validate_compute(config, archs)
  check_fields(config, ("learning_rates", "num_seeds", "seed"))
  for field in ("eval.val_batches", "eval.case_set_size"):
    _positive_int(config, field)
  if not isinstance(config.eval.validation_case_sets, bool):
    _fail("eval.validation_case_sets", config.eval.validation_case_sets, "must be True or False")
  _validate_shapes(config)
  check_fields(config, ("train.models_per_vmap", "train.checkpoint_every"))
  check_config_float("train.checkpoint_minutes", config.train.checkpoint_minutes, 0)
  _non_negative_int(config, "train.data_shards")
  check_mesh(config)
  task = _task(config)
  if config.task.output not in OUTPUTS:
    _fail("task.output", config.task.output, f"choose from {OUTPUTS}")
  if config.task.output not in task.outputs:
    _fail("task.output", config.task.output,
          f"the {config.task.name} task needs one of {task.outputs}")
  for field in SWITCHES:
    _switch(config, field)
  check_config_float("train.l2", config.train.l2, 0)
  for field in ("flat_adam", "drop_zero_l2"):
    if not isinstance(config.train[field], bool):
      _fail(f"train.{field}", config.train[field], "must be True or False")
  seq_len = int(config.task.seq_len)
  settings = tasks.resolved_settings(task, config.task)
  classes = config.task.vocab_size if task.num_classes is None else task.num_classes(settings)
  tasks.check_batches(task, settings, config.task.output, int(classes),
                      (seq_len, task.validation_length(seq_len)))


def validate_attention_options(model, section: str) -> None:
  """The attention module's options in a config section: ``attention_implementation``,
  ``output_gate``, ``qk_norm`` and ``differential`` (``AttentionModuleSpec``'s rules), as config
  errors.

  Args:
    model: the config section holding them (a sweep's or pre-training's ``model``).
    section: its dotted path, for errors.

  Raises:
    ValueError: ``config.<section>.<field>=<value>: <why>`` for the first value out of range.
  """
  AttentionModuleSpec.from_config(model, section)


def _validate_attention_options(model, section: str, archs: tuple) -> None:
  validate_attention_options(model, section)
  pooling = [a for a in archs if ARCHITECTURES[a].mixer != "attention"]
  for field in ADDITIONS:
    if model[field] not in (None, False) and pooling:
      _fail(f"{section}.{field}", model[field],
            f"applies to attention archs only, not {tuple(pooling)}")


def check_mesh(config: ml_collections.ConfigDict) -> None:
  """Refuse a (models x data) mesh this machine cannot lay out, before anything compiles:
  ``train.data_shards`` (unless 0, auto) must divide the devices and each model's batch.

  Raises:
    ValueError: ``config.train.data_shards=<n>: must divide ...`` with the numbers.
  """
  shards, devices = config.train.data_shards, jax.device_count()
  if not shards:  # auto: grid.data_shards_for picks a divisor of both
    return
  if devices % shards:
    raise ValueError(f"config.train.data_shards={shards}: must divide the {devices} devices "
                     f"(a mesh of {devices} // data_shards models x data_shards)")
  if config.train.batch_size % shards:
    raise ValueError(f"config.train.data_shards={shards}: must divide config.train.batch_size "
                     f"({config.train.batch_size}), each shard training on an equal slice")


def _validate_compute(config, archs: tuple) -> None:
  """``model.dtype`` and ``model.attention_implementation``: known values, "fused" only for
  archs whose normalisation has a fused path, bfloat16 only for those that keep their
  tolerances in it (``normattn_jax.precision``)."""
  if config.model.dtype not in tuple(DTYPES) + (AUTO,):
    _fail("model.dtype", config.model.dtype, f"must be one of {tuple(DTYPES) + (AUTO,)}")
  implementation = config.model.attention_implementation  # a known one: validate_attention_options
  chosen = attention_spec(config.attention, "attention", keep=True)
  for arch in archs:
    own = ARCHITECTURES[arch]
    if own.mixer == "attention":
      check_fusable(chosen or own.normalization, implementation,
                    f"config.model.attention_implementation (arch {arch!r})")
      check_compute_dtype(chosen or own.normalization, config.model.dtype, "model.dtype")
  check_ffn_implementation(config.model.ffn_implementation, config.train.dropout,
                           "config.model.ffn_implementation", "config.train.dropout")


def compute_dtype(config: ml_collections.ConfigDict) -> str:
  """``model.dtype`` with "auto" resolved (``precision.resolve_dtype``) over the normalisations
  of every arch of the config, on this machine: one dtype for the whole sweep.

  Returns:
    A key of ``precision.DTYPES``.
  """
  chosen = attention_spec(config.attention, "attention", keep=True)
  return resolve_dtype(config.model.dtype, [
      chosen or ARCHITECTURES[arch].normalization for arch in config.archs
      if ARCHITECTURES[arch].mixer == "attention"])


def with_compute_dtype(config: ml_collections.ConfigDict,
                       workdir: str = "") -> ml_collections.ConfigDict:
  """The sweep kind's ``workdir_config``: a copy of ``config`` with ``model.dtype`` resolved
  (``compute_dtype``), what its workdir records, so that a run started in bfloat16 on an
  accelerator is not resumed in float32 on a CPU (or the reverse) under one "auto"."""
  del workdir
  resolved = config.copy_and_resolve_references()
  resolved.model.dtype = compute_dtype(config)
  return resolved


def _validate_sweep(config):
  name, values = config.sweep.name, tuple(config.sweep.grid)
  if name.startswith(OPTION_SWEEP):
    _option_default(config, name)
  elif name not in SWEEPS:
    _fail("sweep.name", name, f"choose from {SWEEPS} or {OPTION_SWEEP}<an option of "
                              f"attention.name>")
  if name and not values:
    _fail("sweep.grid", config.sweep.grid, f"needs values for sweep {name!r}")
  if not name and values:
    _fail("sweep.grid", config.sweep.grid, "given without a sweep.name")
  for i, value in enumerate(values):
    check_config_float(f"sweep.grid[{i}]", value)
  if len(set(values)) != len(values):
    _fail("sweep.grid", config.sweep.grid, "lists a value twice")
  if name == "ablation" and any(v not in range(len(ABLATION_STAGES)) for v in values):
    _fail("sweep.grid", config.sweep.grid,
          f"ablation stages are 0..{len(ABLATION_STAGES) - 1}: {ABLATION_STAGES}")
  if not isinstance(config.sweep.in_program, bool):
    _fail("sweep.in_program", config.sweep.in_program, "must be True or False")
  if name == "train.l2" and not config.sweep.in_program:
    _fail("sweep.in_program", config.sweep.in_program,
          "train.l2 is swept inside the program only (its weight is data of it)")
  if config.sweep.steps_scale not in STEPS_SCALES:
    _fail("sweep.steps_scale", config.sweep.steps_scale, f"choose from {STEPS_SCALES}")
  if config.sweep.steps_scale:
    check_config_float("sweep.steps_reference", config.sweep.steps_reference, 0, open_low=True)


def swept_in_program(config) -> bool:
  """Whether the config's sweep is data of each arch's one program (``VMAPPED_SWEEPS``, unless
  ``sweep.in_program`` is False), not an outer loop of programs."""
  return config.sweep.name in VMAPPED_SWEEPS and bool(config.sweep.in_program)


def static_points(config) -> list[dict]:
  """One dict per compiled program: ``{sweep.name: value}`` for a sweep that is not data of
  the program (``swept_in_program``), else ``[{}]``.

  Args:
    config: a validated sweep config.

  Returns:
    One dict per compiled program, its value cast to the field's type (int for ``ablation``).
  """
  name = config.sweep.name
  if name == "ablation":
    return [{name: int(v)} for v in config.sweep.grid]
  if name and not swept_in_program(config):
    kind = type(_current(config, name))
    return [{name: kind(v)} for v in config.sweep.grid]
  return [{}]


def _option_default(config, name: str):
  """The default of the option that an option sweep ``name`` sets (refused if none)."""
  spec = attention_spec(config.attention, "attention", keep=True)
  option = name[len(OPTION_SWEEP):]
  if spec is None or option not in spec.normalization.option_names:
    _fail("sweep.name", name, "sweeps an option of attention.name's normalisation, which has "
                              f"{() if spec is None else spec.normalization.option_names}")
  return spec.resolved()[option]


def _current(config, field: str):
  """The value a swept field has before the sweep (an option: its value or default)."""
  if field.startswith(OPTION_SWEEP):
    return _option_default(config, field)
  return get_field(config, field)


def point_config(config: ml_collections.ConfigDict, values: dict, *,
                 cast: bool = True) -> ml_collections.ConfigDict:
  """The config of one point of a sweep: a copy of ``config`` with ``values``
  ({"model.d_model": 64}) applied, its steps scaled by ``sweep.steps_scale``, and the sweep
  cleared, so that the point is one plain config that validates as it is (and is not scaled
  twice). ``values={}`` keeps the sweep: a vmapped sweep is the models axis of the one point.
  ``cast=False`` keeps each value as listed (16.5 stays 16.5, not d_model=16), for validation.

  Args:
    config: a sweep config.
    values: field -> value, e.g. ``{"model.d_model": 64}`` or ``{"ablation": 2}``.
    cast: cast each value to the type of the field it sets.

  Returns:
    A new ``ConfigDict`` (``config`` is not changed).
  """
  c = ml_collections.ConfigDict(config.to_dict(), type_safe=cast)
  for field, value in values.items():
    if field == "ablation":
      _apply_ablation(c, int(value))
      continue
    section, _, key = field.rpartition(".")
    get_field(c, section)[key] = type(_current(c, field))(value) if cast else value
    if config.sweep.steps_scale and not swept_in_program(config):  # one program: steps as given
      ratio = value / config.sweep.steps_reference
      factor = 1 / ratio if config.sweep.steps_scale == "inverse" else ratio
      c.train.num_steps = int(round(config.train.num_steps * factor))
      c.train.eval_every = int(round(config.train.eval_every * factor))
  if values:
    c.sweep.update(name="", grid=(), steps_scale="")
  return c


def _swept_config(config, value):
  """The config that one value of the sweep trains with, that value uncast."""
  return point_config(config, {config.sweep.name: value}, cast=False)


def _apply_ablation(c, stage: int) -> None:
  """Stage k of Table 1 applies the first k modifications that lead from BERT to MTE."""
  c.train.warmup = stage < 1
  c.train.clip = stage < 2
  c.model.normalize = stage >= 3
  c.model.attention_gelu = stage >= 4


def _validate_shapes(c) -> None:
  """The fields a static sweep may change, and the rules between them."""
  for field in ("task.seq_len", "task.vocab_size", "model.d_model", "model.num_heads"):
    _positive_int(c, field)
  check_fields(c, ("train.batch_size", "train.num_steps", "train.eval_every"))
  _non_negative_int(c, "model.num_layers")
  if c.train.num_steps % c.train.eval_every:
    _fail("train.eval_every", c.train.eval_every,
          f"must divide train.num_steps ({c.train.num_steps})")
  check_config_float("train.dropout", c.train.dropout, 0, 1, open_high=True)
  if (any(ARCHITECTURES[a].mixer == "attention" for a in c.archs)
      and c.model.d_model % c.model.num_heads):
    _fail("model.num_heads", c.model.num_heads, f"must divide model.d_model ({c.model.d_model})")
  if c.model.differential and (c.model.d_model // c.model.num_heads) % 2:
    _fail("model.differential", c.model.differential,
          f"splits each head in two maps: needs an even head width, model.d_model / "
          f"model.num_heads = {c.model.d_model // c.model.num_heads}")
  task = _task(c)
  tasks.check_settings(task, c.task)  # the settings it owns, each by its rule
  task.check(tasks.resolved_settings(task, c.task))  # its own rules, e.g. the case vocabulary
