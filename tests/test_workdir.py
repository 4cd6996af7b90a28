"""A workdir belongs to one config: resume with it, refuse another before touching anything,
start afresh on request; resume past a damaged latest checkpoint; leave a finished run as it is."""
import glob
import json
import os
import re
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest

from normattn_jax.pretrain import train as pretrain
from normattn_jax.train import checkpoint, kinds
from normattn_jax.train.checkpoint import (LOCK, DamagedCheckpointWarning, WorkdirError,
                                           config_differences, config_json, lock_workdir,
                                           open_workdir, unlock_workdir)
from normattn_jax.sweep.config import get_field
from normattn_jax.pretrain.train import run_pretraining
from normattn_jax.train.driver import Budget, Interrupted
from helpers import REPO, subprocess_env
from helpers.commands import run_flags
from helpers.files import halve
from helpers.sweeps import read, run, tiny_sweep_config
from helpers.pretraining import (FAKE_VOCAB, RandomExamples, read_history,
                                 tiny_pretrain_config)


def sweep_config(**overrides):
  return tiny_sweep_config(archs=("nap",), **overrides)


def pretrain_config():
  """HNAS's ALBERT of one layer: a workdir's guards need no deeper model, which compiles
  longer."""
  c = tiny_pretrain_config("hnas")
  c.model.num_hidden_layers = 1
  return c


def snapshot(workdir) -> dict:
  """Every file under ``workdir``, path -> bytes."""
  files = {}
  for root, _, names in os.walk(workdir):
    for name in names:
      path = os.path.join(root, name)
      with open(path, "rb") as f:
        files[os.path.relpath(path, workdir)] = f.read()
  return files


def copy(workdir, tmp_path):
  return shutil.copytree(workdir, tmp_path / "run")


def truncate_array_file(step_dir):
  """Cut the array data a restore reads (the item's OCDBT data files) in half: every file, as
  which of them holds the arrays depends on how orbax's writes interleaved."""
  halve(glob.glob(os.path.join(step_dir, "*", "d", "*")))


def truncate_metadata(step_dir):
  [path] = glob.glob(os.path.join(step_dir, "*", "_METADATA"))
  halve([path])


def empty_step_folder(step_dir):
  shutil.rmtree(step_dir)
  os.makedirs(step_dir)


DAMAGES = [truncate_array_file, truncate_metadata, empty_step_folder]


def test_differences_name_each_field_and_ignore_only_the_listed_ones():
  stored = {"train": {"seed": 0, "log_every": 1}, "archs": ["nap"]}
  new = {"train": {"seed": 1, "log_every": 5, "l2": 0.0}, "archs": ["nap"]}
  assert ([(f, repr(a), b) for f, a, b in config_differences(stored, new, ("train.log_every",))]
          == [("train.l2", "(absent)", 0.0), ("train.seed", "0", 1)])
  for kind, config in (("sweep", sweep_config()), ("pretraining", tiny_pretrain_config())):
    assert config_differences(config_json(config), config_json(config)) == []
    every_field = {field for field, _, _ in config_differences({}, config_json(config))}
    assert set(kinds.get(kind).may_differ) <= every_field, kind


# Sweeps


@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("sweep")
  run(sweep_config(), workdir)
  return workdir


@pytest.fixture(scope="module")
def interrupted_sweep(tmp_path_factory):
  """Killed after two of three evaluations: checkpoints 1 and 2."""
  workdir = tmp_path_factory.mktemp("interrupted_sweep")
  with pytest.raises(Interrupted):
    run(sweep_config(), workdir, budget=Budget(chunks=2))
  assert sorted(os.listdir(workdir / "checkpoints" / "nap")) == ["1", "2"]
  return workdir


@pytest.mark.parametrize("overrides, named", [
    ({"learning_rates": (0.01, 0.003)}, "learning_rates was [0.001, 0.0003], now [0.01, 0.003]"),
    ({"seed": 1}, "seed was 0, now 1"),
    ({"num_seeds": 3, "train.num_steps": 40},
     "num_seeds was 2, now 3; train.num_steps was 30, now 40."),
])
def test_sweep_refuses_another_config_and_touches_nothing(finished_sweep, overrides, named):
  before = snapshot(finished_sweep)
  with pytest.raises(ValueError, match=re.escape(f"workdir {finished_sweep} ") + ".*"
                     + re.escape(named)):
    run(sweep_config(**overrides), finished_sweep)
  assert snapshot(finished_sweep) == before


