"""The report card: its checks, configs and guard (fast), and whole smoke cards of a plugin
normalisation with an option, in process and from the command line (slow)."""
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import types

import numpy as np
import pytest

from normattn_jax.configs import report_card as card_configs
from normattn_jax.attention.registry import AttentionSpec
from normattn_jax.registry import load_plugins
from normattn_jax.card import diagnostics as diagnostics_lib
from normattn_jax.card import train as rc
from normattn_jax.reporting import drawers
from normattn_jax.sweep import config as config_lib
from normattn_jax.train.checkpoint import WorkdirError, open_workdir, unlock_workdir

from helpers import FIXTURES, REPO as ROOT, subprocess_env

SPEC = None  # the plugin's spec, made by the plugin fixture once it is registered
DIAGNOSTICS = ("case", "first_token", "mode", "explaining_away", "mode_collapse",
               "unselectable", "cost", "length_generalisation", "attention_sinks",
               "massive_activations", "sparsity")


@pytest.fixture(scope="module", autouse=True)
def plugin():
  global SPEC
  sys.path.insert(0, FIXTURES)
  load_plugins(["card_plugin"])
  SPEC = AttentionSpec("tempered_softmax", {"temperature": 2.0})
  yield
  sys.path.remove(FIXTURES)


@pytest.fixture(scope="module")
def baselines(tmp_path_factory):
  """One baselines folder for every card of this module, as cards of one scale share it."""
  return str(tmp_path_factory.mktemp("baselines"))


def card(name="tempered_softmax", scale="smoke", **fields):
  """The report_card config of a card of ``name`` at ``scale``; ``options`` among ``fields`` go
  to the attention section, the rest are top-level fields."""
  c = card_configs.get_config()
  c.attention.name, c.scale = name, scale
  c.attention.options.update(fields.pop("options", {}))
  c.update(fields)
  return c


def on_sweeps(monkeypatch, instead):
  """Call ``instead()`` where the card would run one of its sweeps."""
  run_checked = rc.runs.run_checked
  monkeypatch.setattr(rc.runs, "run_checked", lambda kind, *a, **k: instead()
                      if kind.name == "sweep" else run_checked(kind, *a, **k))


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
      (card(cache_dir=None), "config.cache_dir=None: must be a folder"),
      (card(normalization="dnas"), "config.normalization='dnas': no such field")]:
    with pytest.raises(ValueError, match=re.escape(message)):
      rc.validate_config(config)


def test_several_hosts_are_refused_before_the_workdir(tmp_path, monkeypatch):
  monkeypatch.setattr(rc.jax, "process_count", lambda: 2)
  with pytest.raises(ValueError, match="a report card runs on one host, not 2"):
    rc.run(card(options={"temperature": 2.0}), str(tmp_path / "card"))
  assert not (tmp_path / "card").exists()


@pytest.mark.parametrize("scale", tuple(rc.SCALES))
@pytest.mark.fast_subset(  # the paper scale: the same configs as smoke and cpu, larger
    lambda p: p["scale"] != "paper")
def test_every_sweep_of_every_scale_validates(scale):
  for task in rc.CARD_TASKS:
    card = rc.sweep_config(task, scale, (rc.CARD_ARCH,), SPEC)
    config_lib.validate(card)
    config_lib.validate(rc.sweep_config(task, scale, rc.BASELINE_ARCHS))
    evaluation = rc.sweep_config(task, scale, (rc.CARD_ARCH,), SPEC, 0.01)
    config_lib.validate(evaluation)
    assert card.attention.name == "tempered_softmax"
    assert card.attention.options.temperature == 2.0
    if task == "mode":
      assert card.task.vocab_size == 2 * card.task.seq_len  # S = 2N
    # the evaluation: one rate, its own seeds, which share no model key with the selection's
    assert evaluation.learning_rates == (0.01,)
    assert evaluation.num_seeds == rc.SCALES[scale].evaluation_seeds
    assert (card.seed, evaluation.seed) == (rc.SELECTION_SEED, rc.EVALUATION_SEED)
    assert card.learning_rates == rc.SCALES[scale].learning_rates
  assert len(rc.SCALES[scale].learning_rates) >= 2
  assert rc.SCALES["cpu"].evaluation_seeds == rc.SCALES["paper"].evaluation_seeds == 20


def test_paper_scale_is_the_nap_papers():
  s = rc.SCALES["paper"]
  assert ((s.seq_len, s.d_model, s.num_heads, s.num_layers, s.batch_size, s.num_steps) ==
           (128, 128, 4, 2, 32, 3200))
  assert s.learning_rates == config_lib.PAPER_LEARNING_RATES
  assert s.cost_lengths == (128, 1024, 4096)


def test_default_baselines_dir_is_shared_beside_the_card_per_machine(tmp_path):
  assert (rc.default_baselines_dir(str(tmp_path / "cards" / "mine"), "cpu", "ab12cd34") ==
          str(tmp_path / "cards" / "baselines" / "cpu-ab12cd34"))


def test_baselines_of_another_machine_are_refused_before_the_workdir(tmp_path):
  baselines = tmp_path / "baselines"
  baselines.mkdir()
  other = dict(rc.machine_fingerprint(), cpu_model="Another CPU", cpu_features=["avx2"])
  (baselines / rc.MACHINE).write_text(json.dumps(other))
  with pytest.raises(ValueError, match=r"config.baselines_dir=.*trained on another machine "
                                       r"\(.*Another CPU.*features avx2.*\), not this one"):
    rc.run(card(options={"temperature": 2.0}, baselines_dir=str(baselines)),
           str(tmp_path / "card"))
  assert not (tmp_path / "card").exists()
  assert sorted(os.listdir(baselines)) == [rc.MACHINE]


