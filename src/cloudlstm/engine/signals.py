"""Signals that stop or requeue a run, acted on at the end of a training step, by every DDP
process at the same step.

Lightning's own handling of SIGTERM sets its stop flag in the handler, wherever the signal
finds the loop, and the loop checks the flag after the step's end hooks (and after the
validation that follows, when one does). A SIGTERM between ``CheckpointOnSigterm``'s
step-end hook and that check stopped the run without the checkpoint of its step. So with one
process :class:`SignalsTogether` notes a SIGTERM (or Ctrl-C) that comes while the run trains
and sets Lightning's flag at the end of the next training step, before
``CheckpointOnSigterm`` looks at it: every such stop saves its step (where a validation
follows, as one that runs it when resumed, as ``CheckpointOnSigterm`` says), whereas a
checkpoint saved at an epoch's end resumes into the wrong epoch count (Lightning counts the
epoch's end again). One noted after the last training step is acted on as testing starts,
which then stops. One that comes while the run validates, tests or checks its validation
loop sets the flag at once: the evaluation stops at its next batch, as Lightning's does
(a validation of the fit's, with its step saved to validate again when resumed).

SLURM's requeue signal (SIGUSR1, with Lightning's auto-requeue) runs Lightning's requeue,
which saves ``hpc_ckpt_<n>.ckpt`` and requeues the job; Lightning's handler does so at once,
wherever the signal finds the loop: inside a training step, at a step a validation
follows or during that validation, which Lightning's resume then skips or runs in part
(:mod:`cloudlstm.rundir.pending_validation`). So in a fit the handler only notes the
signal here too, and the requeue runs at the end of the training step under way,
or of the batch of the fit's validation under way: ``CheckpointOnSigterm`` runs it, after
the other callbacks' hooks, saved where a validation is due as a checkpoint that runs that
whole validation when resumed (:mod:`cloudlstm.rundir.preemption`). One noted after the
last training step's validation is run as the training ends; in a test, Lightning's handler
is left as it is.

With several processes Lightning's handling goes wrong, because each process acts where the
signal finds it:

* Lightning's SIGTERM handler runs a ``broadcast`` inside the handler, in every process the
  signal reaches (and rank 0 passes the signal on to the processes it started, which then
  get it twice). Those collectives pair with whatever collective the other processes are
  in at that moment (a gradient all-reduce, a buffer broadcast): the processes wait on each
  other for good. A stopped ``ddp_cpu`` run hung this way until killed.
* Its SIGUSR1 handler saves a checkpoint inside the handler, and a save is collective.

:class:`SignalsTogether` replaces both handlers under DDP by ones that only note the
signal. At the end of every training step the processes then tell each other what they
noted (one all-reduce of two numbers) and act together, at the same step:

* SIGTERM: Lightning's stop flag is set in every process, so its loops stop together
  after this step (after the validation that follows it, if one does, so that the
  validation and its checkpoints complete). ``CheckpointOnSigterm`` saves ``last.ckpt``
  at that step as it does for one process (:mod:`cloudlstm.rundir.preemption`).
* SIGUSR1 in a SLURM job with auto-requeue: Lightning's requeue (``hpc_ckpt_<n>.ckpt``,
  ``scontrol requeue``) runs in every process at that step (one noted during a validation,
  at the end of the next training step).

A signal that comes while no training step runs (validation, testing, a sanity check) is
acted on at the end of the next training step; one during testing lets the test finish.

Where gradients are accumulated over several batches (``trainer.accumulate_grad_batches``),
"the end of a training step" is the end of the optimizer step: the batches of a window
still to come run first, so the checkpoint holds no half-gathered gradient.

Ctrl-C (SIGINT) stops a run as SIGTERM does, with one process or several: the run ends
at the end of the training step under way, saving ``last.ckpt`` there
(``CheckpointOnSigterm``), and its line says how to continue it. Lightning's own handling
stops at once, saves nothing and says nothing of resuming. A second Ctrl-C stops at once
(Lightning's KeyboardInterrupt shutdown), from the newest checkpoint already written.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import lightning as L
import torch
import torch.distributed as dist
from lightning.pytorch.utilities.rank_zero import rank_prefixed_message

from cloudlstm.engine import ctrl_c_noted
from cloudlstm.engine.callbacks import accumulating

log = logging.getLogger(__name__)

__all__ = ["SignalsTogether", "ctrl_c_kept"]


class SignalsTogether(L.Callback):
    """Act on SIGTERM, Ctrl-C and SLURM's requeue signal in every DDP process at the same
    step; with one process, on Ctrl-C as Lightning acts on SIGTERM.

    Added by the trainer's assembly in front of the configured callbacks (its step-end hook
    runs before ``CheckpointOnSigterm``'s), so that every run has it, ``callbacks=none``
    included.
    """

    def __init__(self) -> None:
        self.terminate = False  # SIGTERM noted in this process, not yet acted on
        self.requeue = False  # SLURM's requeue signal noted, not yet acted on
        # set at a step's end where the requeue is due (every DDP process at once); run
        # there by the callback named in requeue_by (CheckpointOnSigterm), else here
        self.requeue_due = False
        self.requeue_by: L.Callback | None = None
        self.ctrl_c = 0  # Ctrl-Cs received
        self._after_validation = False  # stop once the validation under way has ended
        self._requeue_fn: Any = None  # Lightning's SIGUSR1 handler, run at the agreed step
        self._rank = 0
        self._trainer: L.Trainer | None = None
        self._sigint: Any = None  # the SIGINT handler before this one's, restored after

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._trainer = trainer
        if self._sigint is None and _ctrl_c_reaches_us():
            self._sigint = signal.signal(signal.SIGINT, self._note_ctrl_c)
        if ctrl_c_noted.pressed_before_training():  # and Python lost it on the way
            self.ctrl_c += 1  # the run's stop is a Ctrl-C's (rundir.preemption)
            raise KeyboardInterrupt  # Lightning's shutdown, before any step
        # Lightning registers its handlers after this hook (Trainer._run), from these
        # attributes of its signal connector: put the noting ones in their place
        connector = trainer._signal_connector
        connector._sigterm_notifier_fn = self._note_sigterm
        self._rank = trainer.global_rank
        if self._requeue_fn is None:
            self._requeue_fn = connector._slurm_sigusr_handler_fn
        if trainer.world_size > 1 or stage == "fit":
            connector._slurm_sigusr_handler_fn = self._note_requeue
        else:  # one process's test, validation or prediction: Lightning's requeue, at once
            connector._slurm_sigusr_handler_fn = self._requeue_fn

    @property
    def stop_pending(self) -> bool:
        """Whether a SIGTERM or Ctrl-C was noted and the run not yet told to stop."""
        trainer = self._trainer
        return self.terminate and not (trainer is not None and trainer.received_sigterm)

    def _note_sigterm(self, signum: int, _: Any) -> None:
        if self._one_process():
            if not self.stop_pending:
                where = "at the end of this training step" if self._stop() else "now"
                log.info("Received SIGTERM: the run stops %s.", where)
            return
        if not self.terminate:
            log.info(
                rank_prefixed_message(
                    "Received SIGTERM: every process stops at the end of a training step.",
                    self._rank,
                )
            )
        self.terminate = True

    def _one_process(self) -> bool:
        return self._trainer is None or self._trainer.world_size < 2

    def _stop(self) -> bool:
        """One process: stop at the end of the training step under way (True), or at once
        where the run is not training (an evaluation then stops at its next batch)."""
        trainer = self._trainer
        if trainer is None or trainer.training:
            self.terminate = True  # Lightning's flag is set at the step's end
            return True
        trainer._signal_connector.received_sigterm = True
        return False

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self._sigint is not None:
            signal.signal(signal.SIGINT, self._sigint)
            self._sigint = None

    def _note_ctrl_c(self, signum: int, _: Any) -> None:
        self.ctrl_c += 1
        if self.ctrl_c > 1:
            raise KeyboardInterrupt  # the user insists: Lightning's shutdown, at once
        again = "Ctrl-C again stops it at once."
        message = (
            "Ctrl-C: the run stops at the end of this training step, saving a checkpoint to "
            f"continue from; {again}"
        )
        if not self._one_process():
            log.warning(rank_prefixed_message(message, self._rank))
            self.terminate = True  # the processes stop together (on_train_batch_end)
        elif self._stop():
            log.warning(message)
        else:  # validating (its step saved, CheckpointOnSigterm) or testing
            log.warning("Ctrl-C: the run stops after this batch of its evaluation; %s", again)

    def _note_requeue(self, signum: int, _: Any) -> None:
        if not self.requeue:
            if self._one_process():
                message = (
                    f"Received {_name(signum)}: the job is requeued at the end of this "
                    "training step or batch of its validation."
                )
                log.info(message)
            else:
                message = f"Received {_name(signum)}: the processes requeue the job together."
                log.info(rank_prefixed_message(message, self._rank))
        self.requeue = True

    def run_requeue(self) -> None:
        """Lightning's requeue: save ``hpc_ckpt_<n>.ckpt`` (collectively) and requeue the
        job (rank 0), as its SIGUSR1 handler would; here, at a step's or batch's end."""
        self.requeue = self.requeue_due = False
        if self._requeue_fn is not None:
            self._requeue_fn(signal.SIGUSR1, None)

    def on_train_batch_end(self, trainer: L.Trainer, *_: Any) -> None:
        if trainer.world_size < 2:
            if not accumulating(trainer):
                self._act_on_noted_stop(trainer)
                self._requeue_at_step_end(self.requeue)
            return
        if not (dist.is_available() and dist.is_initialized()):
            return
        terminate, requeue = self._agree(trainer)
        if accumulating(trainer):  # every process is at the same batch of the window
            return
        self._requeue_at_step_end(requeue)
        if terminate and not trainer.received_sigterm:
            if _validates_now(trainer):
                self._after_validation = True
            else:
                trainer._signal_connector.received_sigterm = True

    def _requeue_at_step_end(self, requeue: bool) -> None:
        """The requeue agreed at this step's end: run by ``requeue_by`` (its step-end hook
        comes after the other callbacks'), or here, where there is none."""
        self.requeue_due = requeue
        if requeue and self.requeue_by is None:
            self.run_requeue()

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.requeue and trainer.world_size < 2:  # noted after the last step's validation
            self.run_requeue()

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.world_size < 2:  # noted after the last training step had ended
            self._act_on_noted_stop(trainer)

    def _act_on_noted_stop(self, trainer: L.Trainer) -> None:
        if self.stop_pending:
            trainer._signal_connector.received_sigterm = True

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._after_validation:  # every process ran the whole validation
            self._after_validation = False
            trainer._signal_connector.received_sigterm = True

    def _agree(self, trainer: L.Trainer) -> tuple[bool, bool]:
        """Whether any process noted SIGTERM, SLURM's requeue signal (one all-reduce)."""
        noted = torch.tensor(
            [float(self.terminate), float(self.requeue)], device=trainer.strategy.root_device
        )
        dist.all_reduce(noted, op=dist.ReduceOp.MAX)
        terminate, requeue = (bool(v) for v in noted.tolist())
        return terminate, requeue


