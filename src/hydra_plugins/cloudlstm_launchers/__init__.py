"""cloudlstm's SLURM launcher: submitit's, with a clear error where SLURM is missing.

Hydra finds launchers only in the ``hydra_plugins`` namespace package, hence this module.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence

from hydra.core.utils import JobReturn
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher

from cloudlstm.errors import UserError


class CheckedSlurmLauncher(SlurmLauncher):
    """``hydra/launcher=slurm``: refuses in one line to start where SLURM's tools are missing.

    Without the check submitit fails deep inside ``subprocess`` with a FileNotFoundError
    traceback that does not say what to do.
    """

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        missing = [tool for tool in ("sbatch", "srun") if shutil.which(tool) is None]
        if missing:
            raise UserError(
                f"hydra/launcher=slurm submits jobs with SLURM's `sbatch` and `srun`; "
                f"{' and '.join(missing)} is not on PATH here. Run the sweep on a machine of "
                "the cluster (a login node), or try it on this machine with "
                "hydra/launcher=local."
            )
        return super().launch(job_overrides, initial_job_idx)