def test_killed_sweep_restarted_with_another_config_is_refused(interrupted_sweep, tmp_path):
  workdir = copy(interrupted_sweep, tmp_path)
  before = snapshot(workdir)
  with pytest.raises(ValueError, match=re.escape("learning_rates was [0.001, 0.0003]")):
    run(sweep_config(learning_rates=(0.01, 0.003)), workdir)
  assert snapshot(workdir) == before


def test_sweep_rerun_of_a_finished_run_leaves_it_as_it_was(finished_sweep):
  before = snapshot(finished_sweep)
  config = sweep_config()
  config.train.checkpoint_every = 2  # may differ
  assert run(config, finished_sweep) == read(finished_sweep)
  assert snapshot(finished_sweep) == before


def test_sweep_afresh_moves_the_old_workdir_aside(finished_sweep, tmp_path):
  workdir = copy(finished_sweep, tmp_path)
  before = snapshot(workdir)
  summary = run(sweep_config(learning_rates=(0.01, 0.003)), workdir, afresh=True)
  [old] = glob.glob(str(tmp_path / "run.replaced-*"))
  assert snapshot(old) == before
  assert [cell["learning_rate"] for cell in summary["cells"]] == [0.01, 0.003]
  assert read(workdir) == summary
  assert read(workdir, "config.json")["learning_rates"] == [0.01, 0.003]


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.fast_subset(  # one fallback for every damage: the others check orbax's reading
    lambda p: p["damage"] is truncate_array_file)
def test_sweep_resumes_past_a_damaged_latest_checkpoint(damage, interrupted_sweep, finished_sweep,
                                                        tmp_path):
  workdir = copy(interrupted_sweep, tmp_path)
  damage(str(workdir / "checkpoints" / "nap" / "2"))
  with pytest.warns(DamagedCheckpointWarning, match=re.escape("checkpoints/nap/2: ")):
    run(sweep_config(), workdir)
  assert read(workdir) == read(finished_sweep)
  resumed, whole = np.load(workdir / "metrics.npz"), np.load(finished_sweep / "metrics.npz")
  assert set(resumed) == set(whole)
  for key in whole:
    np.testing.assert_array_equal(resumed[key], whole[key], err_msg=key)
  # restored from checkpoint 1: its rows kept, those of evaluation 2 logged again, once
  assert (workdir / "history.jsonl").read_bytes() == (finished_sweep / "history.jsonl").read_bytes()


def test_sweep_with_no_checkpoint_that_restores_fails_naming_the_workdir(interrupted_sweep,
                                                                         tmp_path):
  workdir = copy(interrupted_sweep, tmp_path)
  for step in ("1", "2"):
    empty_step_folder(str(workdir / "checkpoints" / "nap" / step))
  with pytest.warns(DamagedCheckpointWarning), pytest.raises(
      ValueError, match=re.escape(f"no checkpoint in {workdir}")):
    run(sweep_config(), workdir)


# Pre-training


@pytest.fixture(scope="module")
def random_data():
  splits = {"train": RandomExamples(64, 0), "validation": RandomExamples(16, 1)}
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(pretrain, "load_data",
                  lambda c, workdir: (FAKE_VOCAB, splits))
    yield


def train_albert(config, workdir, **kwargs):
  return run_pretraining(config, str(workdir), show_progress=False, tensorboard=False, **kwargs)


@pytest.fixture(scope="module")
def finished_pretraining(tmp_path_factory, random_data):
  workdir = tmp_path_factory.mktemp("pretraining")
  train_albert(pretrain_config(), workdir)
  return workdir


@pytest.fixture(scope="module")
def interrupted_pretraining(tmp_path_factory, random_data):
  """Killed after five of six steps: checkpoints 2 and 4."""
  workdir = tmp_path_factory.mktemp("interrupted_pretraining")
  with pytest.raises(Interrupted):
    train_albert(pretrain_config(), workdir, budget=Budget(chunks=5))
  assert sorted(os.listdir(workdir / "checkpoints")) == ["2", "4"]
  return workdir


