"""Result campaigns on a GPU machine: the runs that take a CPU core hours each, side by side
on one GPU under a deadline, their results packed into one archive.

    python benchmarks/gpu_campaign.py PLAN [--seconds S] [--out DIR] [--work DIR] [--data DIR]
                                           [--device cpu] [--smoke] [--set KEY=VALUE ...]

A plan (:data:`PLANS`) is one or more ``train.py -m`` sweeps of an experiment preset, each
run with Hydra's joblib launcher (every job of a sweep at once) on the one GPU, followed by
the ``eval.py`` re-tests its runs need. The runs write where the preset puts them, under
``<work>/outputs/`` (``--work``, by default a folder in the system's temporary one), so the
archive unpacks into a checkout's ``outputs/`` as if they had run there.

* **Deadline.** At ``--seconds`` the sweep gets SIGTERM: its running jobs save
  ``last.ckpt`` and stop (docs/cluster.md, "A stopped run says so"). The archive holds
  finished runs only, since a GPU machine starts bare and a checkpoint is too large to
  bring back; ``campaign.json`` names every run, whether it finished and how far it got.
* **Float32 as on a CPU.** ``NVIDIA_TF32_OVERRIDE=0`` keeps cuBLAS and cuDNN from rounding
  float32 products to TF32 (cuDNN's RNNs and convolutions do by default on Ampere and
  newer), so a run differs from its CPU twin by rounding order alone.
* **Data.** ``--data DIR`` (default ``.gpu_data`` in the checkout, where
  ``benchmarks/gpu_prepare.sh`` copies the shared data sets, when it exists) is where the
  presets read Beijing, METR-LA and Milan (their ``CLOUDLSTM_*_ROOT`` variables).
* **Output.** ``runs.tar.gz`` (each finished run's ``metrics.json`` and ``config.yaml``,
  and its ``eval/*/`` ones, paths from ``outputs/``), ``campaign.json`` (the commands, their
  exit codes and seconds, each run folder and whether it finished), ``logs.tar.gz`` (every
  run's ``train.log``, finished or not: its progress lines say how far and how fast a run
  went) and ``campaign.log``.
* **Part of a plan.** ``--set KEY=VALUE`` replaces each sweep's override of ``KEY`` (or adds
  one): ``--set model=cloudgru_k3 --set seed=1,2`` runs those jobs of the plan alone, and
  ``--set hydra.launcher.n_jobs=3`` three at a time, so that the first ones finish before
  a deadline that all of them at once would miss.

``--device cpu`` runs the same commands with ``trainer=cpu``; with ``--smoke`` every run
trains a few steps, which checks a plan end to end where there is no GPU. On the GPU
machine, after ``benchmarks/gpu_wheels.sh``'s install line::

    PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 \\
        python3 benchmarks/gpu_campaign.py beijing_knn --seconds 420 --out $OUT

and here, with the files that came back (``files_at``)::

    tar xzf <files_at>/runs.tar.gz -C outputs
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from cloudlstm.cli.arguments import positive_number

ROOT = Path(__file__).resolve().parents[1]
DATA_ROOTS = {  # preset variable -> folder of ../shared/data (and of --data)
    "CLOUDLSTM_BEIJING_ROOT": "beijing_multisite",
    "CLOUDLSTM_METR_LA_ROOT": "metr_la_week",
    "CLOUDLSTM_MILAN_ROOT": "milan_telecom",
}
GRACE_S = 120  # after SIGTERM: the jobs' save and the sweep's report, then SIGKILL
# every job's progress bar would write to the one log that comes back (16 MiB at most)
QUIET = ("trainer.enable_progress_bar=false",)
# --smoke: a few batches per test, and a few steps per run
SMOKE_TEST = ("trainer.limit_test_batches=2",)
SMOKE = ("trainer.max_steps=4", "scheduler.warmup_steps=1", "trainer.val_check_interval=2",
         "trainer.limit_val_batches=2", *SMOKE_TEST)  # fmt: skip


@dataclass(frozen=True)
class Eval:
    """``eval.py run=<dir> <overrides>`` for each finished run whose folder, relative to
    ``outputs/``, matches ``runs`` (a glob)."""

    runs: str
    overrides: tuple[str, ...]


@dataclass(frozen=True)
class Sweep:
    """One ``train.py -m <overrides>``, its :attr:`jobs` runs all at once, then its evals."""

    overrides: tuple[str, ...]
    evals: tuple[Eval, ...] = ()

    @property
    def jobs(self) -> int:
        """The runs of the sweep: the product of its comma lists' lengths."""
        return math.prod(len(_value(o).split(",")) for o in self.overrides if _sweeps(o))

    def with_overrides(self, settings: tuple[str, ...]) -> Sweep:
        """The sweep with each ``KEY=VALUE`` of ``settings`` in place of its own override of
        ``KEY``, or added where it has none (``--set model=cloudgru_k3 --set seed=1,2``)."""
        replaced = {_key(s): s for s in settings}
        kept = tuple(replaced.pop(_key(o), o) for o in self.overrides)
        return replace(self, overrides=kept + tuple(replaced.values()))