def test_a_workdir_claims_its_baselines_for_its_machine(tmp_path):
  fingerprint = rc.machine_fingerprint()
  rc.claim_baselines(str(tmp_path / "b"), fingerprint)
  rc.claim_baselines(str(tmp_path / "b"), fingerprint)  # the same machine again: accepted
  with open(tmp_path / "b" / rc.MACHINE) as f:
    assert json.load(f) == fingerprint


def test_refuses_a_workdir_of_another_card_before_training(tmp_path, monkeypatch):
  workdir = str(tmp_path / "card")
  machine = rc.fingerprint_id(rc.machine_fingerprint())
  open_workdir(workdir, rc.card_config(SPEC, "smoke", machine), rc.KIND)
  unlock_workdir(workdir)  # as the card's run does when it ends
  on_sweeps(monkeypatch, lambda: pytest.fail("trained"))
  with pytest.raises(WorkdirError, match="normalization was \"tempered_softmax\", now \"dnas\""):
    rc.run(card("dnas"), workdir)
  with pytest.raises(WorkdirError, match="scale was \"smoke\", now \"cpu\""):
    rc.run(card(scale="cpu", options={"temperature": 2.0}), workdir)
  with pytest.raises(WorkdirError, match="options.temperature"):
    rc.run(card(options={"temperature": 3.0}), workdir)
  # the same card on another machine: its seeds would mix two machines' rounding
  monkeypatch.setattr(rc, "machine_fingerprint", lambda: {"backend": "gpu", "device_kind": "H100",
                                                          "device_count": 1, "jax": "x",
                                                          "jaxlib": "x", "process_count": 1})
  with pytest.raises(WorkdirError, match=f"machine was \"{machine}\""):
    rc.run(card(options={"temperature": 2.0}, baselines_dir=str(tmp_path / "b")), workdir)
  assert os.path.exists(os.path.join(workdir, "versions.json"))
  with pytest.raises(ValueError, match="config.scale='huge'"):
    rc.run(card(scale="huge"), str(tmp_path / "never"))
  assert not os.path.exists(tmp_path / "never")


def test_a_finished_card_reads_back_read_only_and_a_damaged_report_is_named(tmp_path,
                                                                          monkeypatch):
  """A finished card (its summary.json written) returns its report without training or
  locking (a read-only folder); a damaged or missing report.json is named with the way out."""
  from normattn_jax.train import checkpoint

  workdir = tmp_path / "card"
  machine = rc.fingerprint_id(rc.machine_fingerprint())
  open_workdir(str(workdir), rc.card_config(SPEC, "smoke", machine), rc.KIND)
  unlock_workdir(str(workdir))
  (workdir / "summary.json").write_text(json.dumps({"report": "report.json"}))
  (workdir / "report.json").write_text(json.dumps({"protocol": rc.PROTOCOL, "name": "x"}))
  on_sweeps(monkeypatch, lambda: pytest.fail("trained"))
  def read_only(path):
    raise OSError(30, "Read-only file system", path)
  monkeypatch.setattr(checkpoint, "lock_workdir", read_only)
  config = card(options={"temperature": 2.0}, baselines_dir=str(tmp_path / "baselines"))
  assert rc.run(config, str(workdir))["name"] == "x"
  (workdir / "report.json").write_text('{"protocol": 2, "na')
  with pytest.raises(WorkdirError, match=re.escape(str(workdir / "report.json")) +
                     ": the finished card's report cannot be read .* remove .*summary.json"):
    rc.run(config, str(workdir))
  (workdir / "report.json").unlink()
  with pytest.raises(WorkdirError, match="report cannot be read"):
    rc.run(config, str(workdir))


def test_a_plugin_whose_weights_fail_is_refused_before_anything_is_written(tmp_path):
  from normattn_jax.attention import registry

  def broken(logits, mask=None):
    raise RuntimeError("my weights are broken")
  norm = registry.register(registry.Normalization("broken_plugin", broken))
  try:
    with pytest.raises(ValueError, match="config.attention.name='broken_plugin': its weights fail "
                                         "on a .* probe of random logits: RuntimeError: my "
                                         "weights are broken"):
      rc.run(card("broken_plugin", baselines_dir=str(tmp_path / "b")), str(tmp_path / "card"))
  finally:
    registry.unregister(norm.name)
  assert not os.path.exists(tmp_path / "card") and not os.path.exists(tmp_path / "b")


class Trains(Exception):
  """Raised in place of a card's first sweep: the workdir was accepted."""


def committed_cards() -> list:
  cards = []
  for name in sorted(os.listdir(os.path.join(ROOT, "results", "report_cards"))):
    path = os.path.join(ROOT, "results", "report_cards", name, "report.json")
    if os.path.exists(path):
      with open(path) as f:
        if json.load(f).get("protocol") == rc.PROTOCOL:
          cards.append(name)
  return cards[:2]


