"""TorchX components of dlrm-multiepoch: ``train`` (one run), ``sweep`` (a strategy comparison), ``search``
(the schedule to deploy, decided on validation) and ``preprocess`` (input files encoded into a dataset
folder, several files at once).

This module is the single definition of the components. It is reachable two ways:

- by name, through the ``torchx.components`` entry point in ``pyproject.toml``:
  ``torchx run -s local_cwd dlrm_multiepoch.train --epochs 3``;
- by file, through the symlink ``components/dlrm.py`` that points here:
  ``torchx run -s local_cwd components/dlrm.py:train --epochs 3``.

Every parameter comes from an option (``config_section.option``) whose roles say which components
offer it: the training app's flags (``TrainConfig``; any other app flag passes through after ``--``),
the job parameters (``j``, ``cpu``, ``env``, ...: :class:`~dlrm_multiepoch.launch_options.LaunchOptions`,
the sweep and search commands' launch flags too) and the sweep's and search's own parameters
(``experiment_dir``, ``epochs``, ``seeds``, ...: their commands'
:class:`~dlrm_multiepoch.command_options.SweepOptions` and ``SearchOptions``), each written by
:func:`~dlrm_multiepoch.component_params.add_params`. TorchX reads a component's signature and docstring
to build its command line, and lints the source file that defines it (every
parameter typed, ``AppDef`` returned), so the definition must live in one real file
that both forms can parse: hence the symlink rather than a re-export. TorchX also
lists every function of this module as a component, so keep helpers out of it.
"""

from typing import List

import torchx.components.dist as dist
from torchx import specs

from dlrm_multiepoch.command_options import SearchOptions, SweepOptions
from dlrm_multiepoch.component_params import add_params, app_flags, take_options
from dlrm_multiepoch.config_section import PREPROCESS_COMPONENT, SWEEP_SEARCH_COMPONENT, TRAIN_COMPONENT, argv_of
from dlrm_multiepoch.launch_options import LaunchOptions, split_at_dashes
from dlrm_multiepoch.train.config import TrainConfig, flags_with

# Training-app flags offered as typed parameters (their fields' roles); the rest go after "--".
TRAIN_PARAMS = flags_with(TRAIN_COMPONENT)
# Flags common to every run of a sweep or search (the sweep sets epochs, seed, run folder and strategy flags).
SWEEP_PARAMS = flags_with(SWEEP_SEARCH_COMPONENT)
# Data flags offered as typed parameters of the preprocessing job; the rest go after "--".
PREPROCESS_PARAMS = flags_with(PREPROCESS_COMPONENT)


def train(
    *script_args: str,
    name: str = "dlrm_multiepoch/dlrm",
    max_restarts: int = 0,
    **params: object,
) -> specs.AppDef:
    """Distributed DLRM training on a dataset: ``torchrun -m dlrm_multiepoch.train``.

    Built on ``dist.ddp``: ``j`` sets nodes x processes per node; each process is one
    rank (gloo on CPU, nccl on CUDA, chosen by the app at run time). The app is a module
    of the installed package, so the job runs from any working directory; ``m`` picks
    another module (``dlrm_multiepoch.pretrain``: pre-training) and ``script`` a file of
    your own instead, relative to the job's working directory. App parameters
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
        name: job name, {experimentname}/{runname}
        max_restarts: how many times torchrun may restart the job's workers in place after a
            failure (torchrun --max_restarts); the app resumes from the job's newest checkpoint
    """
    if max_restarts < 0:
        raise ValueError(f"--max_restarts must be >= 0, got {max_restarts}")
    options = take_options(train, LaunchOptions, params)
    app = dist.ddp(*app_flags(train, params, script_args), *script_args, name=name, **options.component_kwargs())
    if max_restarts:  # dist.ddp has no parameter for torchrun's own restarts
        (role,) = app.roles
        assert role.args[1].startswith("torchrun "), role.args
        role.args[1] = f"torchrun --max_restarts {max_restarts} " + role.args[1][len("torchrun ") :]
        # Else every attempt shares one rendezvous TCPStore, whose keys from the failed
        # attempt can point the new workers at dead peers (pytorch/pytorch#135712).
        role.env.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    return app


add_params(train, LaunchOptions, TRAIN_COMPONENT, unit="job")
add_params(train, TrainConfig, TRAIN_COMPONENT)


def sweep(
    *sweep_args: str,
    name: str = "dlrm_multiepoch/sweep",
    **params: object,
) -> specs.AppDef:
    """A strategy comparison: ``dlrm-multiepoch sweep`` as one job that trains strategies x seeds.

    The job runs the sweep command, which launches each run (``-m dlrm_multiepoch.train`` on
    ``j`` = nodes x processes) through TorchX's ``scheduler``: with ``local_cwd`` (the
    default) the runs go one after another inside this job's allocation. Finished runs
    are skipped and interrupted ones resumed, so a restarted job (``max_retries``)
    continues where it stopped. The job itself gets ``cpu``, ``gpu``, ``memMB``, ``h``,
    ``image``, ``env``, ``max_retries`` and ``mounts`` too. Then compare with
    ``dlrm-multiepoch compare EXPERIMENT_DIR``.

    Example::

        torchx run -s local_cwd dlrm_multiepoch.sweep --experiment_dir runs/bx --seeds 0,1,2 \\
            -- joint-1ep joint delayed 'late=--freeze_schedule "tables=frozen@[0,2) train@[2,end)"' \\
            -- --model multipath --history_length 10

    Args:
        sweep_args: strategies (presets, see ``dlrm-multiepoch sweep --list``, or NAME=FLAGS), then ``--``
            and training-app flags common to every run
        name: job name, {experimentname}/{runname}
    """
    own = take_options(sweep, SweepOptions, params)
    options = take_options(sweep, LaunchOptions, params)
    strategies, common = split_at_dashes(sweep_args)
    args = ["sweep", *argv_of(own), *argv_of(options), *strategies, "--", *app_flags(sweep, params, common), *common]
    return _cli_job("sweep", args, name, options)


