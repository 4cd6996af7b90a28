"""The Python examples of the README and of the docs' guides run as written."""
import glob
import os
import re

import pytest

from normattn_jax import attention, tasks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
