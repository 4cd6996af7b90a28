"""REPRODUCTION.md against the committed results: its fenced tables and quoted numbers agree with
the files under results/, its verdicts' findings with their précis, and a tampered copy of the
document is caught, whatever kind of edit tampers with it."""
import os
import subprocess
import sys

import pytest

from normattn_jax.reporting import findings, mutations, verdicts
from normattn_jax.reporting import reproduction as rep

from helpers import REPO, subprocess_env

DOCUMENT = os.path.join(REPO, "REPRODUCTION.md")
RESULTS = os.path.join(REPO, "results")


@pytest.fixture(scope="module")
def document():
  with open(DOCUMENT) as f:
    return f.read()


@pytest.fixture(scope="module")
def results():
  return rep.Results(RESULTS)


def test_every_fenced_table_and_quote_agrees_with_the_committed_files(document, results):
  assert rep.check(document, results) == []


def test_every_verdict_spec_agrees_with_its_paragraph(document, results):
  assert verdicts.problems(document, results) == []
  assert len({v.id for v in verdicts.VERDICTS}) == len(verdicts.VERDICTS)


def test_every_verdict_paragraph_has_one_spec(document):
  specs = [" ".join(v.opening.split()) for v in verdicts.VERDICTS]
  for paragraph in verdicts.verdict_paragraphs(document):
    flat = " ".join(paragraph.split())
    assert sum(flat.startswith(opening) for opening in specs) == 1, paragraph[:80]


def test_a_changed_verdict_number_is_found(document, results):
  """A number of ours (NAP's argmax at d = 128), of the paper's and a literal, each changed in
  its verdict paragraph, and a number added to one."""
  for old, new in (("94.2 / 100.0 / 81.2% at 2.19e-4", "94.2 / 100.0 / 81.3% at 2.19e-4"),
                   ("against the paper's 94.5 / 83.9, is", "against the paper's 94.5 / 84.9, is"),
                   ("holds for two of the six\nmodels on this 3-rate grid",
                    "holds for two of the six\nmodels on this 4-rate grid"),
                   ("sum pooling to 43.0%, below learned.",
                    "sum pooling to 43.0%, below learned at 50%.")):
    problems = verdicts.check(_tampered(document, old, new), results)
    assert len(problems) == 1 and problems[0].startswith("verdict "), (old, problems)


def test_numbers_are_read_as_the_document_writes_them():
  numbers = findings.numbers_in("NAP 94.3 / 85.1 at 2.19e-4 (3.4-8.2%), 1,000 examples, L1, "
                                "d = 128, 0.3^7, N/2, `results/d128_nap/seeds.json` 5-against-5, "
                                "down to -87 (below -20), +0.50, 18.7 -> 27.5")
  assert [t.text for t in numbers] == ["94.3", "85.1", "2.19e-4", "3.4", "8.2", "1,000", "128",
                                       "0.3", "5", "5", "-87", "-20", "+0.50", "18.7", "27.5"]


def test_findings_are_read_in_order_with_their_words():
  """Numbers with signs and an interval's ends in order, verdict and comparison words (a phrase
  across a line break as one), number words; a précis' quote is the number, marked."""
  text = ("**Verdict: not\nreproduced.** NAP is above BERT (16-26%), two of the six learn; "
          "`below` in code is no word, nor is lowering")
  assert [t.text for t in findings.tokens(text)] == [
      "not reproduced", "above", "16", "26", "two", "six", "learn"]
  precis = findings.precis_tokens(f"above {findings.quote('94.5', 'NAP paper, Table 3')} -3")
  assert [(t.text, t.source) for t in precis] == [
      ("above", None), ("94.5", "NAP paper, Table 3"), ("-3", None)]


