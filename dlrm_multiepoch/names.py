"""The names a flag chooses a part by: one table per kind, torch-free.

Validation (``TrainConfig.validate()``, run by ``dlrm-multiepoch sweep``/``search`` to
plan runs) checks a name against these tables without importing the factories, which
load torch and TorchRec; the factories build from the same tables, so a name is
written once.

Example::

    check_name("--pipeline", "semi_sync", PIPELINES)   # passes
    check_name("--model", "dlrm2", MODELS)             # ValueError: --model must be one of dlrm, ...
"""

from typing import Collection, Tuple

#: ``--model``: the builders in :mod:`dlrm_multiepoch.models.factory`.
MODELS: Tuple[str, ...] = ("dlrm", "dlrm_dcn", "multipath")
#: ``--pipeline``: :func:`dlrm_multiepoch.pipeline.factory.make_train_pipeline`.
PIPELINES: Tuple[str, ...] = ("sparse_dist", "semi_sync", "torchrec_semi_sync")
#: ``--sharding_types``: TorchRec's ``ShardingType`` values the planner may use.
SHARDING_TYPES: Tuple[str, ...] = (
    "data_parallel", "table_wise", "column_wise", "row_wise", "table_row_wise", "table_column_wise",
)  # fmt: skip
#: ``--embedding_optimizer``: the fused table optimizers (:mod:`dlrm_multiepoch.train.sharding`).
EMBEDDING_OPTIMIZERS: Tuple[str, ...] = ("rowwise_adagrad", "adagrad", "sgd")
#: ``--falr``: :class:`dlrm_multiepoch.optim.options.FALRConfig` kinds.
FALR_KINDS: Tuple[str, ...] = ("log", "power")
#: ``--table_lr_decay``.
TABLE_LR_DECAYS: Tuple[str, ...] = ("constant", "linear", "cosine")
#: ``--multi_hot_pooling``.
POOLINGS: Tuple[str, ...] = ("sum", "mean")
#: The evaluated splits, as run records (summary.json, event files) name them.
VAL, TEST, TRAIN_SAMPLE = "val", "test", "train_sample"


def check_name(flag: str, value: str, names: Collection[str]) -> None:
    """Raise ``ValueError`` naming ``flag`` and the choices when ``value`` is not one of ``names``."""
    if value not in names:
        raise ValueError(f"{flag} must be one of {', '.join(names)}; got {value!r}")
