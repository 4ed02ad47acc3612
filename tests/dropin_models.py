"""Models the app never builds, sharded as a TorchRec user would, for ``tests/test_dropin.py``.

TorchRec's own test models (``torchrec.distributed.test_utils.test_model``) and
``DLRM_DCN`` behind a ``DLRMTrain`` loss, each sharded by an explicit plan of one
sharding type (``construct_module_sharding_plan``), fused row-wise Adagrad set through
the sharders' ``fused_params``, and a few batches per rank. Call inside a process group.

Cells TorchRec 1.8 itself cannot run on CPU (so they are not in :data:`CELLS`):

- managed-collision modules with any sharding but row-wise: TorchRec's MC sharder asserts
  "Only ROW_WISE sharding is supported";
- an ``EmbeddingCollection`` on the dense compute kernel, which data-parallel sharding
  always uses (and an explicit plan without a compute kernel gives): its lookup returns
  one row per bag instead of one per id, and TorchRec's own output step fails
  (``split_with_sizes expects split_sizes to sum exactly to 16``). The mixed model's
  ``dp`` cell therefore makes only its EBC data-parallel.

TorchRec's ``TrainPipelineSparseDist`` ``detach()``es, runs an eval forward and
``attach()``es mid-epoch only where it can (``Case.detach_shardings``): after that, on
a model with an ``EmbeddingCollection`` the next forward's all-to-all fails (gloo
``in->size == out->size``), on managed-collision modules both ranks hang in a backward
all-to-all, and its ``detach()`` leaves a row-wise FP-EBC marked pipelined, whose plain
forward then fails ("doesn't have weights"). ``SemiSyncTrainPipeline`` does it in every
cell but the managed-collision one (where the eval forward itself moves the remapper).

:data:`TRAINER_MODELS` runs TorchRec's ``TestSparseNN`` and the example's DeepFM
(``examples/deepfm``) on the app's data instead, for the app's Trainer and the parts loop of docs/DROPIN.md
alike: ``TestSparseNN`` through a ``TrainSpec`` behind :class:`ModelInputTrain` (a thin adapter
from the app's ``Batch`` to TorchRec's ``ModelInput``), the DeepFM by ``--model app_model:build``,
as a user names their model (its ``BatchAdapter`` builds TorchRec's ``Batch``).

Row-wise sharding does run on CPU: TorchRec's planner never proposes it there (the EBC
sharder lists row-wise for CUDA only), but an explicit ``row_wise()`` plan shards and
trains.
"""

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from fbgemm_gpu.split_embedding_configs import EmbOptimType
from torch import nn
from torchrec.datasets.random import RandomRecDataset
from torchrec.distributed import DistributedModelParallel
from torchrec.distributed.embedding import EmbeddingCollectionSharder
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.fp_embeddingbag import FeatureProcessedEmbeddingBagCollectionSharder
from torchrec.distributed.mc_embeddingbag import ManagedCollisionEmbeddingBagCollectionSharder
from torchrec.distributed.sharding_plan import (
    column_wise,
    construct_module_sharding_plan,
    data_parallel,
    row_wise,
    table_wise,
)
from torchrec.distributed.test_utils.test_model import ModelInput, TestMixedEmbeddingSparseArch, TestSparseNN
from torchrec.distributed.types import ShardingPlan
from torchrec.models.dlrm import DLRM_DCN, DLRMTrain
from torchrec.modules.embedding_configs import EmbeddingBagConfig, EmbeddingConfig
from torchrec.modules.embedding_modules import EmbeddingBagCollection
from torchrec.optim.keyed import KeyedOptimizerWrapper
from torchrec.optim.optimizers import in_backward_optimizer_filter

from dlrm_multiepoch.data.batch import Batch
from dlrm_multiepoch.data.dataset import InteractionData
from dlrm_multiepoch.models.config import ModelConfig
from dlrm_multiepoch.models.dlrm import ModelOutput, embedding_bag_configs
from dlrm_multiepoch.tables import embedding_modules
from dlrm_multiepoch.testing.dlrm_job import copy_into_shards
from dlrm_multiepoch.train.spec import TRAIN, TrainSpec

ROWS, DIM, BATCH, STEPS_PER_EPOCH = 40, 8, 8, 2
FUSED = {"optimizer": EmbOptimType.EXACT_ROWWISE_ADAGRAD, "learning_rate": 0.05}
SHARDINGS = ("table_wise", "row_wise", "column_wise", "data_parallel")


