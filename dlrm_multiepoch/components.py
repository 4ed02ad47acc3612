"""TorchX components of dlrm-multiepoch: ``train`` (one run), ``sweep`` (a strategy comparison), ``search``
(the schedule to deploy, decided on validation) and ``preprocess`` (input files encoded into a dataset
folder, several files at once).

This module is the single definition of the components. It is reachable two ways:

- by name, through the ``torchx.components`` entry point in ``pyproject.toml``:
  ``torchx run -s local_cwd dlrm_multiepoch.train --epochs 3``;
- by file, through the symlink ``components/dlrm.py`` that points here:
  ``torchx run -s local_cwd components/dlrm.py:train --epochs 3``.

The training app's flags offered as typed parameters are named here and built from
``TrainConfig`` (type, help, default) by :func:`add_config_params`; every other app
flag passes through after ``--``. TorchX reads a component's signature and docstring
to build its command line, and lints the source file that defines it (every
parameter typed, ``AppDef`` returned), so the definition must live in one real file
that both forms can parse: hence the symlink rather than a re-export. TorchX also
lists every function of this module as a component, so keep helpers out of it.
"""

from typing import Dict, List, Optional, Sequence

import torchx
import torchx.components.dist as dist
from torchx import specs

from dlrm_multiepoch.component_params import add_config_params, config_flags
from dlrm_multiepoch.sweep.plan import split_at_dashes

# Training-app flags offered as typed parameters (from TrainConfig); the rest go after "--".
TRAIN_PARAMS = (
    "dataset", "data_path", "max_rows", "history_length", "model", "embedding_dim", "dense_arch_layer_sizes",
    "over_arch_layer_sizes", "learning_rate", "embedding_learning_rate", "epochs", "batch_size", "seed",
    "freeze_schedule", "pipeline", "pretrained_tables", "tensorboard_dir", "run_name", "resume",
)  # fmt: skip
# Flags common to every run of a sweep (the sweep sets epochs, seed, run folder and strategy flags).
SWEEP_PARAMS = (
    "dataset", "data_path", "max_rows", "history_length", "model", "embedding_dim", "learning_rate",
    "embedding_learning_rate", "batch_size", "pipeline", "pretrained_tables",
)  # fmt: skip


def train(
    *script_args: str,
    script: str = "apps/train.py",
    j: str = "1x2",
    cpu: int = 2,
    gpu: int = 0,
    memMB: int = 8192,
    h: Optional[str] = None,
    image: str = torchx.IMAGE,
    name: str = "dlrm_multiepoch/dlrm",
    env: Optional[Dict[str, str]] = None,
    max_retries: int = 0,
    max_restarts: int = 0,
    mounts: Optional[List[str]] = None,
    **config: object,
) -> specs.AppDef:
    """Distributed DLRM training on a dataset: ``apps/train.py`` under ``torchrun``.

    Built on ``dist.ddp``: ``j`` sets nodes x processes per node; each process is one
    rank (gloo on CPU, nccl on CUDA, chosen by the app at run time). App parameters
    left unset are not passed, so the app's own defaults apply; any other app flag
    goes after ``--`` (e.g. ``-- --freeze_schedule delayed``).

    A failed job comes back by itself with ``max_restarts`` (torchrun restarts the
    workers in place: a killed rank, an OOM) or ``max_retries`` (the scheduler
    reschedules the job: a lost node, a preemption). Either way the app resumes from
    the job's newest intact checkpoint; add ``-- --checkpoint_every_n_steps N`` to
    bound the work lost to N steps.

    Example::

        torchx run -s local_cwd dlrm_multiepoch.train -j 1x2 --epochs 3 \\
            --run_name joint -- --freeze_schedule delayed

    Args:
        script_args: further flags for the training app, passed through verbatim
        script: training script, relative to the job's working directory (the
            current directory for local_cwd and slurm, the image's WORKDIR for kubernetes)
        j: {nnodes}x{nproc_per_node}; for GPU hosts nproc_per_node must not exceed the GPU count
        cpu: CPUs per node
        gpu: GPUs per node
        memMB: host memory per node, in MB
        h: a registered named resource; overrides cpu, gpu and memMB
        image: container image (kubernetes, docker); ignored by local_cwd and slurm
        name: job name, {experimentname}/{runname}
        env: environment variables for the job, e.g. LOGLEVEL=INFO,NCCL_DEBUG=WARN
        max_retries: how many times the scheduler may restart the job after a failure
        max_restarts: how many times torchrun may restart the job's workers in place after a
            failure (torchrun --max_restarts); the app resumes from the job's newest checkpoint
        mounts: mounts into the job's containers, e.g. type=bind,src=/data,dst=/data
    """
    if max_restarts < 0:
        raise ValueError(f"--max_restarts must be >= 0, got {max_restarts}")
    app = dist.ddp(
        *config_flags(train, config, script_args),
        *script_args,
        script=script,
        image=image,
        name=name,
        h=h,
        cpu=cpu,
        gpu=gpu,
        memMB=memMB,
        j=j,
        env=env,
        max_retries=max_retries,
        mounts=mounts,
    )
    if max_restarts:  # dist.ddp has no parameter for torchrun's own restarts
        (role,) = app.roles
        assert role.args[1].startswith("torchrun "), role.args
        role.args[1] = f"torchrun --max_restarts {max_restarts} " + role.args[1][len("torchrun ") :]
        # Else every attempt shares one rendezvous TCPStore, whose keys from the failed
        # attempt can point the new workers at dead peers (pytorch/pytorch#135712).
        role.env.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    return app


