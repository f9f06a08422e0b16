"""``trainer.devices`` and ``trainer.num_nodes`` read once (cloudlstm.assembly.devices), for
the Trainer's own machine (``run_device``, ``processes``), for ``compare``'s reading of
other runs' configs and for the GPUs and tasks per node that ``hydra/launcher=slurm`` asks
SLURM for."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import yaml
from lightning.fabric.accelerators import CUDAAccelerator, MPSAccelerator, XLAAccelerator
from lightning.pytorch.accelerators import CUDAAccelerator as TrainerCUDA
from lightning.pytorch.accelerators import MPSAccelerator as TrainerMPS
from lightning.pytorch.trainer.connectors.accelerator_connector import _AcceleratorConnector
from omegaconf import OmegaConf
from omegaconf.errors import InterpolationResolutionError

from cloudlstm.assembly.batch_limits import processes
from cloudlstm.assembly.build import (
    check_accelerator,
    check_devices,
    check_nodes_started,
    check_trainer_settings,
)
from cloudlstm.assembly.compile import run_device
from cloudlstm.assembly.devices import (
    auto_accelerator,
    gpu_accelerator,
    named_devices,
    named_nodes,
    run_accelerator,
    user_cpu_devices,
)
from cloudlstm.assembly.memory_fit import trains_in_host_memory
from cloudlstm.errors import UserError
from cloudlstm.models.capture import RunDevice
from tests.conftest import ROOT


@pytest.mark.parametrize(
    ("devices", "count"),
    [
        (2, 2),
        ("2", 2),
        (" 2 ", 2),
        ("0,1", 2),
        ("0,", 1),  # Lightning leaves out the empty part: device 0
        ([3], 1),
        ((0, 1), 2),
        ("auto", None),  # every device of the machine, which only it can count
        (-1, None),
        ("-1", None),
    ],
)
def test_the_devices_lightning_takes_are_counted(devices, count):
    assert named_devices(devices) == count


@pytest.mark.parametrize(
    ("devices", "problem"),
    [
        (0, "no device to run on"),
        ("0", "no device to run on"),
        ([], "no device to run on"),
        (",", "no device to run on"),
        (-2, "a negative number, of which Lightning takes only -1 (every device)"),
        ("-2", "a negative number, of which Lightning takes only -1 (every device)"),
        ("two", "no number of devices, nor a list of device indices"),
        ("[0,1]", "no number of devices, nor a list of device indices"),
        ("0,a", "no number of devices, nor a list of device indices"),
        ("", "no number of devices, nor a list of device indices"),
        (True, "no number of devices, nor a list of device indices"),
        (1.0, "no number of devices, nor a list of device indices"),
        ([0, 0], "device 0 is listed twice"),
        ([-1], "-1 is no device index (a whole number >= 0)"),
    ],
)
def test_a_value_lightning_refuses_or_that_names_no_device_is_refused(devices, problem):
    """The Trainer's machine counted 0 devices for 0 and "," (``processes`` then took 1),
    -2 for -2, and failed with a traceback on "two"; compare took them all for "not known"."""
    with pytest.raises(ValueError, match=f"^{problem}$".replace("(", r"\(").replace(")", r"\)")):
        named_devices(devices)


def test_the_machine_that_runs_the_trainer_refuses_them_in_one_line():
    trainer = {"accelerator": "cpu", "devices": "two"}
    with pytest.raises(UserError) as refused:
        run_device(trainer)
    assert str(refused.value) == (
        "trainer.devices=two: no number of devices, nor a list of device indices: give a number "
        ">= 1, -1 or auto (all there are), or a list of device indices, e.g. trainer.devices=1."
    )
    with pytest.raises(UserError, match="^trainer.devices=0: no device to run on: give "):
        processes({"accelerator": "cpu", "devices": 0})


@pytest.mark.parametrize(("devices", "count"), [(2, 2), ("2", 2), ("auto", 1)])
def test_a_number_of_cpu_processes_is_counted(devices, count):
    assert user_cpu_devices(devices, "trainer.accelerator=cpu") == count


@pytest.mark.parametrize(
    ("devices", "named"),
    [
        ([0], "device indices"),
        ("0,", "device indices"),
        ("0,1", "device indices"),
        (-1, "every GPU"),
        ("-1", "every GPU"),
    ],
)
def test_what_lightning_takes_on_gpus_alone_is_refused_on_the_cpu(devices, named):
    """Lightning refuses them on the CPU in a TypeError ("should be an int > 0")."""
    with pytest.raises(UserError) as refused:
        user_cpu_devices(devices, "trainer.accelerator=cpu")
    assert str(refused.value) == (
        f"trainer.devices={devices}: {named}, which Lightning takes on GPUs alone, but the "
        "Trainer runs on the CPU (trainer.accelerator=cpu): give a number of CPU processes, "
        "e.g. trainer.devices=1."
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="auto is the CPU where torch sees no GPU")
def test_device_indices_are_refused_where_auto_is_the_cpu():
    trainer = OmegaConf.create({"accelerator": "auto", "devices": [0]})
    with pytest.raises(UserError) as refused:
        check_trainer_settings(trainer)
    assert "(trainer.accelerator=auto, and torch sees no GPU)" in str(refused.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="auto is the CPU where torch sees no GPU")
def test_auto_is_read_as_lightning_picks_it_a_tpu_first(monkeypatch):
    """Lightning's accelerator=auto takes a TPU where one is there, before any GPU; the
    readings of auto took the CPU wherever torch saw no GPU: device indices refused as on
    the CPU, every device counted as one process, and training in host memory. No TPU is
    here: Lightning's own check of one is made to find eight cores."""
    trainer = {"accelerator": "auto", "devices": "auto"}
    cfg = OmegaConf.create({"train": True, "test": True, "trainer": trainer})
    assert auto_accelerator() == "cpu"
    assert run_device(trainer) == RunDevice(False, 1)
    assert trains_in_host_memory(cfg)
    with pytest.raises(UserError, match="trainer.accelerator=auto, and torch sees no GPU"):
        check_devices({**trainer, "devices": [0]})
    monkeypatch.setattr(XLAAccelerator, "is_available", staticmethod(lambda: True))
    monkeypatch.setattr(XLAAccelerator, "auto_device_count", staticmethod(lambda: 8))
    assert auto_accelerator() == "tpu"
    assert run_device(trainer) == RunDevice(False, 8)
    assert run_device({**trainer, "accelerator": "tpu", "num_nodes": 2}) == RunDevice(False, 16)
    assert not trains_in_host_memory(cfg)
    check_devices({**trainer, "devices": [0]})  # Lightning's TPU takes one core's index