@dataclass
class Case:
    """One model: how to build it, its batches, and the tables its freeze schedule freezes."""

    build: Callable[[], nn.Module]  # the unsharded model, tables on the meta device
    batches: Callable[[int, int], List[Any]]  # (rank, world size) -> 2 epochs of batches, then 1 for eval
    schedule: str  # frozen in epoch 0, trained in epoch 1
    frozen: Tuple[str, ...]
    shardings: Tuple[str, ...] = SHARDINGS
    # Where TorchRec's TrainPipelineSparseDist can detach()/eval/attach() it mid-epoch.
    detach_shardings: Tuple[str, ...] = SHARDINGS
    eval_changes_state: bool = False  # an eval forward moves state (a managed-collision remapper)
    synchronous: Tuple[str, ...] = ("data_parallel",)  # shardings under which no module may look up early
    refused: Optional[Tuple[str, str]] = None  # (schedule, error pattern) FreezeScheduleWrapper must refuse


def _bag(name: str, feature: Optional[str] = None) -> EmbeddingBagConfig:
    return EmbeddingBagConfig(name=name, embedding_dim=DIM, num_embeddings=ROWS, feature_names=[feature or name])


def _inputs(tables, weighted=(), max_lengths=None) -> Callable[[int, int], List[ModelInput]]:
    def batches(rank: int, world_size: int) -> List[ModelInput]:
        return [
            ModelInput.generate(
                batch_size=BATCH, world_size=world_size, num_float_features=4, tables=list(tables),
                weighted_tables=list(weighted), random_seed=step, max_feature_lengths=max_lengths,
            )[1][rank]
            for step in range(STEPS_PER_EPOCH * 2 + 1)  # the last one for eval forwards
        ]

    return batches


def _dlrm_dcn() -> Case:
    tables = [_bag(f"t{i}") for i in range(3)]

    def build() -> nn.Module:
        ebc = EmbeddingBagCollection(tables=tables, device=torch.device("meta"))
        return DLRMTrain(DLRM_DCN(ebc, 4, [16, DIM], [16, 1], dcn_num_layers=1, dcn_low_rank_dim=4))

    def batches(rank: int, world_size: int) -> list:  # TorchRec's own Batch
        data = RandomRecDataset(
            keys=[t.name for t in tables], batch_size=BATCH, hash_size=ROWS, ids_per_feature=3, num_dense=4,
            manual_seed=100 + rank, num_batches=STEPS_PER_EPOCH * 2 + 1,
        )
        return list(data)

    return Case(build, batches, "table:t0=frozen@[0,1) train@[1,end)", ("t0",))


def _sparse_nn_weighted() -> Case:
    tables, weighted = [_bag("t0"), _bag("t1")], [_bag("w0")]
    build = lambda: TestSparseNN(tables=tables, weighted_tables=weighted, num_float_features=4, sparse_device=torch.device("meta"))
    return Case(build, _inputs(tables, weighted), "table:t0=frozen@[0,1); table:w0=frozen@[0,1)", ("t0", "w0"))


def _sparse_nn_fp() -> Case:
    tables = [_bag("t0"), _bag("t1")]  # feature = table name: TestSparseNN keys position weights by it
    build = lambda: TestSparseNN(
        tables=tables, num_float_features=4, sparse_device=torch.device("meta"), max_feature_lengths={"t1": 10}
    )
    # Its position weights are dense parameters used in the lookup: the FP-EBC never overlaps, the EBC does.
    # TorchRec's detach() leaves a row-wise FP-EBC marked pipelined: its plain forward then fails.
    detach = tuple(s for s in SHARDINGS if s != "row_wise")
    return Case(build, _inputs(tables, max_lengths=[10, 10]), "table:t1=frozen@[0,1)", ("t1",), detach_shardings=detach)


def _mixed() -> Case:
    tables = [_bag("t0")] + [
        EmbeddingConfig(name=f"t{i}", embedding_dim=DIM, num_embeddings=ROWS, feature_names=[f"t{i}"]) for i in (1, 2)
    ]
    build = lambda: TestMixedEmbeddingSparseArch(
        tables=tables, num_float_features=4, sparse_device=torch.device("meta"), device=torch.device("meta")
    )
    # Its EC is never data-parallel (see above), so it overlaps in every cell.
    return Case(
        build, _inputs(tables), "table:t0=frozen@[0,1); table:t1=frozen@[0,1)", ("t0", "t1"), synchronous=(),
        detach_shardings=(),
    )


@dataclass
class _SortZch:  # TestSparseNN's zch_kwargs entry for one table
    mc_type: str = "sort-zch"
    input_hash_size: int = 4000


