"""REPORT_CARDS.md is the committed cards' board, generated from their report.json files: one
family of words for the board and every card (each card's committed words are the board's),
tables that render, the columns that rank, the words' stability over random halvings."""
import json
import os
import re
import shutil

import numpy as np
import pytest

from normattn_jax.card.train import PROTOCOL
from normattn_jax.reporting import leaderboard

from helpers import REPO, subprocess_env

MACHINE = {"backend": "cpu", "device_kind": "cpu", "device_count": 2, "process_count": 1,
           "jax": "0.10.2", "jaxlib": "0.10.2", "xla_flags": "", "matmul_precision": "None",
           "cpu_model": "Some CPU", "cpu_features": ["avx2"], "cpu_cores": 2}
CARDS = os.path.join(REPO, "results", "report_cards")


@pytest.fixture(scope="module")
def committed():
  """The committed cards, the board's judgement of them and the board it writes (made once)."""
  reports = leaderboard.read_reports(CARDS)
  protocol = leaderboard.judged_protocol(reports)
  judged = leaderboard.judge([r for r in reports if r.get("protocol") == protocol])
  return reports, judged, leaderboard.markdown(reports, judged, leaderboard.read_lm_boards(CARDS))


def test_the_committed_board_is_the_committed_cards(committed):
  with open(os.path.join(REPO, "REPORT_CARDS.md")) as f:
    assert f.read() == committed[2]


def test_every_committed_card_says_the_boards_words(committed):
  """A card corrected over its own comparisons and the board over all of them gave opposite
  words to the same pair; every committed card's words are now the board's."""
  reports, judged, _ = committed
  for report in reports:
    if report.get("protocol") != leaderboard.judged_protocol(reports):
      continue
    expected = leaderboard.card_words(judged, report)
    assert report["family"]["scope"] == "board", report["name"]
    assert json.loads(json.dumps(report["comparisons"])) == json.loads(json.dumps(
        expected["comparisons"])), report["name"]


def table_shapes(text: str) -> list:
  """Every table of a Markdown document as a Markdown parser reads it (markdown-it-py, GFM
  tables): per table, the number of cells of its header and of each row."""
  from markdown_it import MarkdownIt

  tokens = MarkdownIt("commonmark").enable("table").parse(text)
  shapes, row, rows = [], None, None
  for token in tokens:
    if token.type == "table_open":
      rows = []
    elif token.type == "tr_open":
      row = 0
    elif token.type in ("th_open", "td_open"):
      row += 1
    elif token.type == "tr_close":
      rows.append(row)
    elif token.type == "table_close":
      shapes.append(rows)
  return shapes


def test_every_table_of_the_board_and_the_cards_renders(committed):
  """An unescaped "|activation|" split the board's rows; a parser reads every table of the
  board and of every committed card with as many cells in each row as in its header."""
  documents = {"REPORT_CARDS.md": committed[2]}
  for name in os.listdir(CARDS):
    path = os.path.join(CARDS, name, "report.md")
    if os.path.exists(path):
      with open(path) as f:
        documents[path] = f.read()
  for where, text in documents.items():
    tables = table_shapes(text)
    assert tables, where
    expected = text.count("\n|---")
    assert len(tables) == expected, (where, len(tables), expected)
    for rows in tables:
      assert len(set(rows)) == 1, (where, rows)
  pipes = "| a | largest / median |activation| |\n|---|---|\n| x | 1 |\n"
  assert table_shapes(pipes) == []  # an unescaped label: the table does not render at all
  fixed = "\n".join(leaderboard.table(["a", "largest / median |activation|"], [["x", "1"]]))
  assert table_shapes(fixed) == [[2, 2]]


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
  arm = {"learning_rate": 0.0081, "selection": {"learning_rates": [0.027, 0.0081, 0.00243],
                                                "train_acc_means": [0.5, 0.6, 0.55]}}
  return {"protocol": PROTOCOL, "name": name, "normalization": name, "options": {},
          "scale": scale, "machine": machine,
          "sizes": {"seq_len": 16, "d_model": 32, "selection_seeds": 5, "evaluation_seeds": seeds},
          "measures": measures, "diagnostics": {}, "cost": cost, "mode_collapse": collapse,
          "tasks": {"case": {"arms": {"card": arm, "softmax": arm, "nap": arm}}},
          "attention": {"card": {"below_bound": [0.0] * 3 + [0.1]}},
          "seconds": {"sweeps": {"baselines/case/select": None, "card/case/select": 60.0,
                                 "card/lm": 120.0},
                      "this_call": 300.0, "analyses": 420.0}}


def test_a_column_ranks_only_where_the_arms_differ():
  reports = [report("a", 0.0), report("b", 0.2), report("c", -0.1)]
  judged = leaderboard.judge(reports, splits=0)
  assert judged["columns"]["task.wide"]["ranks"]
  assert not judged["columns"]["task.flat"]["ranks"]
  text = leaderboard.markdown(reports, judged)
  table = text.split("## Columns that do not rank")[0].split("Marks:")[1]
  assert "task: wide" in table and "task: flat" not in table
  assert "| task: flat | 5 |" in text and "| no |" in text  # shown, with why


def test_the_board_marks_each_pair_from_one_family():
  reports = [report("a", 0.0), report("b", 0.2), report("c", -0.1)]
  judged = leaderboard.judge(reports, splits=0)
  assert judged["comparisons"][("b", "task.wide", "softmax")]["word"] == "above"
  assert judged["comparisons"][("c", "task.wide", "softmax")]["word"] == "below"
  text = leaderboard.markdown(reports, judged)
  assert "| `b` | 70.0 ▲S ▲N |" in text.replace("70.1", "70.0").replace("69.9", "70.0")
  assert "| *softmax (baseline)* | " in text and "| *nap (baseline)* | " in text


