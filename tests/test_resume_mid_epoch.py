"""A run resumed from a checkpoint written mid-epoch ends as the uninterrupted run, bit for bit.

Under a step budget validated every N steps (the default recipe) nearly every checkpoint
is written in the middle of an epoch; the training loader's position and shuffle travel in
it (cloudlstm.data.pipeline.resumable) and the random generators' states too
(cloudlstm.engine.callbacks.RngState).
"""

from __future__ import annotations

import json
import logging
import shutil
import signal
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from lightning.pytorch.trainer.states import TrainerFn
from torch.utils.data import DataLoader, TensorDataset

from cloudlstm.data.pipeline.resumable import ResumableLoader, ShuffleSampler
from cloudlstm.engine.callbacks import RngState
from tests.conftest import TINY, run_python

WINDOWS = TensorDataset(torch.arange(37))  # 8 batches of 5, the last of 2


def loader(num_workers: int = 0, progress=None) -> ResumableLoader:
    return ResumableLoader(
        WINDOWS,
        batch_size=5,
        sampler=ShuffleSampler(len(WINDOWS)),
        num_workers=num_workers,
        persistent_workers=num_workers > 0,
        progress=progress,
    )


def batches(iterator) -> list[list[int]]:
    return [batch[0].tolist() for batch in iterator]


def test_shuffles_and_draws_as_a_shuffling_dataloader():
    """Runs never interrupted are those of DataLoader(shuffle=True): the same batches from
    the same draws of the global generator."""
    torch.manual_seed(3)
    plain = DataLoader(WINDOWS, batch_size=5, shuffle=True)
    expected = [batches(plain) for _ in range(3)]
    after = torch.get_rng_state()
    torch.manual_seed(3)
    ours = loader()
    assert [batches(ours) for _ in range(3)] == expected
    assert torch.equal(torch.get_rng_state(), after)


@pytest.mark.parametrize(
    ("num_workers", "given"),
    [(0, 0), (0, 3), (0, 7), (0, 8), (2, 3), pytest.param(2, 8, marks=pytest.mark.slow)],
)
def test_a_resumed_pass_gives_the_rest_and_draws_nothing(num_workers, given):
    """Stopped after ``given`` batches of a pass (8: all of them), a new loader with the
    saved state and generator gives the batches the first one would have given next, and
    leaves the generator where the first one left it."""
    torch.manual_seed(0)
    first = loader(num_workers)
    batches(first)  # an epoch before: persistent workers started, the generator moved on
    it = iter(first)
    for _ in range(given):
        next(it)
    state, rng = first.state_dict(), torch.get_rng_state()
    expected = batches(it) + batches(first)  # the rest of the pass, then the next epoch
    after = torch.get_rng_state()

    torch.set_rng_state(rng)  # what RngState restores
    resumed = loader(num_workers)
    resumed.load_state_dict(state)
    got = batches(resumed) + (batches(resumed) if given < 8 else [])
    assert got == expected
    assert torch.equal(torch.get_rng_state(), after)


@pytest.mark.parametrize("restored", ["none", "pass over", "pass given out whole"])
def test_an_iterator_never_read_takes_and_draws_nothing(restored):
    """Resumed at an epoch's last step, Lightning makes an iterator for that epoch, reads
    nothing of it, then makes the next epoch's: only the one read begins a pass, drawing
    what a shuffling DataLoader's iterator draws. (A pass given out whole: the state an
    earlier version saved for a pending validation at an epoch's end.)"""
    first = loader()
    batches(first)
    state = first.state_dict()
    assert state["pass"] is None
    if restored == "pass given out whole":
        state = {**state, "pass": {"batches": 8, "seed": None}}
    torch.manual_seed(5)
    expected = batches(DataLoader(WINDOWS, batch_size=5, shuffle=True))
    after = torch.get_rng_state()
    torch.manual_seed(5)
    before = torch.get_rng_state()
    resumed = loader()
    if restored != "none":
        resumed.load_state_dict(state)
    iter(resumed)  # the restored epoch's, never read
    assert torch.equal(torch.get_rng_state(), before)
    assert batches(resumed) == expected
    assert torch.equal(torch.get_rng_state(), after)


