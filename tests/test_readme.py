"""The Python examples of the README and of the docs' guides run as written."""
import ast
import glob
import os
import re
import shlex
import subprocess
import sys

import pytest

from normattn_jax import attention, tasks

from helpers import REPO as ROOT, subprocess_env

PAGES = ["README.md"] + sorted(os.path.relpath(p, ROOT)
                               for p in glob.glob(os.path.join(ROOT, "docs", "guides", "*.md")))


def python_blocks(page: str) -> list:
  with open(os.path.join(ROOT, page)) as f:
    return re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)


BLOCKS = [(page, index, block) for page in PAGES
          for index, block in enumerate(python_blocks(page))]


def test_readme_shows_the_public_api_in_examples():
  """The README's examples are the ones users copy first: both modules, a grid from a config
  and a model loaded back, and a registered normalisation."""
  text = "\n".join(python_blocks("README.md"))
  for name in ("MultiHeadAttention", "nnx", "run_sweep", "load_model", "register"):
    assert name in text, f"no README example uses {name}"


def test_the_readmes_table_of_normalisations_is_the_registrys():
  """The table says what the registry holds: regenerate it with ``python -m
  normattn_jax.attention.properties`` when a normalisation or its paths change."""
  from normattn_jax.attention import properties
  with open(os.path.join(ROOT, "README.md")) as f:
    text = f.read()
  found = re.search(r"<!-- python -m normattn_jax.attention.properties .*?-->\n(.*?)\n"
                    r"<!-- end of the table -->", text, flags=re.S)
  assert found, "no table of the normalisations in the README"
  assert found.group(1) == properties.table()
  assert text.index(found.group(1)) < text.index("## "), "the table is not on the first screen"


def test_the_guides_show_the_weight_functions_and_a_registered_task():
  text = "\n".join(block for page, _, block in BLOCKS if page != "README.md")
  for name in ("dnas_weights", "tasks.register", "mixing_ratios", "nnx.vmap"):
    assert name in text, f"no guide's example uses {name}"


# The examples that run what another fast test runs, each found by a line of its own: page,
# line -> the test that covers it in make test; test_every_example_compiles_and_imports parses each
# and runs its imports.
RUN_ELSEWHERE = {
    ("README.md", 'for name in ("softmax", "dnas", "sparsemax")'):
        "test_padding's test_padding_mask_masks_queries_and_keys",
    ("README.md", "summary = run_sweep(config, workdir"):
        "test_grid's reference sweep, test_a_trained_model_loads_back_as_a_module_and_...",
    ("docs/guides/analyses.md", "ratios = mixing.mixing_ratios(blocks[0])"):
        "test_mixing (MiniLM loaded, its blocks traced, their mixing ratios)",
    ("docs/guides/grids.md", 'run = train_grid(c, "mte")'):
        "test_task_registry's test_train_grid_gives_the_sweeps_numbers",
    ("docs/guides/modules.md", 'normalization="ssmax", decode=True'):
        "test_module_dropin's test_decoding_a_row_local_normalisation_...[ssmax-quadratic]",
    ("docs/guides/modules.md", "stacked = jax.vmap(lambda k: model.init(k, tokens))"):
        "test_blocks' test_vmap_over_init_and_apply_equals_each_model_alone",
    ("docs/guides/modules.md", 'output_gate="headwise", qk_norm="rms"'):
        "test_module_options (each option, AttentionModuleSpec)",
    ("docs/guides/modules.md", "class Classifier(nnx.Module)"):
        "test_nnx's test_seed_ensemble_with_vmap and test_softmax_is_flax",
    ("docs/guides/normalisations.md", "w = dnas_weights(logits, mask)"):
        "test_weights' test_dnas_column_bound_with_padding",
}


def run_elsewhere(page: str, block: str) -> bool:
  return any(page == where and line in block for where, line in RUN_ELSEWHERE)


def imports_of(block: str) -> ast.Module:
  """The block's import statements alone: a renamed or moved name fails them."""
  tree = ast.parse(block)
  return ast.Module([node for node in ast.walk(tree)
                     if isinstance(node, (ast.Import, ast.ImportFrom))], type_ignores=[])


def test_every_example_compiles_and_imports():
  """Every block parses as Python and its imports resolve, the ones make test does not run
  (``RUN_ELSEWHERE``, each line found in one block of its page) too."""
  for where, line in RUN_ELSEWHERE:
    assert sum(line in block for page, _, block in BLOCKS if page == where) == 1, (where, line)
  for page, index, block in BLOCKS:
    exec(compile(imports_of(block), f"{page} block {index}", "exec"), {})


@pytest.mark.parametrize("page,index,block", BLOCKS, ids=[f"{p}:{i}" for p, i, _ in BLOCKS])
@pytest.mark.fast_subset(lambda p: not run_elsewhere(p["page"], p["block"]))
def test_example_runs(page, index, block):
  """Each block runs as a reader runs it, in a fresh namespace; what it registers is removed
  afterwards, so that two pages may register the same example."""
  registries = (attention, tasks)
  before = [set(registry.names()) for registry in registries]
  try:
    exec(compile(block, f"{page} block {index}", "exec"), {})
  finally:
    for registry, names in zip(registries, before):
      for name in set(registry.names()) - names:
        registry.unregister(name)


def readme_commands() -> list:
  """The README's ``normattn-<command> ...`` command lines, continuations joined."""
  with open(os.path.join(ROOT, "README.md")) as f:
    blocks = re.findall(r"^```(\w*)\n(.*?)^```$", f.read(), flags=re.S | re.M)
  shell = "\n".join(text for language, text in blocks if not language)
  return re.findall(r"^(normattn-[\w-]+ .*?)$", shell.replace("\\\n", " "), flags=re.M)


@pytest.mark.parametrize("command", readme_commands())
def test_the_readmes_commands_parse_into_valid_configs(command, tmp_path):
  """Each command runs as written, its plugin the README's example, up to the opening of its
  workdir, which is a file here: every flag parsed and the whole config validated first (a bad
  field would be named instead), and nothing written (the runs themselves are the scripts' own
  tests')."""
  register_block = next(block for block in python_blocks("README.md") if "register(" in block)
  (tmp_path / "my_norms.py").write_text(register_block)
  script, *arguments = shlex.split(command)
  workdir = tmp_path / "a_file"
  workdir.write_text("")
  if "--workdir" in arguments:  # --workdir DIR
    arguments[arguments.index("--workdir") + 1] = str(workdir)
  arguments = [f"--workdir={workdir}" if a.startswith("--workdir=") else a for a in arguments]
  environment = subprocess_env(tmp_path)
  module = "normattn_jax.cli." + script.removeprefix("normattn-").replace("-", "_")
  done = subprocess.run([sys.executable, "-m", module, *arguments], cwd=ROOT, env=environment,
                        capture_output=True, text=True, timeout=300)
  assert done.returncode != 0
  assert str(workdir) in done.stderr.strip().splitlines()[-1], done.stderr[-2000:]
  assert sorted(set(os.listdir(tmp_path)) - {"__pycache__"}) == ["a_file", "my_norms.py"]


def test_the_readme_has_its_two_commands():
  assert sorted(shlex.split(c)[0] for c in readme_commands()) == [
      "normattn-card", "normattn-sweep"]