@pytest.mark.parametrize("name", committed_cards())
# the committed cards ran as the machine's 2 CPU devices, this process as its own count
@pytest.mark.filterwarnings("ignore::normattn_jax.train.checkpoint.DeviceCountWarning")
def test_a_committed_card_is_this_config_s(tmp_path, name, monkeypatch):
  """Rerunning a committed card with today's config, on its machine, takes its workdir as this
  card's (a copy; stopped where it would start training)."""
  workdir = str(tmp_path / name)
  shutil.copytree(os.path.join(ROOT, "results", "report_cards", name), workdir)
  with open(os.path.join(workdir, "report.json")) as f:
    report = json.load(f)
  monkeypatch.setattr(rc, "machine_fingerprint", lambda: report["machine"])
  def trains():
    raise Trains
  on_sweeps(monkeypatch, trains)
  with pytest.raises(Trains):
    rc.run(card(report["name"], "cpu", baselines_dir=str(tmp_path / "baselines"),
                options=report["options"]), workdir)
  with pytest.raises(WorkdirError, match="scale was \"cpu\", now \"smoke\""):
    rc.run(card(report["name"], "smoke", options=report["options"]), workdir)


@pytest.mark.parametrize("name", [n for n in committed_cards()
                                  if os.path.isdir(os.path.join(ROOT, "results", "report_cards",
                                                                n, rc.RECORD))])
def test_a_committed_cards_lm_numbers_come_from_its_committed_files(name):
  """The board's LM numbers are recomputed from the committed per-seed LM results alone."""
  folder = os.path.join(ROOT, "results", "report_cards", name)
  with open(os.path.join(folder, "report.json")) as f:
    report = json.load(f)
  found = rc.diagnostics_from_record(report, os.path.join(folder, rc.RECORD),
                                     os.path.join(ROOT, "results", "report_cards", "baselines"))
  for diagnostic, entry in report["diagnostics"].items():
    assert found[diagnostic].get("values") == entry.get("values"), diagnostic


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


SEEDS = 8  # evaluation seeds of the synthetic report: enough for a difference to be called


def lm_result(loss, share, ratio, zeros):
  """An LM run's result as ``card_lm.run_lm`` stores it (made-up numbers; the last seed
  diverged)."""
  def seed(i):
    return {"diverged": False, "final_train_loss": loss + 0.01 * i,
            "loss_by_band": {str(m): [loss + 0.1 * b + 0.01 * i for b in range(m.bit_length())]
                             for m in (1, 2, 4, 8)},
            "first_token_share": [[share, share / 2], [share, 0.0]],
            "massive_ratio": [ratio, 2 * ratio + i], "zero_share": zeros + 0.001 * i}
  return {"seeds": [seed(i) for i in range(SEEDS - 1)]
          + [{"diverged": True, "final_train_loss": None}]}


def synthetic_report(trained_by=("x(t=2)",), name="x", scale="smoke", references=None):
  """A report as rc.run assembles it, with made-up numbers."""
  def arm(acc, learned=True):
    entry = {"learning_rate": 0.01, "train_acc": [acc + 0.01 * i for i in range(SEEDS)],
             "val_acc": [acc + 0.005 * i for i in range(SEEDS)],
             "selection": {"learning_rates": [0.03, 0.01, 0.003],
                           "train_acc_means": [0.2, acc, 0.1], "extended": [],
                           "cap": [0.0003, 0.27], "outcome": "interior"}}
    entry.update({f"case_acc_{c}": [acc] * SEEDS for c in rc.CASES})
    entry["learned_all"] = [learned, False] + [learned] * (SEEDS - 2)
    return entry
  tasks = {task: {"arms": {"card": arm(0.9), "softmax": arm(0.5), "nap": arm(0.85, False)},
                  "threshold": 0.36, "chance": 0.18} for task in rc.CARD_TASKS}
  del tasks["mode"]["threshold"], tasks["mode"]["chance"]
  attention = {label: {"explained_away": [0.0, 0.1] + [0.0] * (SEEDS - 2),
                       "below_bound": [0.0, 0.2] + [0.0] * (SEEDS - 2),
                       "below_own_bound": [None] * SEEDS,
                       "min_sum_times_n": [1.0, 0.0] + [1.0] * (SEEDS - 2),
                       "unselectable": [0.0, 0.05] + [0.0] * (SEEDS - 2)}
               for label in rc.ARMS}
  cost = [{"n": 128, "path": "quadratic", "mode": mode, "seconds": 0.002, "bytes": 2 ** 20,
           "softmax_seconds": 0.001, "softmax_bytes": 2 ** 20,
           "softmax_quadratic_seconds": 0.001, "softmax_quadratic_bytes": 2 ** 20}
          for mode in ("fwd", "fwd+bwd")]
  collapse = {"unbalanced": {"card": [2, 2, 0], "softmax": [2, 2, 1], "dnas": [2, 2, 2]},
              "balanced": {"card": [2, 1, 1], "softmax": [2, 2, 2], "dnas": [2, 2, 2]}}
  sizes = rc.dataclasses.replace(rc.SCALES[scale], evaluation_seeds=SEEDS)
  lms = {"card": lm_result(2.0, 0.1, 10.0, 0.3), "softmax": lm_result(2.2, 0.6, 100.0, 0.0),
         "nap": lm_result(2.1, 0.2, 20.0, 0.0)}
  context = rc.diagnostics_lib.CardContext(SPEC, scale, sizes, lms, references)
  report = {"protocol": rc.PROTOCOL, "normalization": "x(t=2)" if name == "x" else name,
            "name": name, "options": {"t": 2} if name == "x" else {},
            "scale": scale, "sizes": dict(rc.dataclasses.asdict(sizes)),
            "machine": rc.machine_fingerprint(), "twin": None,
            "baselines": {"dir": "b", "trained_by": {k: t for k, t in zip(
                ("case/select", "lm_nap"), trained_by * 2)}},
            "tasks": tasks, "attention": attention, "mode_collapse": collapse, "cost": cost,
            "diagnostics": rc.run_diagnostics(context), "controls": rc.run_controls(context),
            "lm_references": references,
            "seconds": {"sweeps": {"card/case/select": 3.0, "baselines/case/select": None},
                        "analyses": 2.0,
                        "this_call": 5.0}}
  report["measures"] = rc.measures(report)
  report = rc.card_verdicts.prepare(report)
  report["comparisons"], report["family"] = rc.card_verdicts.judge_card(report)
  return report


