"""vaswani-plugin: the Transformer of "Attention Is All You Need" as a fairseq --user-dir plugin."""
import os

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))

with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
    long_description = f.read()

setup(
    name="vaswani-plugin",
    version="0.1.0",
    description='The Transformer of "Attention Is All You Need" as a fairseq extension',
    long_description=long_description,
    long_description_content_type="text/markdown",
    packages=find_packages(include=["vaswani_plugin", "vaswani_plugin.*"]),
    package_data={"vaswani_plugin.modules": ["few_rows_linear.c", "decoding_kernels.c", "block_pool.cpp"]},  # compiled where it is used
    python_requires=">=3.8",
    install_requires=[
        # Install torch==2.13.0 (a CPU build) first on CPU-only machines: a bare requirement
        # resolves to a multi-GB CUDA build there.
        "torch",
        "sentencepiece",
        "sacrebleu>=2",
        # fairseq 0.12.2, the last release, does not import on Python 3.11+ (dataclass mutable
        # defaults); fairseq-fixed is the same code with that fixed.
        'fairseq==0.12.2; python_version < "3.11"',
        'fairseq-fixed>=0.12.3; python_version >= "3.11"',
    ],
    extras_require={
        "test": ["pytest", "pytest-xdist", "hypothesis", "matplotlib"],  # xdist: scripts/run_tests.sh
        "plots": ["matplotlib"],  # vaswani-plot
        "bench": ["ctranslate2"],  # benchmarks/ctranslate2_anchor.py only
    },
    entry_points={
        "console_scripts": [
            "vaswani-user-dir=vaswani_plugin.cli.user_dir:main",
            "vaswani-average-checkpoints=vaswani_plugin.cli.average_checkpoints:main",
            "vaswani-convert=vaswani_plugin.convert:main",
            "vaswani-parse-prepare=vaswani_plugin.parsing.prepare:main",
            "vaswani-parse-score=vaswani_plugin.parsing.score_cli:main",
            "vaswani-plot=vaswani_plugin.plot.cli:main",
        ],
    },
)