@pytest.mark.parametrize("field, value, named", [
    ("model.attention.options.hybrid_init", 0.25,
     "model.attention.options.hybrid_init was (absent), now 0.25"),
    ("train.seed", 1, "train.seed was 0, now 1"),
    ("train.num_steps", 8, "train.num_steps was 6, now 8"),
])
@pytest.mark.parametrize("state", ["finished", "interrupted"])
def test_pretraining_refuses_another_config_and_touches_nothing(
    state, field, value, named, finished_pretraining, interrupted_pretraining):
  workdir = finished_pretraining if state == "finished" else interrupted_pretraining
  config = pretrain_config()
  section, _, name = field.rpartition(".")
  get_field(config, section)[name] = value
  before = snapshot(workdir)
  with pytest.raises(ValueError, match=re.escape(named)):
    train_albert(config, workdir)
  assert snapshot(workdir) == before


def test_pretraining_rerun_of_a_finished_run_leaves_it_as_it_was(finished_pretraining):
  before = snapshot(finished_pretraining)
  config = pretrain_config()
  config.train.update(log_every=2, eval_every=6, checkpoint_every=3)  # these may differ
  summary = train_albert(config, finished_pretraining)
  assert snapshot(finished_pretraining) == before
  assert summary == json.loads(before["summary.json"])
  assert summary["tokens_per_second"] > 0


# afresh, one driver (runs.run) for every kind: test_sweep_afresh_moves_the_old_workdir_aside;
# a pre-training afresh: test_finetune_guards' test_a_resumed_run_refuses_an_encoder_replaced_...
@pytest.mark.slow
def test_pretraining_afresh_moves_the_old_workdir_aside(finished_pretraining, random_data,
                                                        tmp_path):
  workdir = copy(finished_pretraining, tmp_path)
  before = snapshot(workdir)
  config = pretrain_config()
  config.model.attention.options.hybrid_init = 0.25
  summary = train_albert(config, workdir, afresh=True)
  [old] = glob.glob(str(tmp_path / "run.replaced-*"))
  assert snapshot(old) == before
  with open(workdir / "config.json") as f:
    assert json.load(f)["model"]["attention"] == {"name": "hnas",
                                                  "options": {"hybrid_init": 0.25}}
  assert summary["hybrid_weights"] != json.loads(before["summary.json"])["hybrid_weights"]


@pytest.mark.parametrize("damage", [truncate_array_file, empty_step_folder])
@pytest.mark.fast_subset(lambda p: p["damage"] is truncate_array_file)
def test_pretraining_resumes_past_a_damaged_latest_checkpoint(
    damage, interrupted_pretraining, finished_pretraining, random_data, tmp_path):
  workdir = copy(interrupted_pretraining, tmp_path)
  damage(str(workdir / "checkpoints" / "4"))
  with pytest.warns(DamagedCheckpointWarning, match=re.escape(f"{workdir}/checkpoints/4: ")):
    summary = train_albert(pretrain_config(), workdir)
  assert read_history(str(workdir)) == read_history(str(finished_pretraining))
  with open(finished_pretraining / "summary.json") as f:
    whole = json.load(f)
  for key in ("mlm_accuracy", "sop_accuracy", "mlm_loss", "sop_loss", "hybrid_weights_per_head"):
    assert summary[key] == whole[key], key


# The command lines


def command(name, *args):
  return subprocess.run([sys.executable, "-m", f"normattn_jax.cli.{name}", *args],
                        capture_output=True, text=True, cwd=REPO, timeout=300,
                        env=dict(os.environ, JAX_PLATFORMS="cpu"))