def test_the_lm_diagnostics_read_each_seed_and_skip_a_diverged_one():
  report = synthetic_report()
  d = report["diagnostics"]
  assert (d["sparsity"]["values"]["card"]["zero_share"] ==
          pytest.approx([0.3 + 0.001 * i for i in range(SEEDS - 1)] + [None]))
  assert (d["attention_sinks"]["values"]["softmax"]["first_token_share"][0] ==
          pytest.approx(np.mean([0.6, 0.3, 0.6, 0.0])))
  assert d["attention_sinks"]["values"]["softmax"]["first_token_share_max"][0] == 0.6
  assert d["massive_activations"]["values"]["nap"]["massive_ratio"][:3] == [40.0, 41.0, 42.0]
  # the newest band of an 8L window is its last (4L..8L)
  assert d["length_generalisation"]["values"]["card"]["loss_8x"][0] == pytest.approx(2.3)
  assert d["length_generalisation"]["values"]["card"]["loss_1x"][0] == pytest.approx(2.0)
  assert report["comparisons"]["sparsity.zero_share"]["softmax"]["n"] == [SEEDS - 1] * 2


def test_a_diagnostic_that_raises_is_reported_and_the_rest_completes():
  def broken(context):
    raise RuntimeError("no sinks here")
  diagnostics_lib.register(diagnostics_lib.Diagnostic(
      "broken_probe", "A broken probe", "nothing", (diagnostics_lib.Quantity("x", "x"),), broken))
  try:
    report = synthetic_report()
  finally:
    diagnostics_lib.DIAGNOSTICS.unregister("broken_probe")
  entry = report["diagnostics"]["broken_probe"]
  assert "Traceback" in entry["error"] and "RuntimeError: no sinks here" in entry["error"]
  assert "values" in report["diagnostics"]["sparsity"]
  assert not any(key.startswith("broken_probe") for key in report["measures"])
  from normattn_jax.card import text
  report["verdicts"] = text.verdicts(report)
  assert report["verdicts"]["broken_probe"] == ("At the smoke scale, the diagnostic "
                                                "'broken_probe' could not be measured: "
                                                "RuntimeError: no sinks here")
  md = text.markdown(report)
  assert "The diagnostic `broken_probe` raised" in md and "RuntimeError: no sinks here" in md


def test_a_diagnostic_missing_an_arm_is_named():
  d = diagnostics_lib.Diagnostic("partial", "t", "c", (diagnostics_lib.Quantity("x", "x"),),
                                 lambda c: {"card": {"x": [1.0]}})
  with pytest.raises(ValueError, match="diagnostic 'partial' gave no values for the arm "
                                       "'softmax'"):
    diagnostics_lib.checked_values(d, d.measure(None))


def test_verdicts_say_what_the_numbers_show():
  from normattn_jax.card import text
  report = synthetic_report(scale="cpu")
  lines = text.verdicts(report)
  assert set(lines) == set(DIAGNOSTICS)
  assert lines["case"].startswith(
      "At the cpu scale, on 8 evaluation seeds at its selected learning rate 0.01 (interior), "
      "x(t=2)'s training accuracy averages 93.5%: above softmax's 53.5% (shift +40%, 95% CI "
      "+37% to +43%; q = ")
  assert ("7/8 of x(t=2)'s seeds learn all three cases (softmax 7/8, NAP 0/8; the share not "
          "resolved against softmax's 87.5% with 8 seeds") in lines["case"]
  assert lines["first_token"].startswith("At the cpu scale, on 8 evaluation seeds at its "
                                         "selected learning rate 0.01 (interior), 7/8 of "
                                         "x(t=2)'s seeds learn all three cases")
  assert "learn all three" not in lines["mode"]
  assert "not distinguishable" not in " ".join(lines.values())
  assert ("equivalent to softmax's 0.6% within ±0.5%" in lines["unselectable"]
          and "the column does not rank: Kruskal-Wallis" in lines["unselectable"])
  assert ("fails in 1 of 8 seeds (2.5% of keys below it) for x(t=2) (not guaranteed"
          in lines["explaining_away"])
  # both pairs, and the words for what the points do
  assert lines["mode_collapse"] == (
      "At the cpu scale, over 2 attention updates of the two-cluster toy at initial "
      "parameters: unbalanced pair: x(t=2) scatters (0 group(s) of >= 2% of the points left of "
      "2 clusters) (softmax collapses to one cluster by update 2, DNAS keeps 2); balanced pair: "
      "x(t=2) collapses to one cluster by update 1 (softmax keeps 2, DNAS keeps 2).")
  # the time over softmax's quadratic path, and over softmax's same path beside it
  assert ("quadratic path 2.00x softmax's quadratic time and 1.00x its memory (2.00x the time "
          "of softmax on the same path)" in lines["cost"])
  assert "no fast path" in lines["cost"]
  # the losses past L are read through their growth; without references nothing of context
  assert "loss at 8L" not in lines["length_generalisation"]
  assert "loss growth from 1L to 8L (nats) averages 0.3: not read" in lines["length_generalisation"]
  # a plugin's exact zeros: the card cannot tell construction from underflow
  assert "cannot tell" in lines["sparsity"]
  report["verdicts"] = lines
  md = text.markdown(report)
  assert md.count("**Verdict:**") == len(DIAGNOSTICS)
  assert ("| card | 90.0, 91.0, 92.0, 93.0, 94.0, 95.0, 96.0, 97.0 | 90.0, 90.5, 91.0, 91.5, "
          "92.0, 92.5, 93.0, 93.5 | y n y y y y y y |" in md)
  assert "**Provisional words**: judged on this card alone" in md
  assert "largest / median \\|activation\\| (worst layer)" in md  # escaped in its tables
  assert "baselines" in md and "trained by this card's run" in md