# Edits a referee made to the verdicts, each of which changes a finding and not a digit bag's
# contents: two numbers swapped, ours swapped with the paper's, a count in words, a sign, an
# interval backwards, a comparison and a verdict word turned, a quote no longer named.
FINDING_EDITS = (
    ("(weakest case 28.7% and 40.0%", "(weakest case 40.0% and 28.7%"),
    ("94.3 / 85.1 against the paper's 94.5 / 83.9", "94.5 / 83.9 against the paper's 94.3 / 85.1"),
    ("(79.0 / 64.2 against sum pooling's 65.7 / 54.1",
     "(65.7 / 54.1 against sum pooling's 79.0 / 64.2"),
    ("BERT's four seeds at", "BERT's two seeds at"),
    ("log-sums down to -87,", "log-sums down to +87,"),
    ("(16-26% against", "(26-16% against"),
    ("and NAP is above BERT, MTE, NON", "and NAP is below BERT, MTE, NON"),
    ("only the ordering of observation (3) is reproduced there",
     "only the ordering of observation (3) is not reproduced there"),
    ("At S = N NAP trails sum pooling by 23", "At S = N NAP leads sum pooling by 23"),
    ("holds for two of the six", "holds for three of the six"),
    ("S = 16, the paper's 55.7 to 10.4;", "S = 16, against 55.7 to 10.4;"),
)


@pytest.mark.parametrize("old, new", FINDING_EDITS)
def test_a_changed_finding_is_found(document, results, old, new):
  """Each edit is caught by the check of the verdict it edits."""
  edited = _tampered(document, old, new)
  found = verdicts.problems(edited, results, [v for v in verdicts.VERDICTS
                                              if verdicts.paragraph_of(document, v.opening)
                                              != verdicts.paragraph_of(edited, v.opening)])
  assert found and all(p.startswith("verdict ") for p in found), (old, found)


def test_every_papers_number_says_where_the_paper_prints_it(results):
  assert verdicts.paper_source_problems(results) == []
  import copy

  papers = copy.deepcopy(results.json(verdicts.PAPERS))
  del papers["sources"]["table1-ablation"]
  papers["text"]["dnas.fig1.keys"] = "100"
  tampered = rep.Results(RESULTS)
  tampered._cache[verdicts.PAPERS] = papers
  assert verdicts.paper_source_problems(tampered) == [
      "papers.json: table table1-ablation has no source",
      "papers.json: text 'dnas.fig1.keys' has no value and source"]


def test_a_claim_the_files_do_not_support_is_named(results):
  def precis(r):
    return verdicts.supported(False, "sum pooling worst in every row")

  spec = verdicts.Verdict("x", "**Verdict: x", precis)
  assert verdicts.verdict_problems("**Verdict: x.**", spec, results) == [
      "verdict x: the files do not support: sum pooling worst in every row"]


@pytest.fixture(scope="module")
def measure(document, results):
  return mutations.Measure(document, results)


def _mutation_shares(measure, drawn, capsys):
  counts, missed = mutations.shares(measure, drawn)
  with capsys.disabled():
    print(f"\nverdict edits caught, per kind ({len(drawn)} drawn):\n{mutations.report(counts)}")
  for kind, (caught, n) in counts.items():
    assert n and caught / n >= 0.95, (kind, [m.describe(measure.document) for m in missed])


def test_a_sample_of_every_kind_of_edit_is_caught(measure, capsys):
  """Edits of every kind drawn from every verdict paragraph; at least 95% of each caught (the
  whole sweep: the slow test below, ``experiments/mutate_verdicts.py``); an unedited copy, and
  one whose edit touches no finding, pass."""
  every = measure.all_mutations()
  assert {m.kind for m in every} == set(mutations.KINDS)
  assert {m.verdict for m in every} == {v.id for v in verdicts.VERDICTS}
  _mutation_shares(measure, mutations.sample(every, per_kind=6), capsys)
  assert not measure.caught(mutations.Mutation("value", "fig13", ()))
  start = measure.document.index("as the paper reports in\nSection 5.1.2")
  assert not measure.caught(mutations.Mutation("value", "fig3", ((start, start + 2, "As"),)))


