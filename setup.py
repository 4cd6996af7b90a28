import re

from setuptools import find_packages, setup

# The core install runs the attention modules, blocks and models; the extras add what the
# experiments need (normattn_jax/_extras.py says which module needs which). ``make`` installs
# ".[all,test]" pinned by constraints.txt.
EXPERIMENTS = [
    "ml-collections>=0.1.1",
    "orbax-checkpoint>=0.9",
    "absl-py>=1.4",
    "tqdm>=4.66",
    "tensorboardX>=2.6",
    "matplotlib>=3.8",
]
PRETRAIN = EXPERIMENTS + [
    "tensorflow-datasets>=4.9.7",
    "array-record>=0.5",
    "importlib-resources>=6",
    "sentencepiece>=0.2",
]
BERT = [
    "safetensors>=0.4",
    "tokenizers>=0.15",
]
ANALYSIS = EXPERIMENTS + BERT + [
    "scipy>=1.11",
    "wordfreq>=3.0",
]

# The commands, one module each in normattn_jax/cli/: ``normattn-<name>`` (its underscores as
# hyphens) runs ``python -m normattn_jax.cli.<name>``.
COMMANDS = ["run", "sweep", "pretrain", "finetune", "card", "leaderboard", "resummarise", "retrain",
            "explaining_away", "geometry", "majority", "mixing", "mode_collapse", "unselectable",
            "unselectable_lm", "compare_seeds", "compare_pretraining", "compare_finetuning",
            "export_check", "regularization_table"]

with open("normattn_jax/__init__.py") as f:
  VERSION = re.search(r'^__version__ = "(.+)"$', f.read(), flags=re.M).group(1)
with open("README.md") as f:
  README = f.read()

DOCS = "https://normattn-jax.readthedocs.io"

setup(
    name="normattn_jax",
    version=VERSION,
    description="Attention normalisations for Flax: a drop-in multi-head attention with 13 "
                "normalisations, grids of small models in one program, four papers' experiments",
    long_description=README,
    long_description_content_type="text/markdown",
    author="The normattn_jax authors",
    url=DOCS,
    project_urls={
        "Documentation": DOCS,
        "Changelog": f"{DOCS}/en/latest/changelog.html",
        "Citation": f"{DOCS}/en/latest/citing.html",
    },
    # PEP 639: the SPDX expression (the License-Expression field, which replaces the licence
    # classifiers) and the licence's text, shipped in the sdist and the wheel.
    license_expression="Apache-2.0",
    license_files=["LICENSE"],
    classifiers=[
        "Development Status :: 3 - Alpha",
        "Intended Audience :: Science/Research",
        "Intended Audience :: Developers",
        "Operating System :: OS Independent",
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3 :: Only",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
    keywords="jax flax attention transformer softmax normalization",
    # normattn_jax.configs ships with the package: --config takes a config's name or a path,
    # and a config builds on another (``from normattn_jax.configs import ...``).
    packages=find_packages(include=["normattn_jax", "normattn_jax.*"]),
    # the kernel rules measured on accelerators (normattn_jax.kernels.rules)
    package_data={"normattn_jax.kernels": ["measured.json"]},
    python_requires=">=3.10",
    install_requires=[
        "jax>=0.4.35",
        "flax>=0.10",
        "optax>=0.2.3",
        "chex>=0.1.87",
        "numpy>=1.26",
    ],
    entry_points={"console_scripts": [
        f"normattn-{name.replace('_', '-')} = normattn_jax.cli.{name}:main" for name in COMMANDS]},
    extras_require={
        "experiments": EXPERIMENTS,
        "pretrain": PRETRAIN,
        "bert": BERT,
        "analysis": ANALYSIS,
        "all": sorted(set(PRETRAIN + ANALYSIS)),
        "test": ["pytest>=8", "pytest-xdist>=3.5", "hypothesis>=6.100", "ruff>=0.6", "build>=1.2",
                 "twine>=5"],
        # make docs: Sphinx with MyST notebooks, as flax's and optax's docs are built; the
        # tutorials' outputs cached by jupyter-cache
        "docs": ["sphinx>=8", "myst-nb>=1.1", "sphinx-book-theme>=1.1", "ipykernel>=6",
                 "jupyter-cache>=1.0"],
        # normattn_jax.pytorch_peer and benchmarks/pytorch_peer.py; not part of "all"
        "peer": EXPERIMENTS + ["torch"],
    },
)
