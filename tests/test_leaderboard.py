"""REPORT_CARDS.md is the committed cards' board, generated from their report.json files: the
columns that separate, the verdicts under the board's false-discovery control and their
stability over two halves of the seeds, each recomputed here from per-seed values."""
import os
import shutil

import numpy as np
import pytest

from normattn_jax.card import stats as card_stats
from normattn_jax.reporting import leaderboard
from normattn_jax.card.train import PROTOCOL

from helpers import REPO, subprocess_env

MACHINE = {"backend": "cpu", "device_kind": "cpu", "device_count": 2, "process_count": 1,
           "jax": "0.10.2", "jaxlib": "0.10.2", "xla_flags": "", "matmul_precision": "None",
           "cpu_model": "Some CPU", "cpu_features": ["avx2"], "cpu_cores": 2}


def test_the_committed_board_is_the_committed_cards():
  with open(os.path.join(REPO, "REPORT_CARDS.md")) as f:
    committed = f.read()
  reports = leaderboard.read_reports(os.path.join(REPO, "results", "report_cards"))
  assert committed == leaderboard.markdown(reports)


def measure(card, softmax, nap, label="m", percent=True):
  return {"label": label, "percent": percent,
          "values": {"card": list(card), "softmax": list(softmax), "nap": list(nap)}}


def report(name, shift, machine=MACHINE, scale="cpu", seeds=20):
  """A card whose "wide" measure is the softmax baseline moved by ``shift`` and whose "flat"
  measure barely moves between cards."""
  rng = np.random.default_rng(0)
  base = rng.normal(0.5, 0.02, seeds)
  nap = rng.normal(0.6, 0.02, seeds)
  card = np.random.default_rng(len(name)).normal(0.5 + shift, 0.02, seeds)
  flat = np.random.default_rng(1).normal(0.5, 0.05, seeds)
  measures = {"task.wide": measure(card, base, nap, "task: wide"),
              "task.flat": measure(flat + 0.001 * shift, flat, flat, "task: flat")}
  cost = [{"mode": "fwd+bwd", "n": 4096, "path": path, "seconds": s, "softmax_seconds": 1.0,
           "softmax_quadratic_seconds": 2.0} for path, s in (("quadratic", 3.0),
                                                             ("fast", 1.0))]
  collapse = {"unbalanced": {"card": [2, 2, 1]}, "balanced": {"card": [2, 0, 0]}}
  return {"protocol": PROTOCOL, "normalization": name, "scale": scale, "machine": machine,
          "sizes": {"seq_len": 16, "d_model": 32, "selection_seeds": 5, "evaluation_seeds": seeds},
          "measures": measures, "diagnostics": {}, "cost": cost, "mode_collapse": collapse,
          "attention": {"card": {"below_bound": [0.0] * 3 + [0.1]}},
          "seconds": {"sweeps": {"baselines/case/select": None, "card/case/select": 60.0,
                                 "card/lm": 120.0},
                      "this_call": 300.0, "analyses": 420.0}}


def test_a_column_ranks_only_where_the_cards_spread_beyond_the_baselines_noise():
  reports = [report("a", 0.0), report("b", 0.2), report("c", -0.1)]
  sep = leaderboard.separation(reports, ["task.wide", "task.flat"])
  assert sep["task.wide"]["ranks"] and not sep["task.flat"]["ranks"]
  values = reports[0]["measures"]["task.wide"]["values"]
  noise = max(abs(np.mean(values[b][:10]) - np.mean(values[b][10:])) for b in ("softmax", "nap"))
  assert sep["task.wide"]["noise"] == pytest.approx(noise)
  text = leaderboard.markdown(reports)
  assert "| task: flat | " in text and "| no |" in text  # shown, as a check
  table = text.split("## Checks")[0]
  assert "task: wide" in table and "task: flat" not in table


def test_the_board_controls_the_false_discovery_rate_over_all_its_comparisons():
  reports = [report("a", 0.0), report("b", 0.2), report("c", -0.1)]
  judged = leaderboard.judge(reports, ["task.wide"])
  assert len(judged) == 6
  ps = [card_stats.compare(r["measures"]["task.wide"]["values"]["card"],
                           r["measures"]["task.wide"]["values"][base])["p"]
        for r in reports for base in ("softmax", "nap")]
  np.testing.assert_allclose([c["q"] for c in judged.values()], card_stats.controlled(ps))
  assert judged[("b", "task.wide", "softmax")]["word"] == "above"
  assert judged[("c", "task.wide", "softmax")]["word"] == "below"
  text = leaderboard.markdown(reports)
  assert "| `b` | 70.0 ▲S ▲N |" in text.replace("70.1", "70.0").replace("69.9", "70.0")
  assert "no different" not in text


def test_the_stability_is_recomputed_from_the_halves():
  reports = [report("a", 0.0), report("b", 0.2), report("c", -0.1)]
  # card "a" is softmax's twin: on each half it is not distinguishable from softmax, and below
  # NAP; "b" above both, "c" below both, in either half
  stable = leaderboard.stability(reports, ["task.wide"])
  first, second = (leaderboard.judge(reports, ["task.wide"], 0),
                   leaderboard.judge(reports, ["task.wide"], 1))
  agree = sum(first[k]["word"] == second[k]["word"] for k in first)
  assert stable["agree"] == agree and stable["total"] == 6
  assert stable["share"] == pytest.approx(agree / 6)
  # a card that flips between the halves: above softmax on one, below on the other
  flip = report("d", 0.0)
  values = flip["measures"]["task.wide"]["values"]
  values["card"] = [0.7] * 10 + [0.3] * 10
  stable = leaderboard.stability(reports + [flip], ["task.wide"])
  assert stable["total"] == 8 and stable["agree"] == agree