@pytest.mark.slow
def test_every_edit_of_every_kind_is_caught(measure, capsys):
  _mutation_shares(measure, measure.all_mutations(), capsys)


@pytest.mark.slow
def test_the_measure_agrees_with_the_whole_check(document, results, measure):
  for m in mutations.sample(measure.all_mutations(), per_kind=2, seed=1):
    assert measure.caught(m) == bool(verdicts.check(m.apply(document), results)), m


def test_every_spec_has_its_fence_and_every_fence_its_spec(document):
  fenced = rep.fenced_tables(document.split("\n"))
  assert sorted(fenced) == sorted(t.id for t in rep.TABLES)
  assert len({q.id for q in rep.QUOTES}) == len(rep.QUOTES)


def _tampered(document: str, old: str, new: str) -> str:
  assert document.count(old) == 1, old
  return document.replace(old, new)


def test_a_tampered_table_cell_is_found_and_rendered_back(document, results):
  row = "| ours, train (N = 32) | 98.2 | 97.8 | 98.1 | 97.8 | 97.4 | 98.5 |"
  tampered = _tampered(document, row, row.replace("97.4", "99.4"))
  problems = rep.check(tampered, results)
  assert len(problems) == 1
  assert "table fig3-best, row 'ours, train (N = 32)', column 'sum'" in problems[0]
  assert "'99.4'" in problems[0] and "'97.4'" in problems[0]
  rendered, differences, errors = rep.render(tampered, results)
  assert rendered == document and len(differences) == 1 and errors == []


def test_a_tampered_quote_is_found(document, results):
  tampered = _tampered(document, "(8.6-10.7 per data set)", "(8.6-10.9 per data set)")
  problems = rep.check(tampered, results)
  assert len(problems) == 1 and problems[0].startswith("quote majority-data:")
  assert rep.render(tampered, results)[0] == tampered  # prose is checked, never rewritten


def test_a_lost_row_or_fence_is_an_error(document, results):
  row = "| NAP > sum | 0.004 / 0.006 | 0.004 / 0.004 | 0.006 / 0.004 | 0.004 / 0.006 |\n"
  errors = rep.render(_tampered(document, row, ""), results)[2]
  assert errors == ["table fig5-gpu-tests, row 'NAP > sum': not in the document"]
  errors = rep.render(_tampered(document, "<!-- table: sinkhorn -->\n", ""), results)[2]
  assert errors == ["table sinkhorn: not fenced in the document"]
  with pytest.raises(ValueError, match="'albert-tiny': no <!-- /table -->"):
    rep.fenced_tables(_tampered(document, "<!-- table: albert-tiny -->\n",
                                "<!-- table: albert-tiny -->\n<!-- table: other -->\n"
                                ).split("\n"))


def test_a_missing_results_file_is_named(document, tmp_path):
  problems = rep.check(document, rep.Results(str(tmp_path)))
  assert "table sinkhorn: its files cannot be read: FileNotFoundError" in "\n".join(problems)
  assert any(p.startswith("quote majority-data: its files cannot be read") for p in problems)


def test_the_formats_are_the_documents():
  assert [rep.rate(x) for x in (2.187e-4, 0.0081, 0.027, 6.561e-5)] == [
      "2.19e-4", "8.1e-3", "2.7e-2", "6.56e-5"]
  assert rep.rate(0.027, decimal_from=0.01) == "0.027"
  assert [rep.sci(x) for x in (0.06474, 1.334, 2.384e-7)] == ["6.5e-2", "1.3", "2.4e-7"]
  assert [rep.short_float(x) for x in (1e-4, 0.01, 0.0625, 0.25)] == [
      "1e-4", "1e-2", "0.0625", "0.25"]
  assert [rep.signed(x) for x in (0.5024, -0.458, -1e-8)] == ["+0.50", "-0.46", "0.00"]
  assert [rep.p_value(x) for x in (0.0079, 0.048, 0.111, 0.6547)] == [
      "0.008", "0.048", "0.11", "0.65"]


