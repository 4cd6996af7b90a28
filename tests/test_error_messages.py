"""Bad input from a user's files and flags is refused with an error that names the field, flag
or file at fault and its value, instead of failing later with an error that hides the cause."""
import json
import re
import subprocess
import sys

import pytest

from normattn_jax.train import checkpoint, multihost
from normattn_jax.sweep.config import base_config

from helpers import REPO, subprocess_env


def run_script(*args, cwd=REPO):
  env = subprocess_env()
  env.pop("XLA_FLAGS", None)
  return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                        cwd=cwd, timeout=600)


def write(path, text):
  with open(path, "w") as f:
    f.write(text)
  return str(path)


# ----- fine-tuning from a workdir that is no pre-training run -----

def test_encoder_path_at_a_sweep_workdir_names_the_field_and_the_file(tmp_path):
  from normattn_jax.finetune import encoders
  write(tmp_path / "config.json", json.dumps(checkpoint.config_json(base_config())))
  with pytest.raises(ValueError, match=re.escape(f"encoder.path={str(tmp_path)!r} is not a "
                                                 "pre-training workdir: its ")
                     + r".*config\.json has the sections \['archs', .*'data', 'model', 'train'"):
    encoders.from_pretraining(str(tmp_path))


def test_encoder_path_with_a_damaged_config_names_the_file(tmp_path):
  from normattn_jax.finetune import encoders
  path = write(tmp_path / "config.json", '{"model": ')
  with pytest.raises(ValueError, match=re.escape(f"encoder.path={str(tmp_path)!r}: {path} is "
                                                 "not valid JSON")):
    encoders.pretraining_config(str(tmp_path))
  write(tmp_path / "config.json", "[1, 2]")
  with pytest.raises(ValueError, match=re.escape(f"{path} holds a JSON list, not a config")):
    encoders.pretraining_config(str(tmp_path))


# ----- --coordinator_address -----

@pytest.mark.parametrize("address", ["localhost:1234", "10.0.0.1:80", "[::1]:1234", ""])
def test_coordinator_addresses_of_host_and_port_are_taken(address):
  assert multihost.address_problem(address) is None
  multihost.check_arguments(address, 2, 1)


@pytest.mark.parametrize("address", ["notahost", "host:", ":1234", "host:0", "host:65536",
                                     "host:http", "::1:1234"])
def test_other_coordinator_addresses_are_refused_by_value(address):
  with pytest.raises(ValueError, match=re.escape(f"coordinator_address={address!r} must")):
    multihost.check_arguments(address)
  with pytest.raises(ValueError, match="coordinator_address"):
    multihost.initialize(address, 2, 0)  # before JAX is asked to join anything


def test_the_run_scripts_refuse_a_coordinator_address_by_flag(tmp_path):
  """The run scripts' main (``cli.run_command``) refuses it as a usage error, which absl's
  ``app.run`` prints without a traceback (a command's usage error in its own process:
  test_distributed's test_process_flags_need_distributed)."""
  from absl import app
  from normattn_jax.cli import command as cli

  from helpers.commands import run_flags

  ran = []
  given = run_flags(tmp_path / "w", distributed=True, coordinator_address="notahost")
  with pytest.raises(app.UsageError, match=re.escape("--coordinator_address='notahost' must "
                                                     "be host:port")):
    cli.run_command(lambda *a, **k: ran.append(a), None, given)  # an IndexError is no match
  assert not ran and not (tmp_path / "w").exists()


# ----- a workdir's config.json and summary.json -----

def test_a_config_json_that_is_a_list_is_refused_naming_the_workdir(tmp_path):
  write(tmp_path / "config.json", "[1, 2, 3]")
  with pytest.raises(checkpoint.WorkdirError,
                     match=re.escape(f"workdir {tmp_path}: cannot read its config.json (")
                     + r".*config\.json holds a JSON list, not an object of fields"):
    checkpoint.check_workdir(str(tmp_path), base_config(), "sweep")


def test_a_damaged_summary_of_a_finished_run_is_named(tmp_path):
  config = base_config()
  write(tmp_path / "config.json", json.dumps(checkpoint.config_json(config)))
  path = write(tmp_path / "summary.json", '{"best": ')
  with pytest.raises(checkpoint.WorkdirError,
                     match=re.escape(f"workdir {tmp_path}: its summary.json, which marks a "
                                     f"finished run, is damaged: {path} is not valid JSON")):
    checkpoint.open_workdir(str(tmp_path), config, "sweep")
  assert checkpoint.lock_holder(str(tmp_path)) is None  # released
  with pytest.raises(ValueError, match=re.escape(f"{path} is not valid JSON")):
    checkpoint.finished_summary(str(tmp_path))
  with pytest.raises(FileNotFoundError, match="has no summary.json: its run has not finished"):
    checkpoint.finished_summary(str(tmp_path / "elsewhere"))


def test_the_comparison_scripts_name_a_damaged_summary(tmp_path):
  """A usage error, which absl's ``app.run`` prints without a traceback (the script defines no
  flags: its main runs in this process)."""
  from absl import app
  from normattn_jax.cli import regularization_table

  path = write(tmp_path / "summary.json", "not json")
  with pytest.raises(app.UsageError, match=re.escape(f"{path} is not valid JSON")):
    regularization_table._main(["normattn-regularization-table", str(tmp_path)])


