"""Multi-host runs for real: two processes on this machine joined by ``jax.distributed`` (CPU
collectives over gloo), each with 2 CPU devices, against one process with all 4. The sweep's
models axis and pre-training's batch are sharded over both processes; process 0 alone writes
the files; every process saves and restores its shards of the checkpoints.

Each process is ``tests/distributed_worker.py`` (or the experiments' command, for the flags);
programs compiled by one launch are read back by the next from the tests' compilation cache.
"""
import glob
import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from distributed_worker import INTERRUPTED
from helpers.files import halve
from helpers.texts import write_corpus

from helpers import REPO, subprocess_env

WORKER = os.path.join(REPO, "tests", "distributed_worker.py")
DEVICES = 2  # per process; the one-process run has them all
PROCESSES = 2
TIMEOUT = 420  # seconds per launch: a cold compilation cache on two busy cores
GRACE = 15  # seconds the others get to stop after one process failed


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def environment(devices: int) -> dict:
  return subprocess_env(XLA_FLAGS=os.environ.get("XLA_FLAGS", "")  # the cache: conftest.py's
                        + f" --xla_force_host_platform_device_count={devices}")


def launch(commands: list[list[str]], logs: str, devices: int = DEVICES) -> list[int]:
  """Run the commands at once (the processes of one run) and wait for all of them.

  Returns:
    Their exit codes. A process that fails (code other than 0 or INTERRUPTED) leaves the
    others ``GRACE`` seconds before they are killed: they would wait for it in a collective.
  """
  procs, files = [], []
  for i, command in enumerate(commands):
    files.append(open(f"{logs}.log{i}", "w"))
    procs.append(subprocess.Popen(command, stdout=files[-1], stderr=subprocess.STDOUT,
                                  env=environment(devices), cwd=REPO, start_new_session=True))
  began, failed_at = time.monotonic(), None
  try:
    while any(p.poll() is None for p in procs):
      now = time.monotonic()
      if failed_at is None and any(p.poll() not in (None, 0, INTERRUPTED) for p in procs):
        failed_at = now
      if now - began > TIMEOUT or (failed_at is not None and now - failed_at > GRACE):
        break
      time.sleep(0.2)
  finally:
    for p in procs:
      if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    for f in files:
      f.close()
  return [p.returncode for p in procs]


def read_logs(logs: str, count: int) -> list[str]:
  texts = []
  for i in range(count):
    with open(f"{logs}.log{i}") as f:
      texts.append(f.read())
  return texts


def run(commands, logs, expected=0, devices=DEVICES) -> list[str]:
  """``launch``, then check every exit code; returns the processes' output."""
  codes = launch(commands, logs, devices)
  texts = read_logs(logs, len(commands))
  assert codes == [expected] * len(commands), "\n".join(
      f"--- process {i}, exit code {code}:\n{text[-3000:]}"
      for i, (code, text) in enumerate(zip(codes, texts)))
  return texts


def worker(job, workdir, *extra, devices=DEVICES):
  return [sys.executable, WORKER, job, str(workdir), "--devices", str(devices), *extra]


def processes(job, workdir, *extra) -> list[list[str]]:
  """One worker per process, joined through a coordinator on a free local port."""
  address = f"127.0.0.1:{free_port()}"
  return [worker(job, workdir, "--coordinator", address, "--num_processes", str(PROCESSES),
                 "--process_id", str(i), *extra) for i in range(PROCESSES)]


def command(script, config, workdir) -> list[list[str]]:
  """The experiments' command on every process, as on several hosts, with the flags."""
  address = f"127.0.0.1:{free_port()}"
  return [[sys.executable, "-m", f"normattn_jax.cli.{script}", f"--config={config}",
           f"--workdir={workdir}", "--distributed", f"--coordinator_address={address}",
           f"--num_processes={PROCESSES}", f"--process_id={i}"] for i in range(PROCESSES)]


def read(workdir, name):
  with open(os.path.join(workdir, name)) as f:
    return f.read()


def returned(workdir, process):
  with open(f"{workdir}.returned-{process}.json") as f:
    return json.load(f)


def assert_same_metrics(workdir, reference):
  with (np.load(os.path.join(reference, "metrics.npz")) as one,
        np.load(os.path.join(workdir, "metrics.npz")) as two):
    assert sorted(one.files) == sorted(two.files)
    for key in one.files:
      np.testing.assert_array_equal(two[key], one[key], err_msg=key)


# The sweep: bit-identical, as each model's arithmetic is fixed by the vmap width
# (train.models_per_vmap, one per vmap on a CPU) and every device runs the same program on its
# share, whichever process holds it.


