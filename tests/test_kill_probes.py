"""A run killed outright (SIGKILL) while orbax writes a checkpoint resumes, and ends bit for bit
where the uninterrupted run ends: a sweep, a pre-training and a fine-tuning, each run by a child
process that the test kills the moment a temporary checkpoint folder appears in its workdir."""
import glob
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from helpers import REPO, TESTS, subprocess_env

# Each kind's run of one workdir (argv[1]); the fine-tuning's pre-trained encoder is argv[2].
RUNS = {
    "sweep": """
        from normattn_jax.sweep.train import run_sweep
        from helpers.sweeps import tiny_sweep_config
        config = tiny_sweep_config(**{"archs": ("nap",), "learning_rates": (0.001,),
                                "train.num_steps": 600, "train.eval_every": 20})
        run_sweep(config, sys.argv[1], show_progress=False, tensorboard=False)
        """,
    "pretrain": """
        from normattn_jax.pretrain import train as pretrain
        from helpers.pretraining import FAKE_VOCAB, RandomExamples, tiny_pretrain_config
        splits = {"train": RandomExamples(64, 0), "validation": RandomExamples(16, 1)}
        pretrain.load_data = lambda c, workdir: (FAKE_VOCAB, splits)
        config = tiny_pretrain_config("hnas")
        config.train.update(num_steps=60, checkpoint_every=2, eval_every=20)
        pretrain.run_pretraining(config, sys.argv[1], show_progress=False, tensorboard=False)
        """,
    "finetune": """
        import pathlib
        from normattn_jax.finetune import train as ft
        from helpers.finetuning import tiny_finetune_config
        config = tiny_finetune_config(pathlib.Path(sys.argv[2]))
        config.train.update(num_steps=60, eval_every=20, checkpoint_every=1)
        ft.run_finetuning(config, sys.argv[1], show_progress=False, tensorboard=False)
        """,
}


def child(kind: str, *args: str) -> subprocess.Popen:
  script = "import sys\n" + textwrap.dedent(RUNS[kind])
  env = subprocess_env(TESTS)
  return subprocess.Popen([sys.executable, "-c", script, *args], cwd=REPO, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def finish(kind: str, *args: str) -> None:
  process = child(kind, *args)
  _, err = process.communicate(timeout=900)
  assert process.returncode == 0, err


def kill_while_writing(kind: str, workdir: str, *args: str) -> str:
  """Start the run and SIGKILL it as soon as orbax's temporary folder of a checkpoint exists;
  the folder's path."""
  process = child(kind, workdir, *args)
  deadline = time.monotonic() + 900
  try:
    while time.monotonic() < deadline and process.poll() is None:
      found = glob.glob(os.path.join(workdir, "checkpoints", "**", "*orbax-checkpoint-tmp*"),
                        recursive=True)
      if found:
        process.send_signal(signal.SIGKILL)
        process.wait()
        return found[0]
      time.sleep(0.002)
  finally:
    if process.poll() is None:
      process.kill()
      process.wait()
  pytest.fail(f"the {kind} run ended ({process.returncode}) before a checkpoint was caught "
              f"being written: {process.stderr.read()[-2000:]}")


def outputs(workdir: str) -> dict:
  """What a finished run leaves: its summary, history and curves, timings aside."""
  out = {}
  with open(os.path.join(workdir, "summary.json")) as f:
    out["summary"] = {k: v for k, v in json.load(f).items() if "second" not in k}  # timings
  history = os.path.join(workdir, "history.jsonl")
  if os.path.exists(history):
    with open(history) as f:
      rows = [json.loads(line) for line in f]
    out["history"] = [{k: v for k, v in row.items() if "second" not in k} for row in rows]
  metrics = os.path.join(workdir, "metrics.npz")
  if os.path.exists(metrics):
    with np.load(metrics) as data:
      out["metrics"] = {name: data[name].tolist() for name in data.files}
  return out


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
  from helpers.finetuning import pretrained
  return str(pretrained(tmp_path_factory.mktemp("encoder")))


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(RUNS))
def test_a_run_killed_while_writing_a_checkpoint_resumes_bit_for_bit(kind, tmp_path, request):
  args = (request.getfixturevalue("encoder"),) if kind == "finetune" else ()
  whole, killed = str(tmp_path / "whole"), str(tmp_path / "killed")
  finish(kind, whole, *args)
  caught = kill_while_writing(kind, killed, *args)
  assert not os.path.exists(os.path.join(killed, "summary.json"))
  finish(kind, killed, *args)  # resumes from the newest complete checkpoint
  assert not glob.glob(os.path.join(killed, "checkpoints", "**", "*orbax-checkpoint-tmp*"),
                       recursive=True), f"{caught} was left behind"
  assert outputs(killed) == outputs(whole)


SWEEP_FLAGS = ["--config=case_distinction", "--config.archs=('nap',)",
               "--config.learning_rates=(0.001,)", "--config.num_seeds=2",
               "--config.task.seq_len=8", "--config.model.d_model=8", "--config.model.num_heads=2",
               "--config.model.num_layers=1", "--config.train.num_steps=400",
               "--config.train.eval_every=20", "--config.train.batch_size=4",
               "--config.train.checkpoint_every=1", "--config.eval.val_batches=2",
               "--config.eval.case_set_size=4"]