def test_a_sweeps_damaged_files_are_named(tmp_path):
  from normattn_jax.sweep import artifacts
  from normattn_jax.sweep.plan import SweepPlan
  path = write(tmp_path / "config.json", "{")
  with pytest.raises(ValueError, match=re.escape(f"{path} is not valid JSON")):
    artifacts.read_config(str(tmp_path))
  write(path, json.dumps({"model": {}}))
  with pytest.raises(ValueError, match=re.escape(f"{path} is not a sweep's config: it has no "
                                                 "list archs")):
    artifacts.read_config(str(tmp_path))
  write(path, json.dumps(checkpoint.config_json(base_config())))
  metrics = write(tmp_path / artifacts.METRICS, "PK\x03\x04 cut short")
  with pytest.raises(ValueError, match=re.escape(f"{metrics} is not a readable .npz")):
    artifacts.read_results(str(tmp_path), SweepPlan.of(artifacts.read_config(str(tmp_path))))


# ----- HuggingFace folders -----

@pytest.fixture
def hf_folder(tmp_path):
  from normattn_jax.models import bert
  import shutil
  for name in ("config.json", "model.safetensors", "tokenizer.json"):
    shutil.copy(bert.bundled_minilm_path() / name, tmp_path / name)
  return tmp_path


@pytest.mark.parametrize("text, match", [
    ('{"hidden_size": ', "is not valid JSON"),
    ("[384]", "holds a JSON list, not a model config"),
    ('{"hidden_size": "big"}', "hidden_size must be a positive integer, got 'big'"),
])
def test_a_damaged_hf_config_is_named(hf_folder, text, match):
  from normattn_jax.models import bert
  path = write(hf_folder / "config.json", text)
  with pytest.raises(ValueError, match=re.escape(path) + ".*" + re.escape(match)):
    bert.load_config(hf_folder)


def test_damaged_hf_weights_and_tokenizer_are_named(hf_folder):
  from normattn_jax.finetune import encoders
  from normattn_jax.models import bert
  path = write(hf_folder / "model.safetensors", "garbage")
  with pytest.raises(ValueError, match=re.escape(f"{path} is not a readable safetensors file")):
    encoders.from_huggingface(hf_folder)
  path = write(hf_folder / "tokenizer.json", "{not json")
  with pytest.raises(ValueError, match=re.escape(f"{path} is not a readable tokenizer")):
    bert.load_tokenizer(hf_folder)


# ----- normattn-unselectable -----

def test_unselectable_flags_are_checked_before_anything_is_written(tmp_path):
  workdir = tmp_path / "w"
  done = run_script("-m", "normattn_jax.cli.unselectable",
                    f"--workdir={workdir}", "--dims=0", "--ns=3", "--runs=1")
  assert done.returncode != 0
  assert "--dims=0: 0 is below 2, the smallest it takes" in done.stderr
  assert not workdir.exists()


def test_unselectable_fractions_refuse_impossible_sizes():
  from normattn_jax.analysis.unselectable import fraction_with_unselectable
  with pytest.raises(ValueError, match="d must be a positive integer, got 0"):
    fraction_with_unselectable(0, 5, 1, False)
  with pytest.raises(ValueError, match="d must be an integer >= 2, got 1"):
    fraction_with_unselectable(1, 5, 1, True)  # LayerNorm of one coordinate: 0 / 0
  with pytest.raises(ValueError, match="n must be a positive integer, got 0"):
    fraction_with_unselectable(3, 0, 1, False)
  assert 0 <= fraction_with_unselectable(1, 3, 2, False) <= 1


# ----- the normalisation registry -----

@pytest.mark.parametrize("fields, match", [
    (dict(weights=None), "weights must be a function"),
    (dict(fast=3), "fast must be None or a function"),
    (dict(params=("u",)), "params must be a tuple of HeadParam, got ('u',)"),
    (dict(options=None), "options must be a tuple of Option, got None"),
    (dict(scale_logits="yes"), "scale_logits must be True or False, got 'yes'"),
    (dict(normalizes_over_queries=None), "normalizes_over_queries must be True or False"),
    (dict(fast_pays_off=None), "fast_pays_off must be a function"),
    (dict(paper="https://arxiv.org/abs/1"), "paper must be None or a (citation, address) pair"),
])
def test_a_normalisation_that_could_not_work_is_refused_naming_the_field(fields, match):
  from normattn_jax.attention import registry
  given = {"weights": lambda logits, mask=None: logits, **fields}
  with pytest.raises(ValueError, match=re.escape(f"normalization 'x': {match}")):
    registry.register(registry.Normalization("x", **given))
  assert "x" not in registry.NORMALIZATIONS


def test_per_head_parameters_may_not_repeat_or_take_an_argument_name():
  import flax.linen as nn
  from normattn_jax.attention import registry
  init = lambda options: nn.initializers.zeros
  for params in ((registry.HeadParam("g", init), registry.HeadParam("g", init)),
                 (registry.HeadParam("mask", init),)):
    with pytest.raises(ValueError, match="per-head parameter names"):
      registry.register(registry.Normalization("x", lambda logits, mask=None: logits,
                                               params=params))
  assert "x" not in registry.NORMALIZATIONS


# ----- pre-training on too little text -----

def test_too_little_text_for_pre_training_names_the_config_field(tmp_path):
  from normattn_jax.pretrain import train as pretrain
  corpus = write(tmp_path / "tiny.txt", "".join(f"line {i}.\n" for i in range(10)))
  c = pretrain.base_pretrain_config()
  c.data.corpus, c.data.files, c.data.validation_fraction = "files", (corpus,), 0.2
  with pytest.raises(ValueError) as err:
    pretrain.load_data(c, str(tmp_path / "w"))
  message = str(err.value)
  assert message.startswith("config.data.validation_fraction=0.2: the ")
  assert "split would have no document" in message
  assert re.search(r"add text to data\.files or (raise|lower) data\.validation_fraction", message)
  assert "lines_per_document" not in message
