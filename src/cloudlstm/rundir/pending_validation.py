"""A checkpoint saved as a validation is due (at the end of the training step it follows, or
during it) that Lightning resumes by running that whole validation first.

Lightning 2.6 resumes such a checkpoint wrongly, whichever way it is saved as it stands:

* saved at the end of the step (``on_train_batch_end``): the resumed loop takes the
  validation as run (``increment_progress_to_evaluation_end``) and trains the next step;
* saved during the validation (``on_validation_batch_end``): the step counts as completed
  (``restarted_on_last``), and the validation is skipped as well;
* saved inside ``validation_step`` (the one state Lightning resumes as
  ``restarted_mid_evaluation``): it validates again, but only as many batches as were left,
  taken from the first one, so that its metrics cover part of the validation set.

So :func:`rewound_to_validation` writes the fit loop's progress counters of the checkpoint
as Lightning's mid-evaluation restart expects them, with no validation batch done: the
training step completed, its logging step not yet counted (as when a validation runs), the
validation begun (one batch ready and started) and none processed. Lightning then goes back
into the validation, runs every batch of it from the first, with its callbacks (early
stopping, the best checkpoint) in the state the checkpoint holds, before the step's, and
trains on. Once that validation has begun, :func:`settle_resumed_validation` takes back the
batch counted as started, which would otherwise mark every later checkpoint of the epoch
as saved mid-evaluation (and resumed into a validation again).

Both read Lightning's loop state, not a public API: where it is not as expected (another
Lightning), they raise :class:`ValueError` (or ``KeyError``) and the caller saves nothing.
"""

from __future__ import annotations

import copy
from typing import Any

import lightning as L

_COUNTERS = ("ready", "started", "processed", "completed")
_TRAIN = "epoch_loop.batch_progress"
_VAL = "epoch_loop.val_loop.batch_progress"


def rewound_to_validation(fit_loop: dict[str, Any], during_validation: bool) -> dict[str, Any]:
    """A copy of the fit loop's state (``checkpoint["loops"]["fit_loop"]``) that resumes
    into the validation of the step it was saved at, from that validation's first batch.

    Args:
        fit_loop: the state, saved at the end of a training step a validation follows
            (``during_validation=False``) or at the end of a batch of that validation.
    """
    state = copy.deepcopy(fit_loop)
    train, val = state[_TRAIN], state[_VAL]
    # at the step's end the step is processed, not yet completed; during its validation, done
    behind = 0 if during_validation else 1
    for key in ("total", "current"):
        counts = _counts(train[key])
        if counts[:3] != [counts[3] + behind] * 3:
            raise ValueError(f"training progress {train[key]} is not at a step's end")
        train[key]["completed"] += behind
    total, current = _counts(val["total"]), _counts(val["current"])
    # the batches validated before this validation (an epoch's earlier ones)
    before = total[3] - current[3] if during_validation else total[3]
    done = [t - c for t, c in zip(total, current, strict=True)] if during_validation else total
    if before < 0 or done != [before] * 4:
        raise ValueError(f"validation progress {val} is not before or in a validation")
    val["total"] = dict(ready=before + 1, started=before + 1, processed=before, completed=before)
    val["current"] = dict(ready=1, started=1, processed=0, completed=0)
    val["is_last_batch"] = False
    return state


def _counts(tracker: dict[str, Any]) -> list[int]:
    counts = [tracker[key] for key in _COUNTERS]
    if not all(isinstance(n, int) for n in counts):
        raise ValueError(f"progress {tracker} is not counts")
    return counts


def check_loops(trainer: L.Trainer) -> None:
    """Raise ``AttributeError`` unless the trainer's loops have the restart stages that
    :func:`rewound_to_validation` relies on (Lightning 2.6's)."""
    epoch_loop = trainer.fit_loop.epoch_loop
    stages = ((epoch_loop, "restarted_on_last"), (epoch_loop.val_loop, "restarted_mid_evaluation"))
    for loop, stage in stages:
        if not hasattr(type(loop), stage):
            raise AttributeError(f"{type(loop).__name__} has no {stage}")


def settle_resumed_validation(trainer: L.Trainer) -> None:
    """As the resumed validation begins: take back the batch that
    :func:`rewound_to_validation` counted as started but not processed."""
    total = trainer.fit_loop.epoch_loop.val_loop.batch_progress.total
    if total.ready == total.started == total.processed + 1:
        total.ready -= 1
        total.started -= 1
