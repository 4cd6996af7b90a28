"""The Python examples of the README and of the docs' guides run as written."""
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


@pytest.mark.parametrize("page,index,block", BLOCKS, ids=[f"{p}:{i}" for p, i, _ in BLOCKS])
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
