"""The report card: its checks, configs and guard (fast), and whole smoke cards of a plugin
normalisation with an option, in process and from the command line (slow)."""
import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from configs import report_card as card_configs
from normattn_jax.attention.registry import AttentionSpec
from normattn_jax.registry import load_plugins
from normattn_jax.reporting import report_card as rc
from normattn_jax.train import config as config_lib
from normattn_jax.train.checkpoint import WorkdirError, open_workdir, unlock_workdir

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC = AttentionSpec("tempered_softmax", {"temperature": 2.0})
DIAGNOSTICS = ("case", "first_token", "mode", "explaining_away", "mode_collapse",
               "unselectable", "cost")


@pytest.fixture(scope="module", autouse=True)
def plugin():
  sys.path.insert(0, FIXTURES)
  load_plugins(["card_plugin"])
  yield
  sys.path.remove(FIXTURES)


@pytest.fixture(scope="module")
def baselines(tmp_path_factory):
  """One baselines folder for every card of this module, as cards of one scale share it."""
  return str(tmp_path_factory.mktemp("baselines"))


def card(name="tempered_softmax", scale="smoke", **fields):
  """configs/report_card.py's config of a card of ``name`` at ``scale``; ``options`` among
  ``fields`` go to the attention section, the rest are top-level fields."""
  c = card_configs.get_config()
  c.attention.name, c.scale = name, scale
  c.attention.options.update(fields.pop("options", {}))
  c.update(fields)
  return c


def test_the_config_names_the_field_and_value():
  assert rc.validate_config(card(options={"temperature": 2.0})) == SPEC
  for config, message in [
      (card_configs.get_config(), "config.attention.name='': normalization must be one of"),
      (card("nope"), "config.attention.name='nope'"),
      (card(options={"temperature": -1.0}), "config.attention.options={'temperature': -1.0}: "
                                              "normalization 'tempered_softmax': option "
                                              "temperature must be a number > 0, got -1.0"),
      (card(options={"temp": 1.0}), "config.attention.options={'temp': 1.0}: normalization "
                                      "'tempered_softmax' has no option 'temp'"),
      (card(scale="huge"), "config.scale='huge': choose from ('smoke', 'cpu', 'paper')"),
      (card(baselines_dir=None), "config.baselines_dir=None: must be a folder"),
      (card(normalization="dnas"), "config.normalization='dnas': no such field")]:
    with pytest.raises(ValueError, match=re.escape(message)):
      rc.validate_config(config)


def test_several_hosts_are_refused_before_the_workdir(tmp_path, monkeypatch):
  monkeypatch.setattr(rc.jax, "process_count", lambda: 2)
  with pytest.raises(ValueError, match="a report card runs on one host, not 2"):
    rc.run(card(options={"temperature": 2.0}), str(tmp_path / "card"))
  assert not (tmp_path / "card").exists()


@pytest.mark.parametrize("scale", tuple(rc.SCALES))
def test_every_sweep_of_every_scale_validates(scale):
  for task in rc.CARD_TASKS:
    card = rc.sweep_config(task, scale, (rc.CARD_ARCH,), SPEC)
    config_lib.validate(card)
    config_lib.validate(rc.sweep_config(task, scale, rc.BASELINE_ARCHS))
    assert card.attention.name == "tempered_softmax"
    assert card.attention.options.temperature == 2.0
    if task == "mode":
      assert card.task.vocab_size == 2 * card.task.seq_len  # S = 2N
  assert len(rc.SCALES[scale].learning_rates) >= 2
  assert rc.SCALES["cpu"].num_seeds == rc.SCALES["paper"].num_seeds == 5


def test_paper_scale_is_the_nap_papers():
  s = rc.SCALES["paper"]
  assert (s.seq_len, s.d_model, s.num_heads, s.num_layers, s.batch_size, s.num_steps) == \
      (128, 128, 4, 2, 32, 3200)
  assert s.learning_rates == config_lib.PAPER_LEARNING_RATES
  assert s.cost_lengths == (128, 1024, 4096)


def test_default_baselines_dir_is_shared_beside_the_card(tmp_path):
  assert rc.default_baselines_dir(str(tmp_path / "cards" / "mine"), "cpu") == \
      str(tmp_path / "cards" / "baselines" / "cpu")