def test_a_smoke_card_says_it_gives_no_verdicts_and_the_smallest_q():
  """Four seeds per arm cannot carry a word ("42.9% exact zeros: not distinguishable from
  softmax's 0.0%" read as a bug): the smoke card says it gives none, and how small a q its
  seeds can reach."""
  from normattn_jax.card import text
  report = synthetic_report()
  lines = text.verdicts(report)
  assert all("[No verdict: with 8 seeds per arm the smallest attainable p is" in line
             for key, line in lines.items() if key not in ("mode_collapse", "cost"))
  assert not any(word in line for line in lines.values()
                 for word in (": above", ": below", "equivalent to"))
  report["verdicts"] = lines
  md = text.markdown(report)
  assert "**This scale gives no verdicts**" in md and "| no verdict |" in md
  assert not rc.SCALES["smoke"].verdicts and rc.SCALES["cpu"].verdicts
  p, q = text.smallest_q(dict(report, sizes=dict(report["sizes"], evaluation_seeds=4)))
  assert p == pytest.approx(2 / 70) and q > 0.05


def test_hnas_bound_is_u_over_n_and_checked_as_such():
  """HNAS was listed as meeting Theorem 2's 1/N by construction; its construction gives u/N,
  u its learned DNAS share per head (its softmax share may give a key nothing)."""
  from normattn_jax.card import text
  params = {"block_0": {"attention": {"hybrid_weight": np.array([[[0.5]], [[1.2]]])}},
            "block_1": {"attention": {"hybrid_weight": np.array([[[0.25]], [[-0.1]]])}}}
  bounds = rc.own_bound("hnas", params, 8, 2)
  np.testing.assert_allclose(bounds, [[0.5 / 8, 1.0 / 8], [0.25 / 8, 0.0]])
  assert rc.own_bound("dnas", {}, 8, 2) == [[1 / 8]] * 2 and rc.own_bound("ssmax", {}, 8, 2) is None
  assert rc.BOUND_BY_CONSTRUCTION == {"dnas": "1/N", "sinkhorn": "1/N", "hnas": "u/N"}
  report = synthetic_report(scale="cpu")
  report.update(name="hnas", normalization="hnas")
  report["attention"]["card"]["below_own_bound"] = [0.0] * SEEDS
  line = text.bound_check(report)
  assert "which its construction does not guarantee" in line
  assert "its own bound (every key's total weight >= u/N" in line and "holds in every" in line
  report.update(name="dnas", normalization="dnas")
  assert "a check of the code: it holds by construction" in text.bound_check(report)


def test_stick_breakings_zeros_are_underflow_not_sparsity():
  """Its weights are positive in exact arithmetic: a float32 zero is an exponential that
  underflowed, which float64 keeps."""
  import jax

  from normattn_jax.attention import weights as weights_lib
  from normattn_jax.card import text
  logits = 30.0 * jax.random.normal(jax.random.key(0), (4, 64, 64))
  mask = np.tril(np.ones((64, 64), bool))
  w32 = np.asarray(weights_lib.stickbreaking_weights(logits, mask))
  # the same weights in float64: log w_j = log sigmoid(l_j) + sum_{valid k > j} log sigmoid(-l_k)
  x = np.asarray(logits, np.float64)
  log_sigmoid = lambda z: -np.logaddexp(0.0, -z)
  later = np.where(mask, log_sigmoid(-x), 0.0)[..., ::-1].cumsum(-1)[..., ::-1] - np.where(
      mask, log_sigmoid(-x), 0.0)
  log_w64 = log_sigmoid(x) + later
  valid = np.broadcast_to(mask, w32.shape)
  zero = (w32 == 0) & valid
  assert zero.mean() > 0.01  # exact zeros in float32 ...
  assert np.all(np.isfinite(log_w64[zero]))  # ... of weights positive in exact arithmetic
  assert np.all(log_w64[zero] < np.log(np.finfo(np.float32).tiny))  # below float32's range
  report = synthetic_report(scale="cpu", name="stickbreaking")
  assert "float32 underflow" in text.verdicts(report)["sparsity"]
  assert "not sparsity" in text.verdicts(report)["sparsity"]
  assert "underflow" not in text.verdicts(synthetic_report(scale="cpu",
                                                           name="sparsemax"))["sparsity"]