def test_a_pass_the_trainer_ended_early_is_over():
    """Under limit_train_batches an epoch ends before the loader does: a checkpoint written
    then resumes into a new pass, not into the rest of the old one."""
    ours = loader(progress=lambda: (ours._batches, 3))
    it = iter(ours)
    next(it), next(it)
    assert ours.state_dict()["pass"]["batches"] == 2
    next(it)
    assert ours.state_dict()["pass"] is None


def test_a_batch_the_trainer_had_not_finished_is_given_again():
    """A checkpoint saved inside a training step (SLURM's signal) counts that step's batch
    as not trained on: Lightning redoes the step, and the resumed pass gives it again."""
    torch.manual_seed(0)
    first = loader(progress=lambda: (2, 8))
    it = iter(first)
    given = [next(it) for _ in range(3)]
    state = first.state_dict()
    assert state["pass"]["batches"] == 2
    expected = batches(given[2:]) + batches(it)
    resumed = loader()
    resumed.load_state_dict(state)
    assert batches(resumed) == expected


@pytest.mark.parametrize(("size", "skip"), [(6, 2), (2, 7), (15, 1)])
def test_a_pass_in_batches_of_another_size_goes_on_from_its_first_unseen_window(size, skip):
    """15 windows of the pass were trained on, in 3 batches of 5: batches of 6 go on from
    window 12 (windows 12-14 come again), of 2 from window 14, of 15 from window 15; the
    trainer's count of the epoch's batches moves from 3 to the batches skipped."""
    first = loader(progress=lambda: (3, 8))
    it = iter(first)
    for _ in range(4):  # the 4th given out, not finished: it comes again
        next(it)
    state = first.state_dict()
    generator = torch.Generator()
    generator.manual_seed(state["pass"]["seed"])
    order = torch.randperm(len(WINDOWS), generator=generator).tolist()
    moved: list[int] = []
    resumed = ResumableLoader(
        WINDOWS, batch_size=size, sampler=ShuffleSampler(len(WINDOWS)), move_progress=moved.append
    )
    resumed.load_state_dict(state)
    rest = batches(resumed)
    assert sum(rest, []) == order[skip * size :]
    assert [len(b) for b in rest[:-1]] == [size] * (len(rest) - 1)
    assert moved == [skip - 3]
    assert len(batches(resumed)) == len(resumed)  # the next pass is whole


@pytest.mark.parametrize("recorded", [True, False])
def test_a_state_of_other_data_starts_a_new_pass(caplog, recorded):
    """Other windows (or, in a state of older code, which records neither its windows nor
    its batch size, another number of batches): no position of the old pass holds, so the
    epoch is a new pass, and the trainer counts it from its first batch."""
    first = loader(progress=lambda: (2, 8))
    it = iter(first)
    for _ in range(3):
        next(it)
    state = {**first.state_dict(), "windows": 45, "num_batches": 9}
    if not recorded:
        del state["windows"], state["batch_size"]
    moved: list[int] = []
    resumed = loader()
    resumed.move_progress = moved.append
    with caplog.at_level(logging.WARNING):
        resumed.load_state_dict(state)
    assert "the training data changed" in caplog.text
    assert len(batches(resumed)) == 8
    assert moved == [-2]


@pytest.mark.parametrize(
    ("device", "loader_state", "step", "said"),
    [
        ("cpu", True, 16, None),
        ("cuda", True, 16, "without trainer.deterministic=true"),
        ("cpu", False, 16, "without the training loader's position"),
        ("cpu", False, 14, None),  # an epoch's end: nothing of the epoch to continue
    ],
)
def test_a_resume_says_what_keeps_it_from_being_exact(caplog, device, loader_state, step, said):
    trainer = SimpleNamespace(
        state=SimpleNamespace(fn=TrainerFn.FITTING),
        strategy=SimpleNamespace(root_device=torch.device(device)),
        num_training_batches=14,
        accumulate_grad_batches=1,
        global_step=step,
    )
    fit_loop = {"state_dict": {"combined_loader": [{}]} if loader_state else {}}
    callback = RngState()
    callback.on_load_checkpoint(trainer, None, {"loops": {"fit_loop": fit_loop}})
    with caplog.at_level(logging.WARNING):
        callback.on_train_start(trainer, None)
    if said is None:
        assert not caplog.records
    else:
        assert len(caplog.records) == 1 and said in caplog.text