add_config_params(train, TRAIN_PARAMS)


def sweep(
    *sweep_args: str,
    experiment_dir: str,
    epochs: int = 3,
    seeds: str = "0",
    windows: Optional[str] = None,
    scheduler: str = "local_cwd",
    scheduler_args: Optional[str] = None,
    script: str = "apps/train.py",
    j: str = "1x2",
    cpu: int = 2,
    gpu: int = 0,
    memMB: int = 8192,
    h: Optional[str] = None,
    image: str = torchx.IMAGE,
    name: str = "dlrm_multiepoch/sweep",
    env: Optional[Dict[str, str]] = None,
    max_retries: int = 0,
    mounts: Optional[List[str]] = None,
    **config: object,
) -> specs.AppDef:
    """A strategy comparison: ``dlrm-multiepoch sweep`` as one job that trains strategies x seeds.

    The job runs the sweep command, which launches each run (``apps/train.py`` on
    ``j`` = nodes x processes) through TorchX's ``scheduler``: with ``local_cwd`` (the
    default) the runs go one after another inside this job's allocation. Finished runs
    are skipped and interrupted ones resumed, so a restarted job (``max_retries``)
    continues where it stopped. Then compare with ``dlrm-multiepoch compare EXPERIMENT_DIR``.

    Example::

        torchx run -s local_cwd dlrm_multiepoch.sweep --experiment_dir runs/bx --seeds 0,1,2 \\
            -- joint-1ep joint delayed 'late=--freeze_schedule "tables=frozen@[0,2) train@[2,end)"' \\
            -- --model multipath --history_length 10

    Args:
        sweep_args: strategies (presets, see ``dlrm-multiepoch sweep --list``, or NAME=FLAGS), then ``--``
            and training-app flags common to every run
        experiment_dir: folder holding one run folder per strategy and seed
        epochs: epoch budget of each strategy (presets may differ: joint-1ep runs 1, joint the budget + 1)
        seeds: comma-separated seeds; each strategy runs once per seed
        windows: update-window sweep: comma-separated epochs at which the tables start training, e.g. 0,0.5,1,1.5
        scheduler: TorchX scheduler the runs are launched on from inside this job
        scheduler_args: that scheduler's options, e.g. queue=default (TorchX -cfg syntax)
        script: training script, relative to the job's working directory
        j: {nnodes}x{nproc_per_node} of each run
        cpu: CPUs per node
        gpu: GPUs per node
        memMB: host memory per node, in MB
        h: a registered named resource; overrides cpu, gpu and memMB
        image: container image (kubernetes, docker); ignored by local_cwd and slurm
        name: job name, {experimentname}/{runname}
        env: environment variables for the job and its runs, e.g. NCCL_DEBUG=WARN
        max_retries: how many times the scheduler may restart the job (and each run) after a failure
        mounts: mounts into the containers, e.g. type=bind,src=/data,dst=/data
    """
    options = _option_flags(locals(), skip=("sweep_args", "experiment_dir", "config", "name"))
    strategies, common = split_at_dashes(sweep_args)
    args = ["sweep", experiment_dir, *options, *strategies, "--", *config_flags(sweep, config, common), *common]
    resource = specs.resource(cpu=cpu, gpu=gpu, memMB=memMB, h=h)
    return _cli_job("sweep", args, name, image, env, resource, max_retries, mounts)


