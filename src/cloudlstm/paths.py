"""Where the package finds its Hydra configs, from a checkout or from an installed wheel.

The configs live in the repository's ``conf/``, which ``train.py``, the tests and the
documentation name. A wheel carries them too: ``src/cloudlstm/conf`` is a symbolic link to
``../../conf`` that setuptools follows when it builds the wheel, so an installed package
has ``cloudlstm/conf/`` beside its modules. :func:`config_dir` is the one place that
chooses between the two.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def config_dir() -> Path:
    """The directory of ``train.yaml`` and the config groups.

    The checkout's ``conf/`` when this package runs from a checkout (``src/cloudlstm``, an
    editable install included), else the copy packaged in the wheel.
    """
    checkout = PACKAGE_DIR.parents[1] / "conf"
    # a checkout without working symbolic links (core.symlinks=false) has a text file where
    # the link is: the repository's own conf/ is found without it
    if PACKAGE_DIR.parent.name == "src" and (checkout / "train.yaml").is_file():
        return checkout
    return PACKAGE_DIR / "conf"