# A step budget over epochs of 14 batches, validated (and checkpointed) every 4 steps.
STEP_BUDGET = [
    *[a for a in TINY if not a.startswith(("trainer.max_epochs", "trainer.limit_train"))],
    "trainer.max_epochs=-1",
    "trainer.max_steps=20",
    "trainer.val_check_interval=4",
    "scheduler.warmup_steps=2",
    "report.figures=false",
    # the CSV log, every step's row written at once: the killed process leaves the rows of
    # the steps it ran past its last checkpoint on disk, as one flushing less often may
    "logger=csv",
    "trainer.log_every_n_steps=1",
    "logger.csv.flush_logs_every_n_steps=1",
]
CASES = {
    # killed before step 14: resumed from step 12 of the first epoch's 14, it crosses into
    # the second epoch; its best checkpoint (step 16) comes from the resumed run
    "deterministic": (14, ["trainer.deterministic=true", "optimizer.lr=3e-2"]),
    # as "deterministic", validating and testing an average of the weights: the average
    # and its number of updates travel in the checkpoint beside the live weights
    "ema": (14, ["trainer.deterministic=true", "optimizer.lr=3e-2", "callbacks=ema"]),
    # as "deterministic", the decoder fed the truth at steps drawn as it trains: the
    # resumed run draws what the uninterrupted one does
    "scheduled-sampling": (
        14,
        ["trainer.deterministic=true", "optimizer.lr=3e-2", "module.scheduled_sampling=4"],
    ),
    # killed before step 18: resumed 2 batches into the second epoch; dropout (STID's),
    # worker processes, and default (non-deterministic) kernels, on a CPU
    "dropout-workers": (
        18,
        ["model=stid", "optimizer.lr=1e-2", "data.num_workers=2", "trainer.deterministic=false"],
    ),
}