def _key(override: str) -> str:
    return override.split("=", 1)[0]


def _value(override: str) -> str:
    return override.split("=", 1)[1]


def _sweeps(override: str) -> bool:
    """A comma list (Hydra's sweep), not a list or dict value such as ``[a,b]``."""
    value = _value(override)
    return "," in value and not value.startswith(("[", "{"))


PLANS: dict[str, tuple[Sweep, ...]] = {
    # docs/held_out_sites.md: the two kNN-LSTMs' three draws, and K = 3's test without
    # the held-out stations' readings.
    "beijing_knn": (
        Sweep(
            ("experiment=beijing_held_out", "model=knn_lstm,knn_lstm_k3", "seed=0,1,2"),
            evals=(Eval("beijing_held_out/*/knn_lstm_k3/seed_*", ("data.holdout_history=false",)),),
        ),
    ),
    # docs/results.md, "Held-out squares on Milan": the models CPU runs have not reached.
    "milan_held_out": (
        Sweep(
            (
                "experiment=milan_held_out",
                "model=knn_lstm,knn_lstm_k3,cloudlstm_k3,cloudgru_k3,attention_cloudlstm_k3",
                "seed=0,1,2",
            ),
            evals=tuple(
                Eval(f"milan_held_out/*/{model}/seed_*", ("data.holdout_history=false",))
                for model in (
                    "knn_lstm_k3",
                    "cloudlstm_k3",
                    "cloudgru_k3",
                    "attention_cloudlstm_k3",
                )
            ),
        ),
    ),
    # docs/results.md, "METR-LA's week": the graph baselines, then the CloudLSTM family.
    "metr_la_graph": (
        Sweep(
            ("experiment=metr_la", "model=dcrnn,graph_wavenet,agcrn,staeformer", "seed=0,1,2"),
        ),
    ),
    # Eager: compiling the CloudLSTM family takes 5 minutes on METR-LA's week, more than
    # 2,000 eager steps (docs/performance.md, "Sizing the METR-LA plans").
    "metr_la_cloud": (
        Sweep(
            (
                "experiment=metr_la",
                "model=convlstm,predrnnpp,cloudlstm_k3,cloudgru_k3,attention_cloudlstm_k3",
                "seed=0,1,2",
                "model.compile=false",
            ),
        ),
    ),
    # docs/results.md, "Milan": the baselines the CPU runs have not reached, on both splits
    # (a run the CPU finished first is simply run again here).
    "milan_zoo": (
        Sweep(("experiment=milan", "model=staeformer,predrnnpp", "seed=0,1,2")),
        Sweep(
            (
                "experiment=milan_ordinary_weeks",
                "model=dcrnn,graph_wavenet,staeformer,predrnnpp",
                "seed=0,1,2",
            ),
        ),
    ),
    # docs/results.md, "Milan": the CloudLSTM family's other two cells, and CloudLSTM at
    # K = 6 and 9 for K chosen on validation, on both splits.
    "milan_cloud": tuple(
        Sweep(
            (
                f"experiment={preset}",
                "model=cloudgru_k3,attention_cloudlstm_k3,cloudlstm_k6,cloudlstm",
                "seed=0,1,2",
            ),
        )
        for preset in ("milan", "milan_ordinary_weeks")
    ),
}


@dataclass
class Step:
    """One command of the campaign and what became of it."""

    command: list[str]
    exit_code: int | None = None
    seconds: float = 0.0
    stopped_at_deadline: bool = False