def test_claim_lines_hold_only_where_the_controls_and_softmax_show_the_phenomenon():
  """The massive-activation claim said "thousands of times" of softmax at 6.6, where Gaussian
  values of the probe's size give 6.1: the card now says what its own controls show."""
  from normattn_jax.card import text
  massive = rc.diagnostics_lib.get("massive_activations")
  assert "report" in massive.claim and "Sun et al." in massive.claim
  spread = lambda centre: [centre * (1 + 0.01 * i) for i in range(8)]
  refs = {"minilm": {"what": "8 windows", "first_token_share": spread(0.22),
                     "first_token_share_max": spread(0.5), "massive_ratio": spread(500.0)},
          "gaussian": {"shape": [2, 4, 16, 8], "massive_ratio": spread(250.0)},
          "random_init": {"seeds": [{"massive_ratio": [5.0 + i], "first_token_share": [[0.06]],
                                     "zero_share": 0.0, "loss_by_band": {
                                         str(m): [4.0] * m.bit_length() for m in (1, 2, 4, 8)}}
                                    for i in range(8)]},
          "uniform": {"first_token_share": 0.0594},
          "random_logits": {"shape": [1], "sparsemax_zero_share": spread(0.6),
                            "softmax_zero_share": [0.0] * 8},
          "ngram": {"windows": 2, "3": {"loss_by_band": {"1": [2.5]}, "window_band_losses": {
              str(m): [[2.5] * m.bit_length()] * 2 for m in (2, 4, 8)}},
                    "2": {"loss_by_band": {"1": [2.9]}}},
          "uniform_past_L": {"loss_by_band": {str(m): [2.5, 4.5] for m in (2, 4, 8)}}}
  report = synthetic_report(scale="cpu", references=refs)
  line = text.verdicts(report)["massive_activations"]
  # the controls separate (MiniLM's 500 above Gaussian values' 250 and the initial LM's 8),
  # but softmax's 200-206 lies below the Gaussian control: no massive activations here
  assert report["control_checks"]["massive_activations.massive_ratio"]["separate"]
  assert "this scale does not show massive activations in softmax" in line
  assert "the claim cannot be checked here" in line
  sinks = text.verdicts(report)["attention_sinks"]
  assert "softmax shows an attention sink" in sinks  # 37.5% against uniform's 5.9%
  assert "does not beat a trigram model" not in sinks and "beats a trigram model" in sinks


def test_the_grid_is_extended_past_an_edge_until_interior_or_capped():
  """13 of 39 picks sat on an edge of a 3-rate grid, NAP's on the top edge in every task with
  its means still rising: now an edge pick extends the grid by 3x until interior or capped."""
  grid = (0.027, 0.0081, 0.00243)
  asked = []
  def rising(rate):
    asked.append(rate)
    return rate
  found = rc.extend_selection(grid, rising)
  assert found["extended"] == [0.081, 0.243] and found["selected"] == 0.243
  assert found["outcome"] == "capped at the top" and found["cap"] == [0.00027, 0.243]
  assert asked == [*grid, 0.081, 0.243]
  peak = rc.extend_selection(grid, lambda rate: -abs(np.log(rate / 0.081)))
  assert peak["extended"] == [0.081, 0.243] and peak["selected"] == 0.081
  assert peak["outcome"] == "interior"
  low = rc.extend_selection(grid, lambda rate: -rate)
  assert low["extended"] == [0.00081, 0.00027] and low["outcome"] == "capped at the bottom"
  assert rc.extend_selection(grid, lambda rate: None)["outcome"] == "every rate failed"
  inside = rc.extend_selection(grid, lambda rate: -abs(rate - 0.0081))
  assert inside["extended"] == [] and inside["outcome"] == "interior"
  from normattn_jax.card import text
  assert text.selection_outcome(found, 0.243) == ("grid extended to 0.081, 0.243; capped at the "
                                                  "top (cap 0.243)")
  assert text.selection_outcome({"learning_rates": list(grid)}, 0.027) == (
      "on an edge of the grid, not extended")


def test_a_selection_reads_its_sweep_once_and_trains_only_its_extension(monkeypatch):
  """Each rate's score comes from the selection sweep read once (an extension rate's from its
  own sweep, trained first); the card's numbers reuse the record rather than selecting again."""
  class Sweep:  # a finished sweep: every seed's accuracy is its learning rate
    def __init__(self, rates):
      self.learning_rates = rates
      self.config = types.SimpleNamespace(learning_rates=rates)

    def seeds(self, arch, metric, lr):
      return np.full((2, 3), lr)

  grid, read, trained = [0.027, 0.0081, 0.00243], [], []
  def sweep_at(folder):
    read.append(os.path.basename(folder))
    rates = {"select": grid, "evaluate": [0.243]}
    return Sweep(rates.get(folder) or [float(folder.rpartition("_")[2])])
  monkeypatch.setattr(rc.seeds_lib.OurSweep, "read", staticmethod(sweep_at))
  arm = rc.Arm("card", "select", "evaluate", "nap", "extend")
  record = rc.best_learning_rate(arm, trained.append)
  assert record["extended"] == [0.081, 0.243] and trained == [0.081, 0.243]
  assert read == ["select", "lr_0.081", "lr_0.243"]
  read.clear()
  scores = rc.task_scores("mode", "smoke", {"card": arm}, {"card": record})
  assert read == ["evaluate"] and scores["arms"]["card"]["learning_rate"] == 0.243
  assert scores["arms"]["card"]["selection"]["train_acc_means"] == pytest.approx(
      grid + [0.081, 0.243])