@contextmanager
def ctrl_c_kept() -> Iterator[None]:
    """Within the block, a Trainer may fit or test: after it, SIGINT is handled as before it.

    Why: Lightning's shutdown after a KeyboardInterrupt (a second Ctrl-C, or one Python lost
    before training) skips the callbacks' teardown, so :class:`SignalsTogether` cannot put
    back the handler it replaced: SIGINT is left ignored (Lightning's shutdown ignores it,
    for good) or with the finished run's handler. A process that goes on (a notebook's
    kernel, a script training one model after another) could then no longer be interrupted
    as before.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread handles signals
        return
    before = signal.getsignal(signal.SIGINT)
    try:
        yield
    finally:
        if before is not None and signal.getsignal(signal.SIGINT) is not before:
            signal.signal(signal.SIGINT, before)


def _ctrl_c_reaches_us() -> bool:
    """Whether this thread may handle SIGINT (the main thread) and the process does not
    ignore it (as a job started with ``&`` by a script does, or under ``nohup``-like
    launchers): then, as Python itself does, it stays ignored."""
    main = threading.current_thread() is threading.main_thread()
    return main and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN


def _validates_now(trainer: L.Trainer) -> bool:
    """Whether a validation follows the training step that just ended (False where
    Lightning's loop cannot say: the processes then stop at once, together)."""
    loop = trainer.fit_loop
    try:
        return bool(loop.epoch_loop._should_check_val_fx(loop._data_fetcher))
    except Exception:  # Lightning's private API changed
        return False


def _name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