add_config_params(sweep, SWEEP_PARAMS)


def search(
    *app_args: str,
    experiment_dir: str,
    epochs: int = 3,
    seeds: str = "0",
    eta: int = 3,
    rung_fraction: float = 0.3,
    candidates: Optional[str] = None,
    scheduler: str = "local_cwd",
    scheduler_args: Optional[str] = None,
    script: str = "apps/train.py",
    j: str = "1x2",
    cpu: int = 2,
    gpu: int = 0,
    memMB: int = 8192,
    h: Optional[str] = None,
    image: str = torchx.IMAGE,
    name: str = "dlrm_multiepoch/search",
    env: Optional[Dict[str, str]] = None,
    max_retries: int = 0,
    mounts: Optional[List[str]] = None,
    **config: object,
) -> specs.AppDef:
    """A schedule search: ``dlrm-multiepoch search`` as one job that decides on validation which schedule to deploy.

    The job runs the search command, which launches every branch (``apps/train.py`` on
    ``j`` = nodes x processes) through TorchX's ``scheduler``: with ``local_cwd`` (the
    default) one after another inside this job's allocation; with a cluster scheduler,
    one job per branch, in parallel where branches do not wait for a parent. A restarted
    job (``max_retries``) continues the search. The record is ``EXPERIMENT_DIR/search.json``.

    Example::

        torchx run -s slurm dlrm_multiepoch.search --experiment_dir /shared/runs/ml --seeds 0,1,2 \\
            --scheduler slurm -- --dataset movielens --val_fraction 0.1

    Args:
        app_args: training-app flags common to every branch
        experiment_dir: folder holding one run folder per branch, search.json and sweep.json
        epochs: epoch budget E of every schedule (joint: E + 1)
        seeds: comma-separated seeds; one independent search per seed
        eta: successive halving: the top 1/eta of the judged branches go on at each rung
        rung_fraction: a branch is first judged (against branches with tables as young) this fraction of an
            epoch after its tables start; 1: after a whole epoch, with every branch
        candidates: comma-separated subset of the candidates (default: all; a branch needs its parent)
        scheduler: TorchX scheduler the branches are launched on from inside this job
        scheduler_args: that scheduler's options, e.g. queue=default (TorchX -cfg syntax)
        script: training script, relative to the job's working directory
        j: {nnodes}x{nproc_per_node} of each branch
        cpu: CPUs per node
        gpu: GPUs per node
        memMB: host memory per node, in MB
        h: a registered named resource; overrides cpu, gpu and memMB
        image: container image (kubernetes, docker); ignored by local_cwd and slurm
        name: job name, {experimentname}/{runname}
        env: environment variables for the job and its branches, e.g. NCCL_DEBUG=WARN
        max_retries: how many times the scheduler may restart the job (and each branch) after a failure
        mounts: mounts into the containers, e.g. type=bind,src=/data,dst=/data
    """
    options = _option_flags(locals(), skip=("app_args", "experiment_dir", "config", "name"))
    args = ["search", experiment_dir, *options, "--", *config_flags(search, config, app_args), *app_args]
    resource = specs.resource(cpu=cpu, gpu=gpu, memMB=memMB, h=h)
    return _cli_job("search", args, name, image, env, resource, max_retries, mounts)