def test_the_lms_select_their_rate_by_the_training_loss():
  seeds = lambda losses: {"seeds": [{"final_train_loss": x, "diverged": x is None}
                                    for x in losses]}
  assert rc.lm_score(seeds([2.0, 2.2, None])) == pytest.approx(-2.1)
  assert rc.lm_score(seeds([None, None])) is None
  plan = rc.SCALES["cpu"].lm_plan()
  assert plan.learning_rates == (0.009, 0.003, 0.001) and plan.evaluation_seeds == 20
  assert rc.LM_PLANS["gpu"].sizes.train_len == 256


def test_the_header_says_who_trained_the_baselines():
  from normattn_jax.card import text
  report = synthetic_report(trained_by=("dnas", "sink"))
  report["verdicts"] = text.verdicts(report)
  md = text.markdown(report)
  assert "found finished, trained by the runs of the dnas card, the sink card" in md
  assert "trained by this card's run" not in md


def test_the_card_records_its_seeds_and_small_files(tmp_path):
  workdir, baselines = tmp_path / "card", tmp_path / "baselines"
  for folder, files in ((workdir / "case" / "select", ("config.json", "summary.json",
                                                       "metrics.npz")),
                        (workdir / "lm" / "evaluate", ("config.json", "lm.json")),
                        (workdir / "lm" / "evaluate" / "checkpoints" / "4", ("config.json",)),
                        (baselines / "case" / "evaluate_nap", ("config.json", "summary.json")),
                        (baselines, ("machine.json", "provenance.json",
                                     "lm_references-ab.json"))):
    folder.mkdir(parents=True, exist_ok=True)
    for name in files:
      (folder / name).write_text("{}")
  report = {"baselines": {"dir": "../baselines"},
            "sizes": {"selection_seeds": 2, "evaluation_seeds": 3}}
  rc.write_record(str(workdir), report)
  record = workdir / rc.RECORD
  assert sorted(p.relative_to(record).as_posix() for p in record.rglob("*") if p.is_file()) == [
      "case/select/config.json", "case/select/summary.json", "lm/evaluate/config.json",
      "lm/evaluate/lm.json", "seeds.json"]
  seeds = json.loads((record / "seeds.json").read_text())
  assert seeds["evaluation"]["seed"] == rc.EVALUATION_SEED and len(seeds["evaluation"]["keys"]) == 3
  assert seeds["selection"]["keys"][1] == [int(x) for x in rc.grid_lib.model_keys(0, [1])[0]]
  assert "fold_in" in seeds["derivation"]
  assert (baselines / rc.RECORD / "lm_references-ab.json").exists()
  assert (baselines / rc.RECORD / "case" / "evaluate_nap" / "summary.json").exists()


def test_the_figure_carries_intervals_its_scale_and_machine(tmp_path, monkeypatch):
  from normattn_jax.reporting import figures
  from normattn_jax.reporting import provenance
  drawn = {}
  monkeypatch.setattr(figures.provenance_lib, "save",
                      lambda fig, path, where, dpi=120: drawn.update(fig=fig, where=where))
  report = synthetic_report(scale="cpu")
  figures.card_accuracy(report, str(tmp_path / "accuracy.png"))
  fig = drawn["fig"]
  assert "cpu scale" in fig._suptitle.get_text()
  assert drawn["where"].machine == provenance.machine_of_versions(report["machine"])
  for ax in fig.axes:
    bars = [c for c in ax.containers if type(c).__name__ == "ErrorbarContainer"]
    assert len(bars) == 3  # an interval per arm
    assert [t.get_text() for t in ax.get_xticklabels()] == ["x", "softmax\n(baseline)",
                                                            "NAP\n(baseline)"]
  median, low, high = figures.median_interval([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9])
  assert low <= median <= high and median == pytest.approx(0.5)


@pytest.mark.parametrize("counts, outcome", [
    ([2, 2, 2, 2, 1], "collapses to one cluster by update 4"), ([2, 2, 2], "keeps 2"),
    ([2, 2, 0, 0, 0], "scatters (0 group(s) of >= 2% of the points left of 2 clusters)"),
    ([2, 0, 2, 12, 6], "scatters (6 group(s) of >= 2% of the points left of 2 clusters)"),
    ([2, 1, 2, 1, 1], "collapses to one cluster by update 3")])
def test_mode_collapse_outcomes(counts, outcome):
  from normattn_jax.card import text
  assert text.collapse_outcome(counts) == outcome


def _check_report(workdir, extra=()):
  with open(os.path.join(workdir, "report.json")) as f:
    report = json.load(f)
  assert set(report["verdicts"]) == set(DIAGNOSTICS + extra)
  assert all(line.startswith("At the smoke scale") for line in report["verdicts"].values())
  for task in rc.CARD_TASKS:
    scores = report["tasks"][task]
    assert set(scores["arms"]) == set(rc.ARMS)
    assert all(len(a["train_acc"]) == rc.SCALES["smoke"].evaluation_seeds
               for a in scores["arms"].values())
  for per in report["comparisons"].values():
    assert set(per) == {"softmax", "nap"}
  assert report["protocol"] == rc.PROTOCOL and report["machine"]
  assert "learned_all" in report["tasks"]["first_token"]["arms"]["card"]
  assert set(report["attention"]) == set(rc.ARMS)
  # every seed key and small file recorded; the LM numbers recomputed from them alone
  record = os.path.join(workdir, rc.RECORD)
  assert os.path.exists(os.path.join(record, "seeds.json"))
  baselines = os.path.normpath(os.path.join(workdir, report["baselines"]["dir"], rc.RECORD))
  found = rc.diagnostics_from_record(report, record, baselines)
  for name, entry in report["diagnostics"].items():
    # measured again by the diagnostics this process registers: a plugin's that failed in the
    # card's process (no values) need not be loaded here
    assert found.get(name, {}).get("values") == entry.get("values"), name
  assert report["family"]["scope"] == "card" and report["controls"]
  assert any(name == "tensorboard" for _, folders, _ in os.walk(workdir) for name in folders)
  with open(os.path.join(workdir, "report.md")) as f:
    text = f.read()
  for heading in ("Case task", "First-token task", "Mode task", "Explaining away",
                  "Mode collapse", "Unselectable keys", "## Cost", "Mann-Whitney",
                  "Length generalisation", "Attention sinks", "Massive activations",
                  "Sparse weights", "Benjamini-Hochberg"):
    assert heading in text
  assert text.count("**Verdict:**") == len(DIAGNOSTICS + extra)
  assert os.path.exists(os.path.join(workdir, "accuracy.png"))
  return report