def test_refuses_a_workdir_of_another_card_before_training(tmp_path, monkeypatch):
  workdir = str(tmp_path / "card")
  open_workdir(workdir, rc.card_config(SPEC, "smoke"), rc.KIND)
  unlock_workdir(workdir)  # as the card's run does when it ends
  monkeypatch.setattr(rc, "run_sweep", lambda *a, **k: pytest.fail("trained"))
  with pytest.raises(WorkdirError, match="normalization was \"tempered_softmax\", now \"dnas\""):
    rc.run(card("dnas"), workdir)
  with pytest.raises(WorkdirError, match="scale was \"smoke\", now \"cpu\""):
    rc.run(card(scale="cpu", options={"temperature": 2.0}), workdir)
  with pytest.raises(WorkdirError, match="options.temperature"):
    rc.run(card(options={"temperature": 3.0}), workdir)
  assert os.path.exists(os.path.join(workdir, "versions.json"))
  with pytest.raises(ValueError, match="config.scale='huge'"):
    rc.run(card(scale="huge"), str(tmp_path / "never"))
  assert not os.path.exists(tmp_path / "never")


class Trains(Exception):
  """Raised in place of a card's first sweep: the workdir was accepted."""


@pytest.mark.parametrize("name", ["dnas", "sinkhorn"])
def test_a_committed_card_is_this_config_s(tmp_path, name, monkeypatch):
  """Rerunning a committed card with today's config takes its workdir as this card's (a copy;
  stopped where it would start training)."""
  workdir = str(tmp_path / name)
  shutil.copytree(os.path.join(ROOT, "results", "report_cards", name), workdir)
  def trains(*args, **kwargs):
    raise Trains
  monkeypatch.setattr(rc, "run_sweep", trains)
  with pytest.raises(Trains):
    rc.run(card(name, "cpu", baselines_dir=str(tmp_path / "baselines")), workdir)
  with pytest.raises(WorkdirError, match="scale was \"cpu\", now \"smoke\""):
    rc.run(card(name, "smoke"), workdir)


def test_mode_collapse_runs_for_a_plugin():
  counts = rc.mode_collapse_scores(SPEC, (40, 4), steps=2)
  assert set(counts) == {"unbalanced", "balanced"}
  for schemes in counts.values():
    assert set(schemes) == {"card", "softmax", "dnas"}
    assert all(len(c) == 3 and all(k >= 1 for k in c) for c in schemes.values())


def test_cost_against_softmax():
  rows = rc.cost_scores(SPEC, (16,), 1)
  # no fast path: the quadratic path only, forward and forward + backward
  assert {(r["path"], r["mode"]) for r in rows} == {("quadratic", "fwd"), ("quadratic", "fwd+bwd")}
  assert all(r["bytes"] > 0 and r["softmax_bytes"] > 0 and r["seconds"] > 0 for r in rows)
  fast = rc.cost_scores("dnas", (16,), 1)
  assert {r["path"] for r in fast} == {"quadratic", "fast"}


def synthetic_report():
  """A report as rc.run assembles it, with made-up numbers (two seeds)."""
  def arm(acc, learned=True):
    entry = {"learning_rate": 0.01, "train_acc": [acc, acc + 0.1], "val_acc": [acc, acc]}
    entry.update({f"case_acc_{c}": [acc, acc] for c in rc.CASES})
    entry["learned_all"] = [learned, False]
    return entry
  tests = {"softmax": {"train_acc": 0.01, "val_acc": 0.5}, "nap": {"train_acc": 0.5,
                                                                     "val_acc": 0.5}}
  tasks = {task: {"arms": {"card": arm(0.9), "softmax": arm(0.5), "nap": arm(0.85, False)},
                  "tests": tests, "threshold": 0.36, "chance": 0.18} for task in rc.CARD_TASKS}
  del tasks["mode"]["threshold"], tasks["mode"]["chance"]
  attention = {label: {"explained_away": [0.0, 0.1], "below_bound": [0.0, 0.2],
                       "min_sum_times_n": [1.0, 0.0], "unselectable": [0.0, 0.05]}
               for label in rc.ARMS}
  cost = [{"n": 128, "path": "quadratic", "mode": mode, "seconds": 0.002, "bytes": 2 ** 20,
           "softmax_seconds": 0.001, "softmax_bytes": 2 ** 20} for mode in ("fwd", "fwd+bwd")]
  collapse = {pair: {"card": [2, 2], "softmax": [2, 1], "dnas": [2, 2]}
              for pair in ("unbalanced", "balanced")}
  return {"normalization": "x(t=2)", "name": "x", "options": {"t": 2}, "scale": "smoke",
          "sizes": dict(rc.dataclasses.asdict(rc.SCALES["smoke"])), "baselines_dir": "b",
          "tasks": tasks, "attention": attention, "mode_collapse": collapse, "cost": cost,
          "seconds": {"sweeps": {"card/case": 3.0, "baselines/case": None}, "this_call": 5.0}}


