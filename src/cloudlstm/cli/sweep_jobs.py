"""How a sweep names its jobs that did not finish: one line per job, then what to do.

Shared by the default sweeper (``hydra_plugins.cloudlstm_sweeper``: jobs run here or by
joblib) and the SLURM launcher (``hydra_plugins.cloudlstm_launchers``).
"""

from __future__ import annotations

from collections.abc import Sequence

from hydra.core.utils import filter_overrides


def own_overrides(overrides: Sequence[str], shared: set[str]) -> str:
    """A job's overrides less those every job of the sweep has: what tells it apart."""
    own = [o for o in filter_overrides(overrides) if o not in shared]
    return " ".join(own) or "the sweep's overrides"


def shared_overrides(job_overrides: Sequence[Sequence[str]]) -> set[str]:
    """The overrides every job of the sweep has."""
    return set.intersection(*(set(o) for o in job_overrides)) if job_overrides else set()


def first_line(err: BaseException) -> str:
    """An error's first line: its message's, or its type where it has none."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def unfinished_report(lines: Sequence[str], total: int, sweep_dir: str, what: str) -> str:
    """``<n> of <total> jobs of the sweep <what>:``, a line per job, and how to rerun them."""
    return (
        f"{len(lines)} of {total} jobs of the sweep {what}:\n  "
        + "\n  ".join(lines)
        + f"\nStart the same command with hydra.sweep.dir={sweep_dir} to run them again "
        "(finished jobs return their results at once)."
    )