def test_sweep_command_refuses_another_config_in_one_line(tmp_path):
  from normattn_jax.configs import case_distinction
  from normattn_jax.train import kinds
  # the config.json a sweep of it writes (its model.dtype "auto" resolved), but for its seeds
  stored = config_json(kinds.get("sweep").workdir_config(case_distinction.get_config(),
                                                         str(tmp_path)))
  stored["num_seeds"] = 3
  (tmp_path / "config.json").write_text(json.dumps(stored))
  done = command("sweep", "--config", "case_distinction", "--workdir", str(tmp_path))
  assert done.returncode == 2, done.stderr
  assert done.stderr.splitlines()[-1] == (
      f"error: workdir {tmp_path} holds a run of another config: num_seeds was 3, now 5. Rerun "
      "with its config, use another workdir, or start afresh (--afresh, afresh=True) to move it "
      "aside")
  assert "Traceback" not in done.stderr and os.listdir(tmp_path) == ["config.json"]


def test_pretrain_command_reruns_a_finished_run_without_a_measured_throughput(tmp_path, capsys):
  """The command's main (``cli.run_kind``, as normattn-pretrain calls it) in this process; its
  flags and exit codes: test_cli, test_sweep_command_refuses_another_config_in_one_line."""
  from normattn_jax.cli import command as cli
  from normattn_jax.configs import albert_tiny
  (tmp_path / "config.json").write_text(json.dumps(config_json(albert_tiny.get_config())))
  summary = {"attention": "softmax", "mlm_accuracy": 0.5, "sop_accuracy": 0.75,
             "tokens_per_second": None, "devices": 1, "device_kind": "cpu"}
  (tmp_path / "summary.json").write_text(json.dumps(summary))
  assert cli.run_kind(albert_tiny.get_config(), run_flags(tmp_path),
                      expected="pretraining") == summary
  assert ("softmax: held-out MLM accuracy 50.0%, SOP accuracy 75.0%, n/a tokens/s"
          in capsys.readouterr().out)
  assert json.loads((tmp_path / "summary.json").read_text()) == summary


# One run per workdir


def _holder(workdir, pid, host=None):
  """A lock file as the run of ``pid`` on ``host`` (this host by default) leaves it."""
  os.makedirs(workdir, exist_ok=True)
  holder = {"pid": pid, "host": host or socket.gethostname()}
  (workdir / LOCK).write_text(json.dumps(holder))
  return holder


def test_a_workdir_in_use_by_a_live_run_is_refused_and_taken_over_once_that_run_is_dead(
    tmp_path):
  workdir = tmp_path / "run"
  holder = subprocess.Popen(
      [sys.executable, "-c", "import sys, time; from normattn_jax.train.checkpoint import "
       "lock_workdir; lock_workdir(sys.argv[1]); print('locked', flush=True); time.sleep(120)",
       str(workdir)], stdout=subprocess.PIPE, text=True, cwd=REPO,
      env=subprocess_env())
  try:
    assert holder.stdout.readline().strip() == "locked"
    with pytest.raises(WorkdirError, match=re.escape(
        f"workdir {workdir} is in use by process {holder.pid} on {socket.gethostname()}")):
      open_workdir(str(workdir), sweep_config(), "sweep")
    assert not (workdir / "config.json").exists()
  finally:
    holder.kill()
    holder.wait()
  with pytest.warns(UserWarning, match=f"taking over the lock of process {holder.pid}"):
    assert open_workdir(str(workdir), sweep_config(), "sweep") is None  # a stale lock
  assert json.loads((workdir / LOCK).read_text())["pid"] == os.getpid()
  unlock_workdir(str(workdir))
  assert not (workdir / LOCK).exists()


def test_a_lock_of_another_host_is_refused_naming_its_file(tmp_path):
  workdir = tmp_path / "run"
  _holder(workdir, 1, "elsewhere")
  with pytest.raises(WorkdirError, match=re.escape("process 1 on elsewhere") + ".*"
                     + re.escape(str(workdir / LOCK))):
    lock_workdir(str(workdir))


def test_a_lock_file_of_garbage_is_refused_naming_it(tmp_path):
  """A damaged lock cannot be told stale: refused, the file named for the user to delete."""
  workdir = tmp_path / "run"
  workdir.mkdir()
  (workdir / LOCK).write_text("{garbage")
  with pytest.raises(WorkdirError, match=re.escape("a run whose lock file does not read") + ".*"
                     + re.escape(f"delete {workdir / LOCK}")):
    lock_workdir(str(workdir))
  assert (workdir / LOCK).read_text() == "{garbage"