def test_verdicts_say_what_the_numbers_show():
  from normattn_jax.reporting import report_card_text as text
  report = synthetic_report()
  lines = text.verdicts(report)
  assert set(lines) == set(DIAGNOSTICS)
  assert lines["case"].startswith("At the smoke scale, x(t=2)'s training accuracy")
  assert "above softmax's" in lines["case"] and "no different from NAP's" in lines["case"]
  assert lines["first_token"].startswith("At the smoke scale, 1/2 of x(t=2)'s seeds learn all "
                                         "three cases (softmax 1/2, NAP 0/2)")
  assert "learn all three" not in lines["mode"]
  assert "fails for x(t=2) in 1 of 2 seeds (10.0% of keys below it)" in lines["explaining_away"]
  assert "leaves 2 cluster(s) (softmax 1, DNAS 2)" in lines["mode_collapse"]
  assert "2.00x softmax's time and 1.00x its memory" in lines["cost"]
  assert "no fast path" in lines["cost"]
  report["verdicts"] = lines
  md = text.markdown(report)
  assert md.count("**Verdict:**") == len(DIAGNOSTICS)
  assert "| card vs softmax | 0.01 | 0.5 |" in md
  assert "| card | 90.0, 100.0 | 90.0, 90.0 | y n |" in md


def _check_report(workdir):
  with open(os.path.join(workdir, "report.json")) as f:
    report = json.load(f)
  assert set(report["verdicts"]) == set(DIAGNOSTICS)
  assert all(line.startswith("At the smoke scale") for line in report["verdicts"].values())
  for task in rc.CARD_TASKS:
    scores = report["tasks"][task]
    assert set(scores["arms"]) == set(rc.ARMS)
    assert all(len(a["train_acc"]) == rc.SCALES["smoke"].num_seeds
               for a in scores["arms"].values())
    assert set(scores["tests"]) == {"softmax", "nap"}
  assert "learned_all" in report["tasks"]["first_token"]["arms"]["card"]
  assert set(report["attention"]) == set(rc.ARMS)
  with open(os.path.join(workdir, "report.md")) as f:
    text = f.read()
  for heading in ("Case task", "First-token task", "Mode task", "Explaining away",
                  "Mode collapse", "Unselectable keys", "## Cost", "Mann-Whitney"):
    assert heading in text
  assert text.count("**Verdict:**") == len(DIAGNOSTICS)
  assert os.path.exists(os.path.join(workdir, "accuracy.png"))
  return report


@pytest.mark.slow
def test_smoke_card_in_process_resumes_without_training(tmp_path, baselines, monkeypatch):
  workdir = str(tmp_path / "tempered")
  config = card(options={"temperature": 2.0}, baselines_dir=baselines, show_progress=False)
  report = rc.run(config, workdir)
  assert report["normalization"] == "tempered_softmax(temperature=2.0)"
  _check_report(workdir)
  assert os.path.exists(os.path.join(baselines, "case", "summary.json"))
  monkeypatch.setattr(rc, "run_sweep", lambda *a, **k: pytest.fail("trained again"))
  start = time.perf_counter()
  assert rc.run(config, workdir) == json.loads(json.dumps(report))
  assert time.perf_counter() - start < 5


@pytest.mark.slow
def test_smoke_card_from_the_command_line(tmp_path, baselines):
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, FIXTURES]), JAX_PLATFORMS="cpu")
  workdir = str(tmp_path / "cli")
  command = [sys.executable, os.path.join(ROOT, "experiments", "report_card.py"),
             "--plugins=card_plugin", "--config.attention.name=tempered_softmax",
             "--config.attention.options.temperature=0.5", f"--workdir={workdir}",
             "--config.scale=smoke", f"--config.baselines_dir={baselines}",
             "--config.show_progress=False"]
  done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
  assert done.returncode == 0, done.stderr[-3000:]
  assert "At the smoke scale" in done.stdout
  _check_report(workdir)
  other = [c.replace("tempered_softmax", "dnas") if c.startswith("--config.attention.name")
           else c for c in command if not c.startswith("--config.attention.options")]
  refused = subprocess.run(other, env=env, capture_output=True, text=True, timeout=300)
  assert refused.returncode == 2
  assert "holds a run of another config" in refused.stderr