def _managed_collision() -> Case:
    tables, weighted = [_bag("t0"), _bag("t1")], [_bag("w0")]  # its forward needs weighted tables too
    build = lambda: TestSparseNN(
        tables=tables, weighted_tables=weighted, num_float_features=4, sparse_device=torch.device("meta"),
        zch_kwargs={t.name: _SortZch() for t in tables + weighted},
    )
    # Tables cannot be frozen (refused); a module group still can. TorchRec's TrainPipelineSparseDist
    # hangs in the next backward's all-to-all after detach()/eval/attach() with these modules.
    return Case(
        build, _inputs(tables, weighted), "module:over*=frozen@[0,1)", (), shardings=("row_wise",),
        detach_shardings=(), synchronous=("row_wise",), eval_changes_state=True,
        refused=("tables=frozen@[0,1)", r"ManagedCollisionEmbeddingBagCollection 'sparse\.ebc': a managed-collision"),
    )


MODELS: Dict[str, Callable[[], Case]] = {
    "dlrm_dcn": _dlrm_dcn,
    "sparse_nn_weighted": _sparse_nn_weighted,
    "sparse_nn_fp": _sparse_nn_fp,
    "mixed_ebc_ec": _mixed,
    "managed_collision": _managed_collision,
}


def _sharders(fused: Dict[str, Any]) -> list:
    ebc = EmbeddingBagCollectionSharder(fused_params=fused)
    return [
        ebc,
        EmbeddingCollectionSharder(fused_params=fused),
        FeatureProcessedEmbeddingBagCollectionSharder(ebc),
        ManagedCollisionEmbeddingBagCollectionSharder(ebc),
    ]


def _generator(sharding: str, index: int, world_size: int, dense_kernel: bool):
    kernel = None if dense_kernel else "fused"  # no kernel in an explicit plan: TorchRec picks dense
    if sharding == "table_wise":
        return table_wise(rank=index % world_size, compute_kernel=kernel)
    if sharding == "row_wise":
        return row_wise(compute_kernel=kernel)
    if sharding == "column_wise":
        return column_wise(ranks=list(range(world_size)), compute_kernel=kernel)
    return data_parallel()


def shard(model: nn.Module, sharding: str, world_size: int, fused: Dict[str, Any] = FUSED) -> DistributedModelParallel:
    """An explicit plan: every table ``sharding``; in the table-wise cell of the weighted model its
    weighted tables stay on the dense kernel, and the mixed model's EC is never data-parallel."""
    sharders = _sharders(fused)
    plans = {}
    for path, module in model.named_modules():
        sharder = next((s for s in sharders if type(module) is s.module_type), None)
        if sharder is None:
            continue
        kind = "row_wise" if sharding == "data_parallel" and "EmbeddingCollection" == type(module).__name__ else sharding
        dense = sharding == "table_wise" and path.endswith("weighted_ebc")
        params = sharder.shardable_parameters(module)
        plans[path] = construct_module_sharding_plan(
            module,
            {name: _generator(kind, i, world_size, dense) for i, name in enumerate(params)},
            sharder=sharder,
            local_size=world_size,
            world_size=world_size,
            device_type="cpu",
        )
    dmp = DistributedModelParallel(model, device=torch.device("cpu"), plan=ShardingPlan(plans), sharders=sharders)
    fill_tables(dmp)
    return dmp


def fill_tables(dmp: nn.Module) -> None:
    """Every table and dense weight from values that depend only on its name (cells compare across shardings).

    DMP materialises meta-device layers after sharding, so their random init depends on the plan.
    """
    embedding_params = {id(p) for m in embedding_modules(dmp) for p in m.module.parameters()}
    with torch.no_grad():
        for name, param in dmp.named_parameters():
            if id(param) not in embedding_params:
                g = torch.Generator().manual_seed(sum(map(ord, name)))
                param.copy_(torch.empty(param.shape).uniform_(-0.3, 0.3, generator=g))
        for key, value in dmp.state_dict().items():
            parts = key.split(".")
            if len(parts) < 3 or parts[-1] != "weight" or parts[-3] not in ("embedding_bags", "embeddings"):
                continue
            g = torch.Generator().manual_seed(sum(map(ord, parts[-2])))
            full = torch.empty(ROWS, DIM).uniform_(-0.1, 0.1, generator=g)
            if hasattr(value, "local_shards"):
                copy_into_shards(value, full)
            else:  # data-parallel: the full table on every rank
                value.copy_(full)


