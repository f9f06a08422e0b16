"""Where the package finds its data files, from a checkout or from an installed wheel: the
Hydra configs and the paper's published tables.

The configs live in the repository's ``conf/``, which ``train.py``, the tests and the
documentation name; the paper's tables in ``docs/paper/``. A wheel carries both:
``src/cloudlstm/conf`` and ``src/cloudlstm/compare/paper_tables`` are symbolic links to them
that setuptools follows when it builds the wheel, so an installed package has copies beside
its modules. :func:`config_dir` and :func:`paper_dir` are the one place that chooses between
the checkout's folder and the copy.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
CHECKOUT = PACKAGE_DIR.parents[1]  # the repository's root, when this runs from src/cloudlstm


def config_dir() -> Path:
    """The directory of ``train.yaml`` and the config groups.

    The checkout's ``conf/`` when this package runs from a checkout (``src/cloudlstm``, an
    editable install included), else the copy packaged in the wheel.
    """
    return _checkout_or_package("conf", "train.yaml", PACKAGE_DIR / "conf")


def paper_dir() -> Path:
    """The directory of the paper's tables (``metric.csv``, ...): the checkout's
    ``docs/paper/``, else the copy packaged in the wheel."""
    return _checkout_or_package(
        "docs/paper", "metric.csv", PACKAGE_DIR / "compare" / "paper_tables"
    )


def _checkout_or_package(folder: str, marker: str, packaged: Path) -> Path:
    """``folder`` of the checkout if this package runs from one and it holds ``marker``,
    else ``packaged``."""
    checkout = CHECKOUT / folder
    # a checkout without working symbolic links (core.symlinks=false) has a text file where
    # the link is: the repository's own folder is found without it
    if PACKAGE_DIR.parent.name == "src" and (checkout / marker).is_file():
        return checkout
    return packaged