def test_a_lock_whose_pid_is_now_an_unrelated_process_is_taken_over(tmp_path):
  """A killed run's pid, given since to another process (after a reboot, or in a container),
  kept its workdir refused forever: the lock records when its process started."""
  workdir = tmp_path / "run"
  live = os.getppid()  # a live process, not the lock's
  _holder(workdir, live)
  (workdir / LOCK).write_text(json.dumps(dict(json.loads((workdir / LOCK).read_text()),
                                              started="another-boot:1")))
  if checkpoint._started(live) is None:
    pytest.skip("this system does not tell when a process started (no /proc)")
  with pytest.warns(UserWarning, match=f"taking over the lock of process {live}"):
    lock_workdir(str(workdir))
  mine = json.loads((workdir / LOCK).read_text())
  assert mine["pid"] == os.getpid() and mine["started"] == checkpoint._started(os.getpid())
  unlock_workdir(str(workdir))
  assert not (workdir / LOCK).exists()
  _holder(workdir, live)  # the same pid with its own start time: a live run, refused
  (workdir / LOCK).write_text(json.dumps(dict(json.loads((workdir / LOCK).read_text()),
                                              started=checkpoint._started(live))))
  with pytest.raises(WorkdirError, match=f"in use by process {live}"):
    lock_workdir(str(workdir))


def test_the_second_run_into_a_workdir_is_refused_and_writes_nothing(tmp_path):
  workdir = tmp_path / "run"
  _holder(workdir, os.getppid())  # a live process: the first run
  before = snapshot(workdir)
  with pytest.raises(WorkdirError, match="is in use by process"):
    run(sweep_config(), workdir)
  assert snapshot(workdir) == before


def test_a_second_pre_training_into_a_running_ones_workdir_is_refused(tmp_path, random_data):
  """Two pre-trainings of one workdir at once: the second is refused by the first's lock
  before it reads its data or writes anything."""
  workdir = tmp_path / "run"
  _holder(workdir, os.getppid())  # a live process: the first run
  before = snapshot(workdir)
  with pytest.raises(WorkdirError, match="is in use by process"):
    train_albert(pretrain_config(), workdir)
  assert snapshot(workdir) == before


def test_a_run_releases_its_workdir_when_it_ends(finished_sweep, interrupted_sweep,
                                                 interrupted_pretraining):
  for workdir in (finished_sweep, interrupted_sweep, interrupted_pretraining):
    assert not (workdir / LOCK).exists(), workdir
  run(sweep_config(), finished_sweep)  # a finished run: returned, released
  assert not (finished_sweep / LOCK).exists()


def test_only_the_chief_locks_the_workdir(tmp_path, monkeypatch):
  from normattn_jax.train import multihost
  monkeypatch.setattr(multihost, "is_chief", lambda: False)
  assert open_workdir(str(tmp_path / "run"), sweep_config(), "sweep") is None
  assert not (tmp_path / "run" / LOCK).exists()


def test_a_finished_run_reads_back_without_its_lock_on_a_read_only_mount(tmp_path, monkeypatch):
  """A finished run is recognised before the lock is taken: on a read-only mount, where the
  lock cannot be written, rerunning it returns its summary."""
  from normattn_jax.train import checkpoint

  workdir = tmp_path / "run"
  assert open_workdir(str(workdir), sweep_config(), "sweep") is None
  unlock_workdir(str(workdir))
  (workdir / "summary.json").write_text(json.dumps({"best": {}}))

  def read_only(path):
    raise OSError(30, "Read-only file system", os.path.join(path, LOCK))
  monkeypatch.setattr(checkpoint, "lock_workdir", read_only)
  assert open_workdir(str(workdir), sweep_config(), "sweep") == {"best": {}}
  other = sweep_config()
  other.seed = 99
  with pytest.raises(WorkdirError):  # another config's finished run is still refused
    open_workdir(str(workdir), other, "sweep")
  with pytest.raises(OSError, match="Read-only"):  # an unfinished one needs its lock
    (workdir / "summary.json").unlink()
    open_workdir(str(workdir), sweep_config(), "sweep")