def test_the_time_column_is_over_softmaxs_quadratic_path():
  assert leaderboard._time(report("a", 0.0)) == "1.50 / 0.50 (N = 4096)"


def test_the_board_refuses_mixed_machines_and_scales_and_lists_older_cards():
  with pytest.raises(ValueError, match="several machines"):
    leaderboard.markdown([report("a", 0.0), report("b", 0.1, dict(MACHINE, cpu_cores=1))])
  with pytest.raises(ValueError, match="several scales"):
    leaderboard.markdown([report("a", 0.0), report("b", 0.1, scale="smoke")])
  older = {"normalization": "sink", "scale": "cpu"}
  text = leaderboard.markdown([report("a", 0.0), report("b", 0.2), older])
  assert "## Not yet rerun" in text and "`sink`" in text.split("## Not yet rerun")[1]
  assert "`sink`" not in text.split("## Not yet rerun")[0]
  assert ("A card, its baselines found finished, takes 10 minutes on it (median; 10 to 10 "
          "over 2 card(s))." in text)


def test_a_card_without_a_column_shows_n_a_and_is_not_judged_on_it():
  reports = [report("a", 0.0), report("b", 0.2), report("c", -0.1)]
  del reports[2]["measures"]["task.wide"]
  judged = leaderboard.judge(reports, ["task.wide"])
  assert len(judged) == 4 and not any(card == "c" for card, _, _ in judged)
  assert "| `c` | n/a |" in leaderboard.markdown(reports)


def run_leaderboard(*args):
  import subprocess
  import sys

  return subprocess.run([sys.executable, "-m", "normattn_jax.cli.leaderboard",
                         *args], capture_output=True, text=True, cwd=REPO, timeout=300,
                        env=subprocess_env())


def test_a_missing_or_empty_cards_folder_is_an_error_and_the_board_stays(tmp_path):
  board = tmp_path / "BOARD.md"
  board.write_text("the board as it was\n")
  (tmp_path / "empty").mkdir()
  for cards, said in ((tmp_path / "nowhere", "does not exist"),
                      (tmp_path / "empty", "holds no <name>/report.json")):
    done = run_leaderboard(f"--cards={cards}", f"--out={board}")
    assert done.returncode != 0 and said in done.stderr, done.stderr
    assert board.read_text() == "the board as it was\n"


@pytest.mark.parametrize("damage, said", [
    ("{not json", "not valid JSON"),
    ('{"name": "x", "protocol": %d}' % PROTOCOL, "measures is missing"),
    ('{"name": "x", "protocol": %d, "measures": [], "cost": [{"mode": "fwd"}]}' % PROTOCOL,
     "measures is a list, not a dict"),
])
def test_a_damaged_report_names_its_file_and_what_is_wrong(tmp_path, damage, said):
  (tmp_path / "x").mkdir()
  path = tmp_path / "x" / "report.json"
  path.write_text(damage)
  with pytest.raises(ValueError, match=said) as err:
    leaderboard.read_reports(str(tmp_path))
  assert str(path) in str(err.value)
  done = run_leaderboard(f"--cards={tmp_path}", f"--out={tmp_path / 'BOARD.md'}")
  assert done.returncode != 0 and str(path) in done.stderr
  assert not os.path.exists(tmp_path / "BOARD.md")


def test_a_cost_row_without_its_fields_is_named():
  card = dict(report("a", 0.0), name="a")
  card["cost"] = [{"mode": "fwd+bwd", "n": 4096}]
  import json
  import tempfile

  with tempfile.TemporaryDirectory() as folder:
    os.makedirs(os.path.join(folder, "a"))
    with open(os.path.join(folder, "a", "report.json"), "w") as f:
      json.dump(card, f)
    with pytest.raises(ValueError, match=r"cost\[0\] lacks path, seconds"):
      leaderboard.read_reports(folder)


def test_an_unfinished_card_is_named_and_the_board_is_not_made_without_it(tmp_path):
  """A card folder without report.json (a card still running, or killed) was dropped from the
  board without a word; the shared baselines' folder (neither file) is not a card."""
  shutil.copytree(os.path.join(REPO, "results", "report_cards", "softmax"), tmp_path / "softmax")
  (tmp_path / "running").mkdir()
  (tmp_path / "running" / "config.json").write_text('{"normalization": "sink"}')
  (tmp_path / "baselines" / "cpu-1234").mkdir(parents=True)
  with pytest.raises(ValueError, match=r"cards folder .*: running unfinished \(a card's "
                                       r"config.json, no report.json yet\)"):
    leaderboard.read_reports(str(tmp_path))
  (tmp_path / "running" / "config.json").unlink()
  assert [r["name"] for r in leaderboard.read_reports(str(tmp_path))] == ["softmax"]