@pytest.fixture(scope="module")
def one_process_sweep(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("one") / "run"
  run([worker("sweep", workdir, devices=PROCESSES * DEVICES)], str(workdir))
  return workdir


def test_sweep_on_two_processes_resumes_to_the_one_process_result(one_process_sweep, tmp_path):
  workdir = tmp_path / "run"
  texts = run(processes("sweep", workdir, "--max_chunks", "2"), str(workdir),
              expected=INTERRUPTED)
  assert all("stopped after 2 of 3" in text for text in texts)
  steps = workdir / "checkpoints" / "sum"
  assert sorted(os.listdir(steps)) == ["1", "2"]
  assert not (workdir / "summary.json").exists()
  # damage the newest checkpoint where process 1 alone reads it: every file of its shards
  halve(glob.glob(str(steps / "2" / "default" / "ocdbt.process_1" / "d" / "*")))
  texts = run(command("sweep", f"{WORKER}:sweep", workdir), str(workdir))
  # both processes skip it for the one before it, and train on from there
  assert all(f"skipped checkpoint {steps / '2'}" in text for text in texts)
  assert "another process could not restore its shards" in texts[0]
  assert sorted(os.listdir(steps)) == ["2", "3"]
  assert all("best mean train" in text for text in texts)  # each process has the summary
  assert "trained 1 grid(s)" in texts[0] and "trained" not in texts[1]  # process 0 writes
  assert read(workdir, "summary.json") == read(one_process_sweep, "summary.json")
  assert read(workdir, "history.jsonl") == read(one_process_sweep, "history.jsonl")
  assert_same_metrics(workdir, one_process_sweep)
  assert not glob.glob(str(workdir / "**" / "*.partial"), recursive=True)


@pytest.mark.slow
def test_sweep_on_two_processes_equals_one_process(one_process_sweep, tmp_path):
  workdir = tmp_path / "run"
  run(processes("sweep", workdir), str(workdir))
  assert read(workdir, "summary.json") == read(one_process_sweep, "summary.json")
  assert read(workdir, "history.jsonl") == read(one_process_sweep, "history.jsonl")
  assert_same_metrics(workdir, one_process_sweep)
  assert returned(workdir, 0) == returned(workdir, 1) == returned(one_process_sweep, 0)


# Pre-training: data-parallel, so the gradient is summed over the devices, in one process by
# XLA's all-reduce and over two by gloo's, in another order: the numbers agree to float32
# rounding, not bit for bit. A resumed two-process run equals an uninterrupted one exactly.


def without_timing(summary):
  return {k: v for k, v in summary.items() if k != "tokens_per_second"}


def numbers(tree):
  """The numbers of a JSON tree in order, and the tree with each number replaced by 0."""
  found = []

  def walk(node):
    if isinstance(node, dict):
      return {k: walk(v) for k, v in sorted(node.items())}
    if isinstance(node, list):
      return [walk(v) for v in node]
    if isinstance(node, (int, float)) and not isinstance(node, bool):
      found.append(float(node))
      return 0
    return node
  return np.asarray(found), walk(tree)


def assert_close(tree, reference, rtol=1e-5):
  values, shape = numbers(tree)
  expected, expected_shape = numbers(reference)
  assert shape == expected_shape
  np.testing.assert_allclose(values, expected, rtol=rtol, atol=1e-7)


def history(workdir):
  return [json.loads(line) for line in read(workdir, "history.jsonl").splitlines()]


@pytest.mark.slow
def test_pretraining_on_two_processes(tmp_path):
  corpus = str(tmp_path / "corpus")
  write_corpus(corpus, lines=800)  # enough for 26 documents
  one, whole, resumed = tmp_path / "one", tmp_path / "whole", tmp_path / "resumed"
  run([worker("pretrain", one, "--corpus", corpus, devices=PROCESSES * DEVICES)], str(one))

  texts = run(command("pretrain", f"{WORKER}:pretrain,{corpus}", whole), str(whole))
  # process 0 prepares the data (TFDS, SentencePiece, examples); process 1 loads its cache
  assert "SentencePiece:" in texts[0] and "SentencePiece:" not in texts[1]
  assert "examples in" in texts[0] and "examples in" not in texts[1]
  summary = json.loads(read(whole, "summary.json"))
  assert summary["devices"] == PROCESSES * DEVICES
  assert_close(without_timing(summary), without_timing(json.loads(read(one, "summary.json"))))
  assert_close(history(whole), history(one))

  texts = run(processes("pretrain", resumed, "--corpus", corpus, "--max_chunks", "3"),
              str(resumed), expected=INTERRUPTED)
  assert all("pre-training: stopped after 3 of" in text for text in texts)
  run(processes("pretrain", resumed, "--corpus", corpus), str(resumed))
  assert (without_timing(returned(resumed, 0)) == without_timing(returned(resumed, 1))
          == without_timing(summary))
  assert history(resumed) == history(whole)


# The commands' flags


def test_process_flags_need_distributed(tmp_path):
  done = subprocess.run([sys.executable, "-m", "normattn_jax.cli.sweep",
                         f"--config={WORKER}:sweep", f"--workdir={tmp_path}", "--process_id=1"],
                        capture_output=True, text=True, env=environment(1), cwd=REPO,
                        timeout=300)
  assert done.returncode != 0
  assert "need --distributed" in done.stderr
  assert not os.listdir(tmp_path)


def test_a_process_id_outside_the_run_is_refused():
  from normattn_jax.train import multihost
  with pytest.raises(ValueError, match="process_id=2"):
    multihost.initialize("127.0.0.1:1", 2, 2)