def test_the_time_column_is_over_softmaxs_quadratic_path():
  assert leaderboard._time(report("a", 0.0)) == "1.50 / 0.50 (N = 4096)"


def test_the_board_refuses_mixed_machines_and_scales_and_lists_older_cards():
  with pytest.raises(ValueError, match="several machines"):
    leaderboard.markdown([report("a", 0.0), report("b", 0.1, dict(MACHINE, cpu_cores=1))])
  with pytest.raises(ValueError, match="several scales"):
    leaderboard.markdown([report("a", 0.0), report("b", 0.1, scale="smoke")])
  older = {"normalization": "sink", "scale": "cpu", "protocol": 1}
  text = leaderboard.markdown([report("a", 0.0), report("b", 0.2), older])
  assert "## Not yet rerun" in text and "`sink`" in text.split("## Not yet rerun")[1]
  assert "`sink`" not in text.split("## Not yet rerun")[0]
  assert ("A card, its baselines found finished, takes 10 minutes on it (median; 10 to 10 "
          "over 2 card(s))." in text)


def test_a_card_without_a_column_shows_n_a_and_is_not_judged_on_it():
  reports = [report("a", 0.0), report("b", 0.2), report("c", -0.1)]
  del reports[2]["measures"]["task.wide"]
  judged = leaderboard.judge(reports, splits=0)
  assert not any(card == "c" and key == "task.wide" for card, key, _ in judged["comparisons"])
  assert "| `c` | n/a |" in leaderboard.markdown(reports, judged)


def run_leaderboard(*args):
  import subprocess
  import sys

  return subprocess.run([sys.executable, "-m", "normattn_jax.cli.leaderboard",
                         *args], capture_output=True, text=True, cwd=REPO, timeout=300,
                        env=subprocess_env())


def test_a_missing_or_empty_cards_folder_is_named(tmp_path):
  (tmp_path / "empty").mkdir()
  for cards, said in ((tmp_path / "nowhere", "does not exist"),
                      (tmp_path / "empty", "holds no <name>/report.json")):
    with pytest.raises(FileNotFoundError, match=re.escape(f"cards folder {cards} {said}")):
      leaderboard.report_paths(str(cards))


# the messages: test_a_missing_or_empty_cards_folder_is_named; the command's refusal of what it
# reads, before it writes: test_a_damaged_report_names_its_file_and_what_is_wrong
@pytest.mark.slow
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
@pytest.mark.fast_subset(lambda p: p["said"] == "not valid JSON")  # one path, three damages
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
def lm_seeds(level, share, count=8):
  return [{"diverged": False, "final_train_loss": level, "zero_share": 0.0,
           "loss_by_band": {str(m): [level + 0.01 * i + 0.02 * b for b in range(m.bit_length())]
                            for m in (1, 2, 4, 8)},
           "first_token_share": [[share + 0.001 * i, share]], "massive_ratio": [6.0 + 0.1 * i]}
          for i in range(count)]


def test_an_lm_board_of_a_larger_scale_joins_the_board():
  """The gpu scale's LM part (experiments/card_lms.py) is judged as its own family and shown in
  its own section, its context-dependent columns read only where the LMs beat the trigram."""
  from normattn_jax.card import train as rc
  spread = lambda centre: [centre * (1 + 0.01 * i) for i in range(8)]
  refs = {"minilm": {"what": "8 windows", "first_token_share": spread(0.22),
                     "first_token_share_max": spread(0.5), "massive_ratio": spread(50.0)},
          "gaussian": {"shape": [1], "massive_ratio": spread(6.1)},
          "random_init": {"seeds": lm_seeds(4.2, 0.06)}, "uniform": {"first_token_share": 0.059},
          "random_logits": {"shape": [1], "sparsemax_zero_share": spread(0.6),
                            "softmax_zero_share": [0.0] * 8},
          "ngram": {"windows": 8, "3": {"loss_by_band": {"1": [2.0]}, "window_band_losses": {
              str(m): [[2.0] * m.bit_length()] * 8 for m in (2, 4, 8)}},
                    "2": {"loss_by_band": {"1": [2.5]}}},
          "uniform_past_L": {"loss_by_band": {str(m): [2.0, 4.4] for m in (2, 4, 8)}}}
  selection = {"learning_rates": [0.001], "scores": [-1.5], "selected": 0.001, "extended": [],
               "cap": [0.0001, 0.009], "outcome": "a single rate"}
  board = {"scale": "gpu", "machine": dict(MACHINE, device_kind="NVIDIA H200"),
           "corpus": "shakespeare",
           "plan": {"sizes": rc.dataclasses.asdict(rc.card_lm.LM_SIZES["smoke"]),
                    "learning_rates": [0.001], "selection_seeds": 3, "evaluation_seeds": 8},
           "references": refs,
           "arms": {"softmax": {"selection": selection, "seeds": lm_seeds(1.5, 0.3)},
                    "nap": {"selection": selection, "seeds": lm_seeds(1.6, 0.2)},
                    "softpick": {"selection": selection, "seeds": lm_seeds(1.5, 0.05)}}}
  reports = rc.lm_board_reports(board)
  assert [r["name"] for r in reports] == ["softmax", "nap", "softpick"]
  lines = "\n".join(leaderboard.lm_board_section(board))
  assert "## The LM diagnostics at the `gpu` scale" in lines
  row = next(line for line in lines.splitlines() if line.startswith("| `softpick` |"))
  assert "5.2 ▼S ▼N" in row  # its sink share below softmax's and NAP's, its LM beats the trigram

