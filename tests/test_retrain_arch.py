"""sweep.retrain (normattn-retrain): one arch of a finished sweep trained again and
merged back, on the run's own devices and normalisation or not at all."""
import json
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

from normattn_jax._extras import cpu_cores
from normattn_jax.sweep import artifacts
from normattn_jax.sweep import retrain
from normattn_jax.train.checkpoint import WorkdirError
from normattn_jax.sweep.train import run_sweep

from helpers import FIXTURES, REPO, subprocess_env
from helpers.sweeps import tiny_retrain_config


def metrics(workdir):
  with np.load(os.path.join(workdir, artifacts.METRICS)) as data:
    return {name: data[name] for name in data.files}


def read_text(path):
  with open(path) as f:
    return f.read()


def store_as_older_run(workdir):
  """config.json as a run stored before train.models_per_vmap and sweep.grid existed."""
  path = os.path.join(workdir, "config.json")
  with open(path) as f:
    tree = json.load(f)
  del tree["train"]["models_per_vmap"]
  tree["sweep"]["values"] = tree["sweep"].pop("grid")
  with open(path, "w") as f:
    json.dump(tree, f)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("sweep"))
  run_sweep(tiny_retrain_config(), workdir, show_progress=False, tensorboard=False)
  store_as_older_run(workdir)
  return workdir, metrics(workdir), read_text(os.path.join(workdir, artifacts.SUMMARY))


def test_retraining_with_unchanged_code_reproduces_the_run(finished):
  workdir, stored, summary = finished
  retrain.retrain_arch(workdir, "bert", show_progress=False)
  now = metrics(workdir)
  assert list(now) == list(stored)  # the same arrays, in the same order
  for name in stored:
    np.testing.assert_array_equal(now[name], stored[name], err_msg=name)
  assert read_text(os.path.join(workdir, artifacts.SUMMARY)) == summary
  sub = retrain.sub_workdir(workdir, "bert")
  with open(os.path.join(sub, "config.json")) as f:
    sub_config = json.load(f)
  assert sub_config["archs"] == ["bert"] and sub_config["train"]["models_per_vmap"] == 0
  assert os.path.exists(os.path.join(sub, "versions.json"))
  assert not os.path.exists(os.path.join(sub, "checkpoints"))
  with open(os.path.join(workdir, retrain.RECORD)) as f:
    entry = json.load(f)["bert"]
  assert entry["versions"] == "retrain_bert/versions.json"
  assert entry["grids"] == ["bert[model.num_layers=0]"]


def test_retraining_restores_the_arch_and_keeps_the_others(finished):
  workdir, stored, summary = finished
  retrain.retrain_arch(workdir, "bert", show_progress=False)  # trained: the sub-run has finished
  damaged = {name: np.zeros_like(array) if name.startswith("bert[") else array
             for name, array in stored.items()}
  np.savez_compressed(os.path.join(workdir, artifacts.METRICS), **damaged)
  summary_path = os.path.join(workdir, artifacts.SUMMARY)
  with open(summary_path, "w") as f:
    f.write("{}")
  retrain.retrain_arch(workdir, "bert", show_progress=False)
  now = metrics(workdir)
  assert list(now) == list(stored)
  for name in stored:
    np.testing.assert_array_equal(now[name], stored[name], err_msg=name)
    if not name.startswith("bert["):
      assert now[name].tobytes() == stored[name].tobytes() and now[name].dtype == stored[name].dtype
  assert read_text(summary_path) == summary


def test_an_arch_the_run_lacks_is_refused(finished):
  workdir, _, _ = finished
  with pytest.raises(ValueError, match="not one of the run's archs"):
    retrain.retrain_arch(workdir, "max", show_progress=False)


def copied(workdir, tmp_path):
  target = tmp_path / "run"
  shutil.copytree(workdir, target)
  return str(target)


def files(workdir):
  """Every file under ``workdir`` and its bytes."""
  found = {}
  for folder, _, names in os.walk(workdir):
    for name in names:
      path = os.path.join(folder, name)
      with open(path, "rb") as f:
        found[os.path.relpath(path, workdir)] = f.read()
  return found


def with_recorded(workdir, name, **fields):
  """``workdir``'s json file ``name`` with ``fields`` changed."""
  path = os.path.join(workdir, name)
  with open(path) as f:
    tree = json.load(f)
  tree.update(fields)
  with open(path, "w") as f:
    json.dump(tree, f)