@pytest.mark.slow
def test_smoke_card_in_process_resumes_without_training(tmp_path, baselines, monkeypatch):
  workdir = str(tmp_path / "tempered")
  config = card(options={"temperature": 2.0}, baselines_dir=baselines, show_progress=False)
  checked, validate = [], rc.SWEEP.validate
  monkeypatch.setattr(rc, "SWEEP", dataclasses.replace(
      rc.SWEEP, validate=lambda c: checked.append(c) or validate(c)))
  report = rc.run(config, workdir)
  assert len(checked) == 2 * len(rc.CARD_TASKS)  # at the card's entry, none on the way down
  assert report["normalization"] == "tempered_softmax(temperature=2.0)"
  drawers.draw(rc.KIND, workdir, report)  # as the command line does
  _check_report(workdir)
  assert os.path.exists(os.path.join(baselines, "case", "select", "summary.json"))
  assert os.path.exists(os.path.join(baselines, "lm_nap", "evaluate", "lm.json"))
  with open(os.path.join(baselines, rc.PROVENANCE)) as f:
    assert {e["trained_by"] for e in json.load(f).values()} == {report["normalization"]}
  on_sweeps(monkeypatch, lambda: pytest.fail("trained again"))
  start = time.perf_counter()
  assert rc.run(config, workdir) == json.loads(json.dumps(report))
  assert time.perf_counter() - start < 5


@pytest.mark.slow
def test_smoke_card_from_the_command_line(tmp_path):
  """One command makes a plugin's card, its baselines trained beside it for this machine; killed
  outright once its first sweep has finished, the same command resumes it to the end."""
  env = subprocess_env(FIXTURES)
  workdir = str(tmp_path / "cli")
  command = [sys.executable, "-m", "normattn_jax.cli.card",
             "--plugins=card_plugin,broken_diagnostic",
             "--config.attention.name=tempered_softmax",
             "--config.attention.options.temperature=0.5", f"--workdir={workdir}",
             "--config.scale=smoke", "--config.show_progress=False"]
  killed = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
  first = os.path.join(workdir, "case", "select", "summary.json")
  try:
    deadline = time.monotonic() + 1200
    while killed.poll() is None and not os.path.exists(first) and time.monotonic() < deadline:
      time.sleep(0.05)
  finally:
    killed.send_signal(signal.SIGKILL)
    killed.wait()
  assert os.path.exists(first) and not os.path.exists(os.path.join(workdir, "report.json"))
  done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1200)
  assert done.returncode == 0, done.stderr[-3000:]
  assert "At the smoke scale" in done.stdout
  assert "phase 7 of 7" in done.stdout and "baselines: " in done.stdout
  assert "No verdict" in done.stdout
  assert (f"{os.path.join(workdir, 'case', 'select')} holds this config's finished run" in
          done.stdout)
  report = _check_report(workdir, extra=("broken_probe",))
  assert ("RuntimeError: this probe cannot read tempered_softmax(temperature=0.5)" in
          report["diagnostics"]["broken_probe"]["error"])
  machine = rc.fingerprint_id(report["machine"])
  assert os.path.exists(tmp_path / "baselines" / f"smoke-{machine}" / rc.MACHINE)
  other = [c.replace("tempered_softmax", "dnas") if c.startswith("--config.attention.name")
           else c for c in command if not c.startswith("--config.attention.options")]
  refused = subprocess.run(other, env=env, capture_output=True, text=True, timeout=300)
  assert refused.returncode == 2
  assert "holds a run of another config" in refused.stderr


def test_a_normalisation_over_the_queries_has_no_lm_diagnostics():
  """DNAS, HNAS and Sinkhorn have no causal LM: its sections say why, nothing is compared."""
  lms = {"card": None, "softmax": lm_result(2.2, 0.6, 100.0, 0.0),
         "nap": lm_result(2.1, 0.2, 20.0, 0.0)}
  found = rc.run_diagnostics(rc.diagnostics_lib.CardContext(
      AttentionSpec.of("dnas"), "smoke", rc.SCALES["smoke"], lms))
  for name in ("length_generalisation", "attention_sinks", "massive_activations", "sparsity"):
    assert "values" not in found[name]
    assert found[name]["not_applicable"].startswith("dnas normalises each key's weights over "
                                                    "the queries")
  assert rc.AttentionSpec.of("dnas").normalization.normalizes_over_queries
  assert not rc.AttentionSpec.of("ssmax").normalization.normalizes_over_queries