add_config_params(search, SWEEP_PARAMS)


# Data flags offered as typed parameters of the preprocessing job; the rest go after "--".
PREPROCESS_PARAMS = (
    "dataset", "data_path", "criteo_hash_size", "max_rows", "min_count", "test_fraction", "val_fraction",
    "preprocess_workers", "preprocess_chunk_mb",
)  # fmt: skip


def preprocess(
    *preprocess_args: str,
    output: str,
    cpu: int = 8,
    memMB: int = 16384,
    h: Optional[str] = None,
    image: str = torchx.IMAGE,
    name: str = "dlrm_multiepoch/preprocess",
    env: Optional[Dict[str, str]] = None,
    max_retries: int = 0,
    mounts: Optional[List[str]] = None,
    **config: object,
) -> specs.AppDef:
    """``dlrm-multiepoch preprocess`` as one job: input files encoded into the dataset folder ``output``.

    The job parses up to ``preprocess_workers`` input files at once (default: ``cpu``),
    one worker process each, e.g. Criteo's 24 days given as ``--data_path
    day_0,day_1,...,day_23``; id maps and statistics are then fitted over all files and
    the rows written in file order. The folder is the same whatever the worker count,
    and appears whole or not at all. Train on it with ``--data_path <output>``.

    Example::

        torchx run -s slurm dlrm_multiepoch.preprocess --output /data/criteo_1tb --cpu 32 \\
            --dataset criteo --data_path /data/day_0,/data/day_1 --criteo_hash_size 10000000

    Args:
        preprocess_args: further data flags for ``dlrm-multiepoch preprocess``, passed through verbatim
        output: dataset folder to write (new, or empty)
        cpu: CPUs of the node (and the default worker count)
        memMB: host memory, in MB (each worker holds one chunk: see --preprocess_chunk_mb)
        h: a registered named resource; overrides cpu and memMB
        image: container image (kubernetes, docker); ignored by local_cwd and slurm
        name: job name, {experimentname}/{runname}
        env: environment variables for the job
        max_retries: how many times the scheduler may restart the job after a failure (it starts over)
        mounts: mounts into the job's container, e.g. type=bind,src=/data,dst=/data
    """
    passed = any(a == "--preprocess_workers" or a.startswith("--preprocess_workers=") for a in preprocess_args)
    if config.get("preprocess_workers") is None and not passed:
        config["preprocess_workers"] = cpu
    args = ["preprocess", "--output", output, *config_flags(preprocess, config, preprocess_args), *preprocess_args]
    resource = specs.resource(cpu=cpu, gpu=0, memMB=memMB, h=h)
    return _cli_job("preprocess", args, name, image, env, resource, max_retries, mounts)


add_config_params(preprocess, PREPROCESS_PARAMS)


def _option_flags(params: Dict[str, object], skip: Sequence[str]) -> List[str]:
    """A component's launcher parameters as the command's options of the same names (None: not given)."""
    flags: List[str] = []
    for option, value in params.items():
        if option in skip or value is None:
            continue
        if isinstance(value, dict):
            value = ",".join(f"{k}={v}" for k, v in value.items())
        elif isinstance(value, list):
            value = ",".join(value)
        flags += [f"--{option}", str(value)]
    return flags


def _cli_job(
    command: str,
    args: List[str],
    name: str,
    image: str,
    env: Optional[Dict[str, str]],
    resource: specs.Resource,
    max_retries: int,
    mounts: Optional[List[str]],
) -> specs.AppDef:
    """One role running ``dlrm-multiepoch <args>`` (the sweep, search and preprocess jobs)."""
    return specs.AppDef(
        name=name.split("/")[-1],
        roles=[
            specs.Role(
                name=command,
                image=image,
                entrypoint="dlrm-multiepoch",
                args=args,
                env={"PYTHONUNBUFFERED": "1", **(env or {})},
                resource=resource,
                max_retries=max_retries,
                mounts=specs.parse_mounts(mounts) if mounts else [],
            )
        ],
    )