def test_every_device_is_counted_on_the_machine():
    """``auto`` on the CPU is one process; two nodes of it two."""
    assert run_device({"accelerator": "cpu", "devices": "auto", "num_nodes": 2}) == RunDevice(
        False, 2
    )
    assert processes({"accelerator": "cpu", "devices": "auto"}) == 1


@pytest.mark.parametrize(
    ("nodes", "problem"),
    [
        (0, "no node to run on"),
        (-2, "a negative number of nodes"),
        ("2", "text, where Lightning takes a number"),  # Lightning takes an int alone
        ("two", "text, where Lightning takes a number"),
        (None, "no whole number of nodes"),
        (1.5, "no whole number of nodes"),
        (True, "no whole number of nodes"),
    ],
)
def test_a_number_of_nodes_lightning_refuses_is_refused(nodes, problem):
    with pytest.raises(ValueError, match=f"^{problem}$"):
        named_nodes(nodes)
    assert named_nodes(2) == 2


@pytest.mark.parametrize(
    ("nodes", "line"),
    [
        (0, "trainer.num_nodes=0: no node to run on: give a whole number of nodes >= 1, e.g. "
         "trainer.num_nodes=1."),
        ("two", "trainer.num_nodes='two': text, where Lightning takes a number: give "),
        (-1, "trainer.num_nodes=-1: a negative number of nodes: give "),
    ],
)  # fmt: skip
def test_the_machine_that_runs_the_trainer_refuses_a_number_of_nodes_in_one_line(nodes, line):
    """The Trainer's machine took 0 nodes for 1 (``int(0 or 1)``), -1 for -1 (-1 processes),
    and failed with a traceback on "two"; the check for a launcher passed them all by."""
    trainer = {"accelerator": "cpu", "devices": 1, "num_nodes": nodes}
    for read in (run_device, processes, lambda t: check_nodes_started(t, {})):
        with pytest.raises(UserError) as refused:
            read(trainer)
        assert str(refused.value).startswith(line)


def test_the_reading_imports_no_torch():
    """compare reads it for every run it finds, and imports no torch to do so."""
    code = "import sys, cloudlstm.assembly.devices; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.stdout.strip() == "False", done.stderr[-2000:]


def slurm_asks(accelerator: object, devices: object, nodes: object = 1) -> dict:
    """``gpus_per_node``, ``tasks_per_node`` and ``nodes`` as conf/hydra/launcher/slurm.yaml
    resolves them from a trainer's ``accelerator``, ``devices`` and ``num_nodes`` (the
    package's resolvers, registered by the import of cloudlstm above)."""
    launcher = yaml.safe_load((ROOT / "conf" / "hydra" / "launcher" / "slurm.yaml").read_text())
    cfg = OmegaConf.create(
        {
            "trainer": {"accelerator": accelerator, "devices": devices, "num_nodes": nodes},
            "gpus": launcher["gpus_per_node"],
            "tasks": launcher["tasks_per_node"],
            "nodes": launcher["nodes"],
        }
    )
    return {"gpus": cfg.gpus, "tasks": cfg.tasks, "nodes": cfg.nodes}