def _command(*flags):
  return subprocess.run([sys.executable, os.path.join(REPO, "experiments",
                                                      "reproduction_tables.py"), *flags],
                        capture_output=True, text=True, cwd=REPO, timeout=300,
                        env=subprocess_env())


def test_the_command_checks_and_rewrites(document, tmp_path):
  done = _command("--check")
  assert done.returncode == 0, done.stdout + done.stderr
  path = tmp_path / "REPRODUCTION.md"
  row = "| ours, validated at 2N = 64 | 58.3 | 90.6 | 91.8 | 92.2 | 93.5 | 16.9 |"
  path.write_text(_tampered(document, row, row.replace("90.6", "90.7")))
  done = _command("--check", f"--document={path}")
  assert done.returncode == 1 and "table table4-mode" in done.stdout
  done = _command(f"--document={path}")
  assert done.returncode == 0 and path.read_text() == document


def test_the_lm_table_is_computed_from_the_committed_counts(document, results):
  """The unselectable-LM table's means come from the per-window counts, not the stored means:
  a count raised (64 -> 164) in a copy of the summary is a difference."""
  import copy

  summary = copy.deepcopy(results.json("unselectable_lm/summary.json"))
  stats = summary["variants"]["without_scaling"]["seeds"][0]["trained"]["attention_inputs"]
  assert stats["unselectable_per_window"][0][0] == 64
  stats["unselectable_per_window"][0][0] = 164
  tampered = rep.Results(RESULTS)
  tampered._cache["unselectable_lm/summary.json"] = summary
  problems = rep.check(document, tampered)
  assert any(p.startswith("table unselectable-lm, row '**w/o scaling (ours)**', column 'L1'")
             for p in problems), problems


def committed_seed_reports() -> list[str]:
  """Every committed ``compare_seeds`` report of ours (those made with the authors' folder hold
  their seeds too, which are not here to recompute)."""
  import glob
  import json

  out = []
  for path in sorted(glob.glob(os.path.join(RESULTS, "**", "*seeds*.json"), recursive=True)):
    with open(path) as f:
      report = json.load(f)
    if {"cells", "tests", "runs"} <= set(report) and "authors" not in os.path.basename(path):
      out.append(path)
  return out


@pytest.mark.parametrize("path", committed_seed_reports(),
                         ids=lambda path: os.path.relpath(path, RESULTS))
def test_a_committed_seed_report_is_recomputed_from_the_runs_metrics(path):
  """Each per-seed report (``seeds.json``) is what ``seeds.compare_with_authors`` computes again
  from its runs' ``metrics.npz``: every cell and test of ours."""
  import json

  from normattn_jax.sweep import seeds

  with open(path) as f:
    stored = json.load(f)
  runs = [seeds.OurSweep.read(os.path.join(REPO, w)) for w in stored["runs"]]
  tests = tuple((t["better"], t["worse"]) for t in stored["tests"])
  again = seeds.compare_with_authors(runs, None, stored["threshold"], tuple(dict.fromkeys(tests)))
  again = json.loads(json.dumps(again))
  assert [c["ours"] for c in again["cells"]] == [c["ours"] for c in stored["cells"]]
  assert [t["ours"] for t in again["tests"]] == [t["ours"] for t in stored["tests"]]


@pytest.mark.parametrize("path", committed_seed_reports(),
                         ids=lambda path: os.path.relpath(path, RESULTS))
def test_a_committed_seed_table_is_its_report_as_markdown(path):
  """Each ``seeds.md`` beside a ``seeds.json`` is ``seeds.markdown`` of it, as drawn now."""
  import json

  from normattn_jax.sweep import seeds

  with open(path) as f:
    report = json.load(f)
  with open(path[:-len(".json")] + ".md") as f:
    assert f.read().strip() == seeds.markdown(report).strip()


def test_there_are_committed_seed_reports():
  assert len(committed_seed_reports()) >= 6