def run_until(command: list[str], deadline: float, env: dict[str, str], log: Path,
              grace: float = GRACE_S) -> Step:  # fmt: skip
    """Run ``command`` from the checkout, appending its output to ``log``; at ``deadline``
    (a ``time.monotonic()``) SIGTERM its process alone (a sweep's parent passes it on to its
    jobs), then SIGKILL its process group ``grace`` seconds later."""
    step = Step(command)
    start = time.monotonic()
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(command)}\n")
        out.flush()
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        try:
            step.exit_code = process.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            step.stopped_at_deadline = True
            process.send_signal(signal.SIGTERM)
            try:
                step.exit_code = process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                step.exit_code = process.wait()
    step.seconds = round(time.monotonic() - start, 1)
    return step


N_JOBS = "hydra.launcher.n_jobs"  # the jobs of a sweep that run at once
# the run folders of every plan's presets: <model>/seed_<s> under the preset's sweep folder
RUNS = "**/seed_*"


def run_folders(outputs: Path, pattern: str) -> list[Path]:
    """The run folders under ``outputs`` matching ``pattern`` (those with a
    ``config.yaml``, i.e. runs that began), sorted."""
    return sorted(p for p in outputs.glob(pattern) if (p / "config.yaml").is_file())


def finished(run: Path) -> bool:
    """A run is finished when it wrote its ``metrics.json``."""
    return (run / "metrics.json").is_file()


def state(run: Path) -> dict[str, Any]:
    """Whether ``run`` finished, the checkpoints it left (where an unfinished one got) and
    its last progress line (the step, the score and the seconds a step), or None."""
    checkpoints = sorted(p.name for p in (run / "checkpoints").glob("*.ckpt"))
    return {"finished": finished(run), "checkpoints": checkpoints, "progress": last_progress(run)}


PROGRESS = "[cloudlstm.engine.progress_log][INFO] - "  # how train.log heads a progress line


def last_progress(run: Path) -> str | None:
    """The last progress line of ``run``'s ``train.log``, without its time and source."""
    log = run / "train.log"
    lines = log.read_text(errors="replace").splitlines() if log.is_file() else []
    found = [line.split(PROGRESS, 1)[1] for line in lines if PROGRESS in line]
    return found[-1] if found else None


def pack(outputs: Path, archive: Path) -> list[str]:
    """Write each finished run's ``metrics.json`` and ``config.yaml`` (and those of its
    ``eval/*/``) to ``archive``, as paths relative to ``outputs``; return the runs."""
    runs = [run for run in run_folders(outputs, RUNS) if finished(run)]
    with tarfile.open(archive, "w:gz") as tar:
        for run in runs:
            for name in ("metrics.json", "config.yaml"):
                tar.add(run / name, arcname=str((run / name).relative_to(outputs)))
            for evaluation in sorted((run / "eval").glob("*/metrics.json")):
                for name in ("metrics.json", "config.yaml"):
                    path = evaluation.parent / name
                    if path.is_file():
                        tar.add(path, arcname=str(path.relative_to(outputs)))
    return [str(r.relative_to(outputs)) for r in runs]


def pack_logs(outputs: Path, archive: Path) -> list[str]:
    """Write every run's ``train.log``, finished or not, to ``archive`` (its progress lines
    say how far a run got and how fast, which sizes the next plan); return the runs."""
    logs = [run / "train.log" for run in run_folders(outputs, RUNS)]
    logs = [log for log in logs if log.is_file()]
    with tarfile.open(archive, "w:gz") as tar:
        for log in logs:
            tar.add(log, arcname=str(log.relative_to(outputs)))
    return [str(log.parent.relative_to(outputs)) for log in logs]


def environment(data: Path | None, device: str) -> dict[str, str]:
    """The commands' environment: the data roots, the outputs' root, float32 kept."""
    env = dict(os.environ, PROJECT_ROOT=str(ROOT), PYTHONUNBUFFERED="1")
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if device == "gpu":
        env["NVIDIA_TF32_OVERRIDE"] = "0"
    if data is not None:
        for variable, folder in DATA_ROOTS.items():
            if (data / folder).is_dir():
                env[variable] = str(data / folder)
    return env