@pytest.mark.parametrize(
    ("accelerator", "devices", "asked"),
    [
        ("gpu", 4, {"gpus": 4, "tasks": 4, "nodes": 1}),
        ("gpu", "0,1", {"gpus": 2, "tasks": 2, "nodes": 1}),  # indices: SLURM wants their count
        ("gpu", [1, 0], {"gpus": 2, "tasks": 2, "nodes": 1}),
        ("cuda", 2, {"gpus": 2, "tasks": 2, "nodes": 1}),
        ("cpu", 2, {"gpus": None, "tasks": 2, "nodes": 1}),  # processes without GPUs
        ("cpu", "auto", {"gpus": None, "tasks": 1, "nodes": 1}),  # Lightning's one CPU device
    ],
)
def test_slurm_is_asked_for_the_number_of_devices_per_node(accelerator, devices, asked):
    assert slurm_asks(accelerator, devices) == asked


@pytest.mark.parametrize(
    ("accelerator", "devices", "line"),
    [
        (
            "gpu",
            "auto",
            "trainer.devices=auto takes every GPU of the node it runs on, but "
            "hydra/launcher=slurm must ask SLURM for a number of GPUs (and tasks) per node "
            "before the job starts: give it, e.g. trainer.devices=4 (or trainer=cpu for CPU "
            "tasks).",
        ),
        ("gpu", -1, "trainer.devices=-1 takes every GPU of the node it runs on, but "),
        (
            "gpu",
            "0,2",
            "trainer.devices=0,2 names GPU 2, but a SLURM job sees only the 2 GPU(s) it is "
            "given, numbered from 0: give the number, trainer.devices=2.",
        ),
        ("gpu", 0, "trainer.devices=0: no device to run on: give "),
        # Lightning takes them on GPUs alone: the job's Trainer would refuse them
        ("cpu", "0,1", "trainer.devices=0,1: device indices, which Lightning takes on GPUs"),
        ("cpu", -1, "trainer.devices=-1: every GPU, which Lightning takes on GPUs alone"),
    ],
)
def test_a_number_of_gpus_slurm_cannot_be_given_is_refused_in_one_line(accelerator, devices, line):
    assert slurm_refusal(accelerator, devices).startswith(line)


def slurm_refusal(accelerator: object, devices: object, nodes: object = 1) -> str:
    """The line with which :func:`slurm_asks` is refused."""
    with pytest.raises(InterpolationResolutionError) as refused:
        slurm_asks(accelerator, devices, nodes)
    error: BaseException | None = refused.value
    while isinstance(error, InterpolationResolutionError):  # one for each nested ${...}
        error = error.__cause__ or error.__context__
    assert isinstance(error, UserError), refused.value
    return str(error)


SLURM_FIX = (
    "but hydra/launcher=slurm must ask SLURM for GPUs, or none, before the job starts: give "
    "trainer=gpu (trainer.devices: the GPUs per node) or trainer=cpu (trainer.devices: the "
    "CPU tasks per node)."
)


@pytest.mark.parametrize("devices", [1, 2, "auto"])
def test_slurm_refuses_auto_whose_choice_the_compute_node_makes(devices):
    """auto asked SLURM for trainer.devices GPUs, which a CPU-only cluster refuses or holds
    pending for ever, whatever the compute node would have picked."""
    assert slurm_refusal("auto", devices) == (
        "trainer.accelerator=auto, which picks a GPU or the CPU on the node that runs the "
        f"job, {SLURM_FIX}"
    )


@pytest.mark.parametrize(
    ("accelerator", "line"),
    [
        ("mps", "trainer.accelerator=mps, which SLURM does not allot, "),
        ("tpu", "trainer.accelerator=tpu, which SLURM does not allot, "),
        (
            {"_target_": "my.Accelerator"},
            "trainer.accelerator=an accelerator of its own (_target_), ",
        ),
    ],
)
def test_slurm_refuses_an_accelerator_it_does_not_allot(accelerator, line):
    """They asked for GPUs, which neither Apple's GPU nor a TPU is to SLURM."""
    assert slurm_refusal(accelerator, 1) == line + SLURM_FIX


@pytest.mark.parametrize("accelerator", ["CPU", "GPU", "Cuda", "cude", None])
def test_a_name_lightning_refuses_is_refused_before_slurm_is_asked(accelerator):
    """Read in lower case, CPU asked for GPUs, and the job's Trainer refused it on the node
    after SLURM had allotted them; Lightning reads the names as written."""
    assert slurm_refusal(accelerator, 2) == (
        f"trainer.accelerator={accelerator}: no accelerator Lightning takes (it reads the names "
        "in lower case): give one of auto, cpu, gpu, cuda, mps, tpu, e.g. trainer=cpu or "
        "trainer=gpu."
    )