def test_a_run_of_other_devices_is_refused_before_anything_is_written(finished, tmp_path):
  workdir = copied(finished[0], tmp_path)
  here, cores = jax.device_count(), cpu_cores()
  with_recorded(workdir, "versions.json", device_count=here + 1)
  before = files(workdir)
  with pytest.raises(WorkdirError, match=(
      rf"trained on {here + 1} cpu device\(s\) on {cores} core\(s\) \(versions.json\) and this "
      rf"process has {here} cpu device\(s\) on {cores} core\(s\).* Retrain it on {here + 1} cpu "
      rf"device\(s\) on {cores} core\(s\) \(--cpu_devices={here + 1}, pinned to {cores} "
      rf"core\(s\): taskset -c 0-{cores - 1} ...\)")):
    retrain.retrain_arch(workdir, "bert", show_progress=False)
  assert files(workdir) == before
  with_recorded(workdir, "versions.json", device_count=here, cpu_cores=cores + 1)
  before = files(workdir)
  with pytest.raises(WorkdirError, match=rf"on {cores + 1} core\(s\) \(versions.json\) and this "
                                         rf"process has {here} cpu device\(s\) on {cores} core"):
    retrain.retrain_arch(workdir, "bert", show_progress=False)
  assert files(workdir) == before
  with_recorded(workdir, "versions.json", device_count=here, backend="gpu")
  with pytest.raises(WorkdirError, match=rf"trained on {here} gpu device\(s\)"):
    retrain.retrain_arch(workdir, "bert", show_progress=False)


def test_a_run_of_a_normalisation_not_registered_here_is_refused(finished, tmp_path):
  workdir = copied(finished[0], tmp_path)
  with_recorded(workdir, "config.json", attention={"name": "my_norm", "options": {}})
  before = files(workdir)
  with pytest.raises(WorkdirError, match=r"config.attention.name='my_norm', which is not "
                                         r"registered here .* \(--plugins=<module>\)"):
    retrain.retrain_arch(workdir, "bert", show_progress=False)
  assert files(workdir) == before


def test_the_cpu_is_split_into_the_runs_device_count(tmp_path):
  def run_on(name, **recorded):
    os.makedirs(tmp_path / name)
    if recorded:
      (tmp_path / name / "versions.json").write_text(json.dumps(recorded))
    return str(tmp_path / name)

  one, two = run_on("one", backend="cpu", device_count=1), run_on("two", backend="cpu",
                                                                 device_count=2)
  gpus, older = run_on("gpus", backend="gpu", device_count=4), run_on("older")
  assert retrain.cpu_devices_for([two, gpus, older]) == 2
  assert retrain.cpu_devices_for([one, older, gpus]) == 1
  with pytest.raises(WorkdirError, match=f"different numbers of CPU devices \\({one}: 1; {two}: 2"):
    retrain.cpu_devices_for([one, two])


def plugin_config_file(tmp_path):
  """A config file of ``tiny_retrain_config`` with a plugin's normalisation
  (tests/fixtures/card_plugin) on two attention archs."""
  from normattn_jax.train.checkpoint import config_json

  c = tiny_retrain_config()
  c.archs = ("mte", "bert")
  c.attention.name = "tempered_softmax"
  c.attention.options.temperature = 2.0
  stored = tmp_path / "stored"
  os.makedirs(stored)
  (stored / "config.json").write_text(json.dumps(config_json(c)))
  path = tmp_path / "plugin_config.py"
  path.write_text("from normattn_jax.sweep import artifacts\n\n\n"
                  f"def get_config():\n  return artifacts.read_config({str(stored)!r})\n")
  return str(path)


def script(name, *args):
  env = subprocess_env(FIXTURES)
  return subprocess.run([sys.executable, "-m", f"normattn_jax.cli.{name}", *args],
                        capture_output=True, text=True, cwd=REPO, env=env, timeout=600)


def test_the_command_retrains_a_plugin_run_of_two_cpu_devices_as_it_was_made(tmp_path):
  workdir = str(tmp_path / "run")
  done = script("sweep", f"--config={plugin_config_file(tmp_path)}", f"--workdir={workdir}",
                "--plugins=card_plugin", "--cpu_devices=2")
  assert done.returncode == 0, done.stderr[-3000:]
  for figure in ("accuracy.png", "learning_curves.png"):  # the script draws them
    assert os.path.exists(os.path.join(workdir, figure)), figure
  stored = metrics(workdir)
  summary = read_text(os.path.join(workdir, artifacts.SUMMARY))

  done = script("retrain", "--arch=mte", workdir)
  assert done.returncode == 2, done.stderr[-3000:]
  assert "config.attention.name='tempered_softmax'" in done.stderr.splitlines()[-1]
  assert not os.path.exists(retrain.sub_workdir(workdir, "mte"))

  os.remove(os.path.join(workdir, "accuracy.png"))
  done = script("retrain", "--arch=mte", "--plugins=card_plugin", workdir)
  assert done.returncode == 0, done.stderr[-3000:]
  now = metrics(workdir)
  assert list(now) == list(stored)
  for name in stored:
    np.testing.assert_array_equal(now[name], stored[name], err_msg=name)
  assert read_text(os.path.join(workdir, artifacts.SUMMARY)) == summary
  with open(os.path.join(retrain.sub_workdir(workdir, "mte"), "versions.json")) as f:
    assert json.load(f)["device_count"] == 2
  assert os.path.exists(os.path.join(workdir, "accuracy.png"))  # drawn again
