"""TorchX components that launch the dlrm-multiepoch training app.

This module is the single definition of the components. It is reachable two ways:

- by name, through the ``torchx.components`` entry point in ``pyproject.toml``:
  ``torchx run -s local_cwd dlrm_multiepoch.train --epochs 3``;
- by file, through the symlink ``components/dlrm.py`` that points here:
  ``torchx run -s local_cwd components/dlrm.py:train --epochs 3``.

TorchX reads a component's signature and docstring to build its command line, and
lints the source file that defines it (every parameter typed, ``AppDef`` returned), so
the definition must live in one real file that both forms can parse: hence the symlink
rather than a re-export. TorchX also lists every function of this module as a
component, so keep helpers out of it.
"""

from typing import Dict, List, Optional, get_args, get_type_hints

import torchx
import torchx.components.dist as dist
from torchx import specs


def train(
    *script_args: str,
    dataset: Optional[str] = None,
    epochs: Optional[int] = None,
    batch_size: Optional[int] = None,
    embedding_dim: Optional[int] = None,
    learning_rate: Optional[float] = None,
    embedding_learning_rate: Optional[float] = None,
    dense_arch_layer_sizes: Optional[str] = None,
    over_arch_layer_sizes: Optional[str] = None,
    seed: Optional[int] = None,
    tensorboard_dir: Optional[str] = None,
    run_name: Optional[str] = None,
    max_rows: Optional[int] = None,
    history_length: Optional[int] = None,
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
        dataset: dataset to train on (app flag ``--dataset``)
        epochs: number of passes over the training split
        batch_size: global batch size, split across ranks
        embedding_dim: embedding dimension of every table
        learning_rate: learning rate of the dense (non-embedding) parameters
        embedding_learning_rate: learning rate of the embedding tables
        dense_arch_layer_sizes: comma-separated layer sizes of the dense arch, e.g. 64,16
            (the last must equal embedding_dim)
        over_arch_layer_sizes: comma-separated hidden sizes of the over arch, e.g. 64,32
            (the app appends a head with one logit per task)
        seed: random seed for the model initialisation, data split and shuffling
        tensorboard_dir: parent folder of the run folders holding TensorBoard event files
        run_name: run folder name under tensorboard_dir (default: derived by the app)
        max_rows: keep only a seeded random sample of this many interactions (smoke runs)
        history_length: length of the per-user item-history sequence feature
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
    app_flags = {
        "dataset": dataset,
        "epochs": epochs,
        "batch_size": batch_size,
        "embedding_dim": embedding_dim,
        "learning_rate": learning_rate,
        "embedding_learning_rate": embedding_learning_rate,
        "dense_arch_layer_sizes": dense_arch_layer_sizes,
        "over_arch_layer_sizes": over_arch_layer_sizes,
        "seed": seed,
        "tensorboard_dir": tensorboard_dir,
        "run_name": run_name,
        "max_rows": max_rows,
        "history_length": history_length,
    }
    hints = get_type_hints(train)
    args: List[str] = []
    for flag, value in app_flags.items():
        if value is None:
            continue
        kind = next(t for t in get_args(hints[flag]) if t is not type(None))
        # TorchX's CLI hands Optional[int] and Optional[float] values over as strings:
        # check them here, so a typo fails at submission rather than after the job queued.
        if isinstance(value, str) and kind is not str:
            try:
                value = kind(value)
            except ValueError:
                raise ValueError(f"--{flag} must be {kind.__name__}, got {value!r}") from None
        elif not isinstance(value, kind) and not (kind is float and isinstance(value, int)):
            raise TypeError(f"--{flag} must be {kind.__name__}, got {value!r}")
        # argparse keeps the last of repeated flags: a silent override is worse than an error.
        if any(a == f"--{flag}" or a.startswith(f"--{flag}=") for a in script_args):
            raise ValueError(
                f"--{flag} is set both as a component parameter ({value!r}) and in the "
                f"pass-through script_args {list(script_args)}; set it once"
            )
        # One "--flag=value" token: a value starting with "-" (a negative seed) stays a value.
        args.append(f"--{flag}={value}")
    if max_restarts < 0:
        raise ValueError(f"--max_restarts must be >= 0, got {max_restarts}")
    app = dist.ddp(
        *args,
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