def lightning_finds(monkeypatch: pytest.MonkeyPatch, cuda: bool, mps: bool) -> None:
    """Lightning's CUDA and Apple GPU accelerators (Fabric's, and the Trainer's own) made to
    find a GPU or none: no Mac is here, nor need a GPU be."""
    for accelerator, found in (
        (CUDAAccelerator, cuda),
        (TrainerCUDA, cuda),
        (MPSAccelerator, mps),
        (TrainerMPS, mps),
    ):
        monkeypatch.setattr(accelerator, "is_available", staticmethod(lambda found=found: found))


@pytest.mark.skipif(XLAAccelerator.is_available(), reason="auto is a TPU here")
@pytest.mark.parametrize(
    ("cuda", "mps"), [(False, False), (True, False), (False, True), (True, True)]
)
def test_auto_and_gpu_are_read_as_the_trainer_maps_them(monkeypatch, cuda, mps):
    lightning_finds(monkeypatch, cuda, mps)
    assert auto_accelerator() == _AcceleratorConnector._choose_auto_accelerator()
    if cuda or mps:  # else the Trainer refuses gpu, and check_accelerator says so first
        assert gpu_accelerator() == _AcceleratorConnector._choose_gpu_accelerator_backend()
    assert run_accelerator("gpu") == ("mps" if mps else "cuda")


def test_gpu_on_a_mac_is_apples_gpu_not_cuda(monkeypatch):
    """Lightning runs accelerator=gpu on Apple's GPU where CUDA is absent; it was read as
    CUDA: compiled for CUDA graphs, its GPUs counted by CUDA's count (and refused as fewer
    than asked), and trained as if its gradients were outside this machine's memory, which
    Apple's GPU shares."""
    lightning_finds(monkeypatch, cuda=False, mps=True)
    assert run_device({"accelerator": "gpu", "devices": 1}) == RunDevice(False, 1)
    assert run_device({"accelerator": "gpu", "devices": "auto"}) == RunDevice(False, 1)
    check_accelerator({"accelerator": "gpu", "devices": 1})
    for accelerator in ("gpu", "auto", "mps"):
        job = {"train": True, "trainer": {"accelerator": accelerator}}
        assert trains_in_host_memory(OmegaConf.create(job)), accelerator
    with pytest.raises(UserError, match=r"^trainer.accelerator=cuda \(trainer=gpu\), but torch"):
        check_accelerator({"accelerator": "cuda", "devices": 1})  # cuda is CUDA alone


def test_gpu_with_cuda_is_cuda(monkeypatch):
    lightning_finds(monkeypatch, cuda=True, mps=False)
    assert run_device({"accelerator": "gpu", "devices": 2}) == RunDevice(True, 2)
    job = {"train": True, "trainer": {"accelerator": "gpu"}}
    assert not trains_in_host_memory(OmegaConf.create(job))


@pytest.mark.parametrize("accelerator", ["GPU", "CPU", "Auto", "cude", None])
def test_a_name_lightning_refuses_is_refused_as_it_is_written(accelerator):
    """Read in lower case, GPU was refused as "trainer.accelerator=gpu (trainer=gpu), but
    torch finds no GPU" here and let by where there is one, and CPU counted as the CPU,
    for a Trainer that refuses both."""
    line = (
        f"trainer.accelerator={accelerator}: no accelerator Lightning takes (it reads the names "
        "in lower case): give one of auto, cpu, gpu, cuda, mps, tpu, e.g. trainer=cpu or "
        "trainer=gpu."
    )
    trainer = {"accelerator": accelerator, "devices": 1}
    for read in (check_accelerator, check_devices, run_device):
        with pytest.raises(UserError) as refused:
            read(trainer)
        assert str(refused.value) == line, read


def test_slurm_is_asked_for_the_nodes_of_trainer_num_nodes():
    assert slurm_asks("gpu", 4, 2) == {"gpus": 4, "tasks": 4, "nodes": 2}


@pytest.mark.parametrize(
    ("nodes", "line"),
    [
        (0, "trainer.num_nodes=0: no node to run on: give a whole number of nodes >= 1, e.g. "
         "trainer.num_nodes=1."),
        (-1, "trainer.num_nodes=-1: a negative number of nodes: give "),
        ("2", "trainer.num_nodes='2': text, where Lightning takes a number: give "),
    ],
)  # fmt: skip
def test_slurm_is_not_asked_for_nodes_lightning_refuses(nodes, line):
    """0 and -1 went to sbatch as --nodes=0 and --nodes=-1 (submitit then failed in an
    IndexError traceback), "2" as --nodes=2 for a Trainer that refuses text on the nodes."""
    assert slurm_refusal("cpu", 1, nodes).startswith(line)