def run_train(run_dir: Path, data_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    model_options = ("model.k", "model.hidden_channels")
    base = [a for a in STEP_BUDGET if not ("model=stid" in extra and a.startswith(model_options))]
    return run_python(
        "train.py",
        *base,
        f"hydra.run.dir={run_dir}",
        f"paths.data_dir={data_dir}",
        *extra,
        timeout=600,
    )


def log_of(run_dir: Path) -> pd.DataFrame:
    """The run's CSV log, without what a restart cannot give again: the steps' timings,
    and the mean training loss of the epoch the restart came in (Lightning's running means
    are not checkpointed: the restarted process averages its own steps of that epoch)."""
    (path,) = run_dir.glob("csv/*/metrics.csv")  # one log, not one per process
    log = pd.read_csv(path)
    return log.drop(columns=[c for c in log.columns if c.startswith("perf/") or c == "train/loss"])


@pytest.mark.parametrize(
    "case",
    [  # the case with workers and dropout takes the longest: slow
        pytest.param(c, marks=pytest.mark.slow) if c == "dropout-workers" else c
        for c in sorted(CASES)
    ],
)
def test_a_run_killed_mid_epoch_resumes_bit_exactly(tmp_path, case):
    kill_at, extra = CASES[case]
    saved_at = kill_at - 2  # the last validation before the kill
    killed = whole_and_killed(tmp_path, kill_at, extra)
    assert killed["global_step"] == saved_at and saved_at % 14 != 0  # mid-epoch
    (loader_state,) = killed["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    assert loader_state["pass"]["batches"] == saved_at % 14
    assert_resumed_as_whole(tmp_path, extra, steps=20, ema=case == "ema")


def test_a_run_killed_after_a_validation_at_an_epochs_end_resumes_bit_exactly(tmp_path):
    """Validated every 7 steps (to step 21), the step-14 validation falls on the first
    epoch's last step: killed before step 16, the run resumes from the checkpoint of that
    validation's end, and its next epoch (a new pass: its shuffle drawn as the uninterrupted
    run's) and every step after are the uninterrupted run's."""
    extra = [*CASES["deterministic"][1], "trainer.val_check_interval=7", "trainer.max_steps=21"]
    killed = whole_and_killed(tmp_path, 16, extra)
    assert killed["global_step"] == 14  # the epoch's end
    (loader_state,) = killed["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    assert loader_state["pass"] is None  # the pass over, the next not begun
    assert_resumed_as_whole(tmp_path, extra, steps=21)


def whole_and_killed(tmp_path: Path, kill_at: int, extra: list[str]) -> dict:
    """Run ``tmp_path/whole`` to its end, and ``tmp_path/killed`` (the same data) until
    it is SIGKILLed before step ``kill_at``; the killed run's last checkpoint."""
    data = tmp_path / "data"
    whole = run_train(tmp_path / "whole", data, *extra)
    assert whole.returncode == 0, whole.stderr[-3000:]
    run_dir = tmp_path / "killed"
    killed = run_train(
        run_dir,
        data,
        *extra,
        "+callbacks.kill._target_=tests.kill_callback.KillAtStep",
        f"+callbacks.kill.step={kill_at}",
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert log_of(run_dir)["step"].max() >= last["global_step"] + 1  # rows the resumed run redoes
    return last


def assert_resumed_as_whole(
    tmp_path: Path, extra: list[str], steps: int, ema: bool = False
) -> None:
    """Resume ``tmp_path/killed`` (whole_and_killed) and check that it ends as
    ``tmp_path/whole``, bit for bit, at step ``steps``: test and val metrics, the CSV log,
    the final weights (an average of them too, where ``ema``) and optimizer moments."""
    run_dir = tmp_path / "killed"
    # the same command without the kill (a setting of the run: allowed), the same directory
    resumed = run_train(run_dir, tmp_path / "data", *extra, "allow_changes=[callbacks.kill]")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    output = resumed.stdout + resumed.stderr
    assert "Resuming from" in output
    assert "not resumable" not in output  # Lightning's warning for a loader without state

    expected = json.loads((tmp_path / "whole" / "metrics.json").read_text())
    got = json.loads((run_dir / "metrics.json").read_text())
    assert got["test"] == expected["test"]  # bit-identical: every metric, step and channel
    assert got["val"] == expected["val"]  # the last validation's, of the final weights
    assert Path(got["checkpoint"]).name == Path(expected["checkpoint"]).name
    # one log across both processes, each step's row once, with the values of one run
    pd.testing.assert_frame_equal(log_of(run_dir), log_of(tmp_path / "whole"))
    final = [
        torch.load(d / "checkpoints" / "last.ckpt", weights_only=False)
        for d in (tmp_path / "whole", run_dir)
    ]
    assert final[0]["global_step"] == final[1]["global_step"] == steps
    for key in ("state_dict", "current_model_state", "averaging_state"):  # the last two: ema
        weights = [f.get(key, {}) for f in final]
        assert weights[0].keys() == weights[1].keys()
        assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert ("averaging_state" in final[0]) == ema
    moments = [f["optimizer_states"][0]["state"] for f in final]
    assert all(
        torch.equal(moments[0][p][s], moments[1][p][s]) for p in moments[0] for s in moments[0][p]
    )


@pytest.fixture(scope="module")
def killed_mid_epoch(tmp_path_factory) -> Path:
    """A run killed before step 14: its last checkpoint is 12 batches of 8 into epoch 0."""
    root = tmp_path_factory.mktemp("killed")
    kill_at, extra = CASES["deterministic"]
    killed = run_train(
        root / "run",
        root / "data",
        *extra,
        "+callbacks.kill._target_=tests.kill_callback.KillAtStep",
        f"+callbacks.kill.step={kill_at}",
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    return root


@pytest.mark.parametrize("size", [16, 4])
def test_a_run_resumed_mid_epoch_in_batches_of_another_size_goes_on_with_its_pass(
    tmp_path, killed_mid_epoch, size
):
    """Resumed with data.batch_size changed, the epoch goes on from window 96 of its pass
    (12 batches of 8), in batches of the new size, and the trainer counts its batches from
    there: batch 6 of 16 windows, or 24 of 4, not 12; the epoch ends with the pass."""
    run_dir = tmp_path / "run"
    shutil.copytree(killed_mid_epoch / "run", run_dir)
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    (state,) = last["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    assert (state["pass"]["batches"], state["batch_size"]) == (12, 8)
    windows = state["windows"]

    probe = tmp_path / "batches.jsonl"
    resumed = run_train(
        run_dir,
        killed_mid_epoch / "data",
        *CASES["deterministic"][1],
        f"data.batch_size={size}",
        "+callbacks.probe._target_=tests.batch_probe.RecordBatches",
        f"+callbacks.probe.path={probe}",
        "allow_changes=[callbacks,data.batch_size]",
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"goes on from window 96 of {windows}" in resumed.stdout + resumed.stderr
    rows = [json.loads(line) for line in probe.read_text().splitlines()]
    epoch_0 = [r for r in rows if r["epoch"] == 0]
    skip = 96 // size
    batches_per_epoch = -(-windows // size)
    assert [r["batch_idx"] for r in epoch_0] == list(range(skip, batches_per_epoch))
    assert [r["step"] for r in epoch_0] == list(range(12, 12 + len(epoch_0)))
    assert sum(r["size"] for r in epoch_0) == windows - 96
    epoch_1 = [r for r in rows if r["epoch"] == 1]
    assert epoch_1[0]["batch_idx"] == 0 and epoch_1[0]["step"] == 12 + len(epoch_0)


@pytest.fixture(scope="module")
def killed_in_a_limited_epoch(tmp_path_factory) -> Path:
    """A run of epochs limited to 10 batches of 8 (of 14), killed before step 10: its last
    checkpoint is 8 batches into epoch 0."""
    root = tmp_path_factory.mktemp("killed_limited")
    killed = run_train(
        root / "run",
        root / "data",
        *CASES["deterministic"][1],
        "trainer.limit_train_batches=10",
        "+callbacks.kill._target_=tests.kill_callback.KillAtStep",
        "+callbacks.kill.step=10",
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    return root


@pytest.mark.parametrize(("size", "rest"), [(16, [4, 5, 6]), (4, [])])
def test_a_limited_epoch_resumed_in_batches_of_another_size_takes_what_its_limit_allows(
    tmp_path, killed_in_a_limited_epoch, size, rest
):
    """Under limit_train_batches=10, 8 batches of 8 trained on: in batches of 16 the epoch
    goes on with batches 4-6 of its 7; in batches of 4 its 10 batches (40 windows) are
    behind it, so the epoch is over and the next starts at batch 0. The trainer counted the
    skipped batches past its limit, and trained on into the rest of the pass."""
    run_dir = tmp_path / "run"
    shutil.copytree(killed_in_a_limited_epoch / "run", run_dir)
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    (state,) = last["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    assert (state["pass"]["batches"], state["batch_size"], state["num_batches"]) == (8, 8, 14)
    epoch_length = min(10, -(-state["windows"] // size))
    probe = tmp_path / "batches.jsonl"
    resumed = run_train(
        run_dir,
        killed_in_a_limited_epoch / "data",
        *CASES["deterministic"][1],
        "trainer.limit_train_batches=10",
        f"data.batch_size={size}",
        "+callbacks.probe._target_=tests.batch_probe.RecordBatches",
        f"+callbacks.probe.path={probe}",
        "allow_changes=[callbacks,data.batch_size]",
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    if not rest:
        said = "the resumed epoch is over, and the next starts a new pass"
        assert said in resumed.stdout + resumed.stderr
    rows = [json.loads(line) for line in probe.read_text().splitlines()]
    assert [r["batch_idx"] for r in rows if r["epoch"] == 0] == rest
    epoch_1 = [r for r in rows if r["epoch"] == 1]
    assert [r["batch_idx"] for r in epoch_1] == list(range(len(epoch_1)))
    assert epoch_1[0]["step"] == 8 + len(rest)
    assert len(epoch_1) == min(epoch_length, 20 - 8 - len(rest))  # max_steps=20
