"""Every experiment config is valid as shipped and overridable from the command line."""
import glob
import os
import subprocess
import sys

import pytest

from normattn_jax.configs import regularization
from normattn_jax.sweep.config import point_config, static_points, validate
from normattn_jax.pretrain.train import validate_pretrain_config

from helpers import REPO, config_from_file, shipped_config

ALBERT_CONFIGS = sorted(glob.glob(os.path.join(REPO, "normattn_jax", "configs", "albert_*.py")))
# configs of other kinds of run, each checked by its kind's tests
OTHER_KINDS = ("layernorm_majority.py",  # test_analysis_majority's
               "report_card.py",  # test_report_card's
               "unselectable_lm.py")  # test_causal_lm's
CONFIGS = sorted(p for p in glob.glob(os.path.join(REPO, "normattn_jax", "configs", "*.py"))
                 if not p.endswith(("__init__.py", "regularization.py"))
                 and os.path.basename(p) not in OTHER_KINDS
                 and p not in ALBERT_CONFIGS
                 and not os.path.basename(p).startswith("finetune_"))  # test_finetune's


@pytest.mark.parametrize("path", CONFIGS, ids=os.path.basename)
@pytest.mark.fast_subset(  # one sweep config, make run's; the steps-scaled static sweep:
    lambda p: os.path.basename(p["path"]) == "demo.py")  # test_grid's fig13 test
def test_config_is_valid(path):
  validate(config_from_file(path))


@pytest.mark.parametrize("path", ALBERT_CONFIGS, ids=os.path.basename)
def test_pretraining_config_is_valid(path):
  validate_pretrain_config(config_from_file(path))


def test_dnas_paper_pretraining_settings():
  c = config_from_file(os.path.join(REPO, "normattn_jax", "configs", "albert_large_dnas_paper.py"))
  assert (c.model.num_hidden_layers, c.model.hidden_size, c.model.num_attention_heads,
          c.model.embedding_size) == (24, 1024, 16, 1024)
  assert ((c.model.intermediate_size, c.model.num_hidden_groups, c.model.inner_group_num) ==
           (4096, 24, 1))
  assert (c.train.batch_size, c.train.learning_rate, c.train.num_steps,
          c.train.warmup_steps) == (4096, 0.00176, 125000, 3125)
  assert (c.data.corpus, c.data.vocab_size, c.data.max_seq_length,
          c.data.max_predictions_per_seq) == ("wikipedia", 30000, 512, 20)


# The DNAS paper (Appendix C.2) gives "about 334M" parameters, BERT-large's count as the ALBERT
# paper's Table 1 lists it. BERT-large's encoder with its 30,522-piece vocabulary and the pooler
# has 335,141,888. Ours differs by the 30,000-piece vocabulary (-522 x 1024), ALBERT's E -> H
# projection (+1024 x 1024 + 1024, kept although E = H) and the pre-training heads (MLM transform,
# LayerNorm and output bias, SOP: +1,083,698): 336,740,658, 0.8% above 334M.
DNAS_PAPER_PARAMS = 334e6
DNAS_CONFIG_PARAMS = 336_740_658


def count_pretraining_params(c):
  """Parameters of the model a pre-training config builds, from shapes alone (no allocation)."""
  import jax
  import jax.numpy as jnp
  import numpy as np

  from normattn_jax.pretrain.train import build_model
  model = build_model(c, c.data.vocab_size)
  batch = {k: jnp.zeros((1, 8), jnp.int32) for k in ("input_ids", "input_mask", "segment_ids")}
  batch["masked_lm_positions"] = jnp.zeros((1, 2), jnp.int32)
  shapes = jax.eval_shape(model.init, jax.random.key(0), batch)["params"]
  return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(shapes))


@pytest.mark.parametrize("attention,extra", [("softmax", 0), ("dnas", 0), ("hnas", 24 * 16)])
@pytest.mark.fast_subset(lambda p: p["attention"] != "dnas")  # no parameters, as softmax
def test_dnas_paper_model_has_bert_large_size(attention, extra):
  # One set of weights shared by all 24 layers would give 47M; HNAS adds only u per layer and head.
  c = config_from_file(os.path.join(REPO, "normattn_jax", "configs", "albert_large_dnas_paper.py"))
  c.model.attention.name = attention
  n = count_pretraining_params(c)
  assert n == DNAS_CONFIG_PARAMS + extra
  assert abs(n - DNAS_PAPER_PARAMS) / DNAS_PAPER_PARAMS < 0.01


@pytest.mark.parametrize("task", regularization.TABLE_TASKS)
@pytest.mark.parametrize("kind", sorted(regularization.KINDS))
@pytest.mark.fast_subset(  # each regulariser on one task
    lambda p: p["task"] == regularization.TABLE_TASKS[0])
def test_regularization_configs(task, kind):
  validate(regularization.get_config(f"{task},{kind}"))


def test_paper_scale_defaults():
  c = config_from_file(os.path.join(REPO, "normattn_jax", "configs", "case_distinction.py"))
  assert c.archs == ("bert", "mte", "nap", "non", "sum", "max")
  assert len(c.learning_rates) == 10 and abs(c.learning_rates[0] - 0.3) < 1e-12
  shape = (c.model.d_model, c.model.num_layers, c.model.num_heads, c.task.seq_len)
  assert shape == (128, 2, 4, 128)
  assert (c.train.num_steps, c.train.batch_size, c.num_seeds) == (3200, 32, 5)


def test_depth_sweep_reaches_the_papers_depth():
  c = shipped_config("fig15_first_token_lr_x_depth")
  assert (c.sweep.name, c.task.output) == ("model.num_layers", "first")
  assert tuple(c.sweep.grid) == (1, 2, 4, 8, 16, 32, 64)


def test_step_scaling_keeps_examples_constant():
  c = config_from_file(os.path.join(REPO, "normattn_jax", "configs", "fig13_case_lr_x_batch.py"))
  for values in static_points(c):
    p = point_config(c, values)
    assert p.train.num_steps * p.train.batch_size == 3200 * 32
    assert p.train.num_steps // p.train.eval_every == 32
  c = config_from_file(os.path.join(REPO, "normattn_jax", "configs", "fig16_mode_lr_x_vocab.py"))
  assert [point_config(c, v).train.num_steps for v in static_points(c)][:3] == [800, 1600, 3200]


def test_ablation_stages():
  c = config_from_file(os.path.join(REPO, "normattn_jax", "configs", "table1_ablation.py"))
  stages = [point_config(c, v) for v in static_points(c)]
  assert [(s.train.warmup, s.train.clip, s.model.normalize, s.model.attention_gelu)
          for s in (stages[0], stages[4])] == [(True, True, False, False),
                                               (False, False, True, True)]


# the sweep command refusing a bad config before writing anything: test_registry's
# test_the_sweep_cli_needs_the_plugin_that_registers_sparsemax
@pytest.mark.slow
def test_command_line_rejects_a_bad_override_before_compiling(tmp_path):
  result = subprocess.run(
      [sys.executable, "-m", "normattn_jax.cli.sweep",
       "--config", "demo", "--workdir", str(tmp_path / "w"),
       "--config.archs=('nap','gpt')"], capture_output=True, text=True, cwd=REPO)
  assert result.returncode != 0
  assert "config.archs" in result.stderr
  assert not os.path.exists(tmp_path / "w")