def train_command(sweep: Sweep, outputs: Path, device: str, smoke: bool) -> list[str]:
    """``train.py -m`` for ``sweep``: all its jobs at once on the device (or as many as its
    own ``hydra.launcher.n_jobs=N`` says, a pool: the next starts as one ends), CSV logs."""
    at_once = [o for o in sweep.overrides if _key(o) == N_JOBS]
    jobs = int(_value(at_once[0])) if at_once else sweep.jobs
    threads = max(1, (os.cpu_count() or 1) // jobs)
    return [
        sys.executable, "train.py", "-m", *sweep.overrides,
        f"trainer={device}", "hydra/launcher=joblib", *([] if at_once else [f"{N_JOBS}={jobs}"]),
        f"torch_threads={threads}", "logger=csv", f"paths.log_dir={outputs}", *QUIET,
        *(SMOKE if smoke else ()),
    ]  # fmt: skip


def eval_commands(evaluation: Eval, outputs: Path, device: str, smoke: bool) -> list[list[str]]:
    """``eval.py`` for each finished run the evaluation names."""
    return [
        [sys.executable, "eval.py", f"run={run}", *evaluation.overrides, f"trainer={device}",
         *QUIET, *(SMOKE_TEST if smoke else ())]
        for run in run_folders(outputs, evaluation.runs)
        if finished(run)
    ]  # fmt: skip


def campaign(plan: str, seconds: float, out: Path, work: Path, data: Path | None, device: str,
             smoke: bool, settings: tuple[str, ...] = (), grace: float = GRACE_S,
             ) -> dict[str, Any]:  # fmt: skip
    """Run ``plan``, each sweep with ``settings`` (:meth:`Sweep.with_overrides`), until
    ``seconds`` from now (then SIGTERM, and SIGKILL ``grace`` seconds later); write the
    archives, the JSON and the log."""
    deadline = time.monotonic() + seconds
    outputs = work / "outputs"
    outputs.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    env, log = environment(data, device), out / "campaign.log"
    steps: list[Step] = []
    for sweep in (s.with_overrides(settings) for s in PLANS[plan]):
        if time.monotonic() >= deadline:
            break
        command = train_command(sweep, outputs, device, smoke)
        steps.append(run_until(command, deadline, env, log, grace))
        for evaluation in sweep.evals:
            for command in eval_commands(evaluation, outputs, device, smoke):
                if time.monotonic() < deadline:
                    steps.append(run_until(command, deadline, env, log, grace))
    results = {
        "plan": plan,
        "settings": list(settings),
        "device": device,
        "smoke": smoke,
        "steps": [asdict(s) for s in steps],
        "runs": {str(r.relative_to(outputs)): state(r) for r in run_folders(outputs, RUNS)},
        "packed": pack(outputs, out / "runs.tar.gz"),
        "logs": pack_logs(outputs, out / "logs.tar.gz"),
    }
    (out / "campaign.json").write_text(json.dumps(results, indent=2) + "\n")
    return results


def override(text: str) -> str:
    """``--set``'s argument: ``KEY=VALUE`` with a key."""
    if not text.partition("=")[0] or "=" not in text:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan", choices=sorted(PLANS))
    parser.add_argument("--seconds", type=positive_number, default=420.0)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu_campaign_out")))
    parser.add_argument(
        "--grace", type=positive_number, default=GRACE_S,
        help="seconds between SIGTERM at the deadline and SIGKILL",
    )  # fmt: skip
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--data", type=Path, default=ROOT / ".gpu_data")
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    parser.add_argument("--smoke", action="store_true", help="a few steps per run")
    parser.add_argument(
        "--set", action="append", default=[], type=override, dest="settings",
        help="KEY=VALUE in place of each sweep's override of KEY, or added (repeatable): "
        "--set model=cloudgru_k3 --set seed=1,2 runs part of a plan",
    )  # fmt: skip
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="gpu_campaign_"))
    data = args.data if args.data.is_dir() else None
    results = campaign(args.plan, args.seconds, args.out, work, data, args.device, args.smoke,
                       tuple(args.settings), args.grace)  # fmt: skip
    done = sum(run["finished"] for run in results["runs"].values())
    print(f"{args.plan}: {done} of {len(results['runs'])} runs finished; "
          f"{len(results['packed'])} packed in {args.out / 'runs.tar.gz'}")  # fmt: skip
    for run, got in results["runs"].items():
        if not got["finished"]:
            print(f"  {run} stopped at: {got['progress'] or 'no validation yet'}")
    return 0 if results["runs"] and done == len(results["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