add_params(sweep, SweepOptions, SWEEP_SEARCH_COMPONENT, first=True)
add_params(sweep, LaunchOptions, SWEEP_SEARCH_COMPONENT, unit="run")
add_params(sweep, TrainConfig, SWEEP_SEARCH_COMPONENT)


def search(
    *app_args: str,
    name: str = "dlrm_multiepoch/search",
    **params: object,
) -> specs.AppDef:
    """A schedule search: ``dlrm-multiepoch search`` as one job that decides on validation which schedule to deploy.

    The job runs the search command, which launches every branch (``-m dlrm_multiepoch.train`` on
    ``j`` = nodes x processes) through TorchX's ``scheduler``: with ``local_cwd`` (the
    default) one after another inside this job's allocation; with a cluster scheduler,
    one job per branch, in parallel where branches do not wait for a parent. A restarted
    job (``max_retries``) continues the search. The job itself gets ``cpu``, ``gpu``,
    ``memMB``, ``h``, ``image``, ``env``, ``max_retries`` and ``mounts`` too. The record
    is ``EXPERIMENT_DIR/search.json``.

    Example::

        torchx run -s slurm dlrm_multiepoch.search --experiment_dir /shared/runs/ml --seeds 0,1,2 \\
            --scheduler slurm -- --dataset movielens --val_fraction 0.1

    Args:
        app_args: training-app flags common to every branch
        name: job name, {experimentname}/{runname}
    """
    own = take_options(search, SearchOptions, params)
    options = take_options(search, LaunchOptions, params)
    args = ["search", *argv_of(own), *argv_of(options), "--", *app_flags(search, params, app_args), *app_args]
    return _cli_job("search", args, name, options)


add_params(search, SearchOptions, SWEEP_SEARCH_COMPONENT, first=True)
add_params(search, LaunchOptions, SWEEP_SEARCH_COMPONENT, unit="branch")
add_params(search, TrainConfig, SWEEP_SEARCH_COMPONENT)



def preprocess(
    *preprocess_args: str,
    output: str,
    name: str = "dlrm_multiepoch/preprocess",
    **params: object,
) -> specs.AppDef:
    """``dlrm-multiepoch preprocess`` as one job: input files encoded into the dataset folder ``output``.

    The job parses up to ``preprocess_workers`` input files at once (default: ``cpu``),
    one worker process each, e.g. Criteo's 24 days given as ``--data_path
    day_0,day_1,...,day_23``; id maps and statistics are then fitted over all files and
    the rows written in file order. The folder is the same whatever the worker count,
    and appears whole or not at all. Train on it with ``--data_path <output>``. Each
    worker holds one chunk in memory (see ``preprocess_chunk_mb``); a restarted job
    (``max_retries``) starts over.

    Example::

        torchx run -s slurm dlrm_multiepoch.preprocess --output /data/criteo_1tb --cpu 32 \\
            --dataset criteo --data_path /data/day_0,/data/day_1 --criteo_hash_size 10000000

    Args:
        preprocess_args: further data flags for ``dlrm-multiepoch preprocess``, passed through verbatim
        output: dataset folder to write (new, or empty)
        name: job name, {experimentname}/{runname}
    """
    options = take_options(preprocess, LaunchOptions, params)
    passed = any(a == "--preprocess_workers" or a.startswith("--preprocess_workers=") for a in preprocess_args)
    if params.get("preprocess_workers") is None and not passed:
        params["preprocess_workers"] = options.cpu
    args = ["preprocess", "--output", output, *app_flags(preprocess, params, preprocess_args), *preprocess_args]
    return _cli_job("preprocess", args, name, options)


add_params(preprocess, LaunchOptions, PREPROCESS_COMPONENT, unit="job", defaults={"cpu": 8, "memMB": 16384})
add_params(preprocess, TrainConfig, PREPROCESS_COMPONENT)


def _cli_job(command: str, args: List[str], name: str, options: LaunchOptions) -> specs.AppDef:
    """One role running ``dlrm-multiepoch <args>`` (the sweep, search and preprocess jobs) with ``options``' resources."""
    o = options
    return specs.AppDef(
        name=name.split("/")[-1],
        roles=[
            specs.Role(
                name=command,
                image=o.image,
                entrypoint="dlrm-multiepoch",
                args=args,
                env={"PYTHONUNBUFFERED": "1", **o.env},
                resource=specs.resource(cpu=o.cpu, gpu=o.gpu, memMB=o.memMB, h=o.h),
                max_retries=o.max_retries,
                mounts=specs.parse_mounts(o.mounts) if o.mounts else [],
            )
        ],
    )
