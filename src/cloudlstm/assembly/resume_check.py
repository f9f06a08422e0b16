"""``hydra.callbacks.config_changes`` of ``train.py``: a resumed run's settings checked
(:mod:`cloudlstm.rundir.config_changes`, then :mod:`cloudlstm.assembly.resume_shapes`)
before Hydra writes ``.hydra/`` into its directory.

Apart from :mod:`~cloudlstm.assembly.resume_shapes`, which builds models and so imports torch
and Lightning: Hydra hands a joblib sweep's callbacks to each worker process, which imports
their modules to read them, and a worker told to stop before its job began should not
spend those seconds first (:mod:`cloudlstm.rundir.stops`).
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from cloudlstm.rundir.config_changes import CheckBeforeTheRun


class CheckResumeBeforeTheRun(CheckBeforeTheRun):
    """The config check, then the shapes'
    (:func:`~cloudlstm.assembly.resume_shapes.check_resume`)."""

    def check(self, cfg: DictConfig, run_dir: Path) -> None:
        from cloudlstm.assembly.resume_shapes import check_resume

        check_resume(cfg, run_dir)