def sweep_command(workdir: str, *prefix: str) -> list:
  return [*prefix, sys.executable, "-m", "normattn_jax.cli.sweep",
          f"--workdir={workdir}", *SWEEP_FLAGS]


def run_command(command: list) -> subprocess.CompletedProcess:
  return subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=900,
                        env=subprocess_env())


def curves(workdir: str) -> dict:
  with np.load(os.path.join(workdir, "metrics.npz")) as data:
    return {name: data[name] for name in data.files}


@pytest.mark.slow
def test_a_run_resumed_on_one_core_under_taskset_restores_the_two_core_checkpoints(tmp_path):
  """Checkpoints of a run split over the 2 cores' devices restore on the 1 device that taskset
  leaves: the resumed run says so, lists both machines in versions.json and finishes; its curves
  are the uninterrupted run's up to the checkpoint and differ by float rounding at the first
  evaluation after it (rounding that training then amplifies, as the warning says)."""
  if len(os.sched_getaffinity(0)) < 2 or not os.path.exists("/usr/bin/taskset"):
    pytest.skip("needs taskset and two cores")
  whole, resumed = str(tmp_path / "whole"), str(tmp_path / "resumed")
  done = run_command(sweep_command(whole))
  assert done.returncode == 0, done.stderr
  process = subprocess.Popen(sweep_command(resumed), cwd=REPO, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL,
                             env=subprocess_env())
  try:  # killed once a checkpoint is complete
    while process.poll() is None and not glob.glob(os.path.join(resumed, "checkpoints", "*",
                                                                "2*")):
      time.sleep(0.01)
  finally:
    process.kill()
    process.wait()
  done = run_command(sweep_command(resumed, "taskset", "-c", "0"))
  assert done.returncode == 0, done.stderr
  assert "resumes on 1 device(s) on 1 core(s)" in done.stderr
  with open(os.path.join(resumed, "versions.json")) as f:
    stored = json.load(f)
  assert [stored["device_count"]] + [r["device_count"] for r in stored["resumed_with"]] == [2, 1]
  got, want = curves(resumed), curves(whole)
  loss_got, loss_want = got["nap/train_loss"], want["nap/train_loss"]
  differ = np.flatnonzero((loss_got != loss_want).any(axis=(1, 2, 3)))
  first = differ[0] if differ.size else len(loss_want)
  assert first >= 1  # the evaluations before the checkpoint are the two-core run's
  for name in want:
    np.testing.assert_array_equal(got[name][:first], want[name][:first], err_msg=name)
  if differ.size:
    np.testing.assert_allclose(loss_got[first], loss_want[first], rtol=1e-5)
  assert np.isfinite(loss_got).all()


@pytest.mark.slow
def test_a_disk_that_fills_leaves_no_run_that_looks_finished(tmp_path):
  """On a tmpfs too small for the run's checkpoints the run fails; it leaves no summary.json, no
  metrics.npz and no checkpoint that does not restore, and once there is room it resumes and
  ends as the uninterrupted run."""
  whole, mount = str(tmp_path / "whole"), str(tmp_path / "small")
  os.makedirs(mount)
  if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", mount],
                    capture_output=True).returncode != 0:
    pytest.skip("needs to mount a small tmpfs (root)")
  try:
    workdir = os.path.join(mount, "run")
    done = run_command(sweep_command(workdir))
    assert done.returncode != 0 and "No space left on device" in done.stderr
    assert not os.path.exists(os.path.join(workdir, "summary.json"))
    assert not os.path.exists(os.path.join(workdir, "metrics.npz"))
    subprocess.run(["mount", "-o", "remount,size=64m", mount], check=True)
    done = run_command(sweep_command(workdir))
    assert done.returncode == 0, done.stderr
    assert run_command(sweep_command(whole)).returncode == 0
    got, want = curves(workdir), curves(whole)
    for name in want:
      np.testing.assert_array_equal(got[name], want[name], err_msg=name)
  finally:
    subprocess.run(["umount", mount], capture_output=True)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["pretrain", "finetune"])
def test_two_runs_started_at_once_on_one_workdir_end_as_one_run(kind, tmp_path, request):
  """Started together, one run takes the workdir's lock and trains; the other is refused
  (WorkdirError, nothing written), or, arriving after the first finished, returns its
  summary; the workdir ends as one finished run, with no checkpoint left half-written."""
  args = (request.getfixturevalue("encoder"),) if kind == "finetune" else ()
  workdir = str(tmp_path / "run")
  both = [child(kind, workdir, *args) for _ in range(2)]
  ends = [(process.wait(timeout=900), process.stderr.read()) for process in both]
  assert sorted(code == 0 for code, _ in ends) in ([False, True], [True, True]), ends
  for code, err in ends:
    if code:
      assert "is in use by process" in err, err[-2000:]
  assert os.path.exists(os.path.join(workdir, "summary.json"))
  assert not glob.glob(os.path.join(workdir, "checkpoints", "**", "*orbax-checkpoint-tmp*"),
                       recursive=True)