def dense_optimizer(dmp: nn.Module) -> KeyedOptimizerWrapper:
    """Adam over everything the fused optimizer does not train (TorchRec's recipe)."""
    return KeyedOptimizerWrapper(
        dict(in_backward_optimizer_filter(dmp.named_parameters())), lambda params: torch.optim.Adam(params, lr=1e-2)
    )


class ModelInputTrain(nn.Module):
    """One of TorchRec's test models behind the contract of the app's models: ``forward(Batch) -> (loss, ModelOutput)``.

    Why it exists: TorchRec's test models take their own ``ModelInput`` (one label, no
    sample weights) and return ``(loss, pred)`` in training but a bare ``pred`` in eval,
    while the app's loaders yield :class:`~dlrm_multiepoch.data.batch.Batch` and the
    Trainer, the evaluation (``BinaryMetrics``) and ``SkipNonFiniteBatches`` read
    ``(loss, ModelOutput)``. A user's own model that already returns ``(loss, output)``
    from its batch needs no such adapter. The ``ModelInput`` holds the batch's own
    tensors (no copy, no op on them), so TorchRec's tracer still finds each sharded
    module's input in the batch (``batch.sparse_features``) and pipelines its lookup.
    ``pred`` is the model's logit (its loss is ``binary_cross_entropy_with_logits(pred,
    label)``); its loss counts weight-0 padding rows, which the app's models leave out.

    Args:
        model: a model ``forward(ModelInput)`` as ``TestSparseNN`` (one prediction per sample).
        task: the ``Batch`` label it is trained on.

    Example::

        train_model = ModelInputTrain(TestSparseNN(tables, num_float_features=4), "like")
        loss, out = train_model(batch)
    """

    def __init__(self, model: nn.Module, task: str) -> None:
        super().__init__()
        self.model, self.task = model, task

    def forward(self, batch: Batch) -> Tuple[torch.Tensor, ModelOutput]:
        label = batch.labels[self.task]
        result = self.model(ModelInput(batch.dense_features, batch.sparse_features, None, label))
        # In eval the model returns its prediction only: the same loss, for the output's record.
        loss, pred = result if self.training else (F.binary_cross_entropy_with_logits(result, label), result)
        detached = loss.detach()
        out = ModelOutput(detached, {self.task: detached}, pred.detach()[:, None], label[:, None], batch.weights)
        return loss, out


class TorchRecTestModelSpec(TrainSpec):
    """The app's supervised run on a model it never builds, built for the dataset's tables.

    Args:
        name: the model's name (run names, the console).
        build: ``(dataset, model config, dense device) -> the training module`` (``forward(Batch) ->
            (loss, ModelOutput)``), its tables on the meta device.

    Example::

        spec = TorchRecTestModelSpec("sparse_nn", lambda data, cfg, device: ModelInputTrain(TestSparseNN(...), "like"))
        Trainer(cfg, env, data=data, spec=spec).train()
    """

    def __init__(self, name: str, build: Callable[[InteractionData, ModelConfig, torch.device], nn.Module]) -> None:
        self.name, self.build = name, build

    def label(self, cfg: Any) -> str:
        return self.name

    def build_model(self, data: InteractionData, cfg: ModelConfig, device: torch.device) -> nn.Module:
        if len(data.tasks) != 1:
            raise ValueError(f"{self.name} predicts one label; dataset {data.name!r} has tasks {data.tasks}")
        return self.build(data, cfg, device)


def _sparse_nn_for(data: InteractionData, cfg: ModelConfig, device: torch.device) -> nn.Module:
    tables = embedding_bag_configs(data.tables, cfg.embedding_dim)
    model = TestSparseNN(tables, len(data.dense_names), dense_device=device, sparse_device=torch.device("meta"))
    return ModelInputTrain(model, data.tasks[0])


TRAINER_MODELS: Dict[str, Tuple[TrainSpec, str, Dict[str, Any]]] = {
    "sparse_nn": (TorchRecTestModelSpec("sparse_nn", _sparse_nn_for), "dlrm", {}),
    "deepfm": (TRAIN, "app_model:build", {"history_length": 3}),
}
"""Models the app's Trainer and the parts loop of docs/DROPIN.md train on the app's data (``test_dropin.py``), each as
``(its TrainSpec, --model, synthetic_data arguments)``: TorchRec's ``TestSparseNN`` through a ``TrainSpec``, the
example's DeepFM (an EBC and an EC sequence feature) by the import path a user names it by
(``examples/deepfm/app_model.py``; ``tests.doc_blocks.import_example`` puts its folder on the path)."""
