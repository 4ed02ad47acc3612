"""Drop-in: the freeze wrapper and both pipelines on models the app never builds, 2 gloo ranks.

Every cell of (TorchRec's shipped test models and DLRM_DCN) x (table-wise, row-wise,
column-wise, data-parallel) that TorchRec 1.8 runs on CPU (see ``tests/dropin_models.py``
for the ones it cannot) trains three times from the same start:

1. ``TrainPipelineSparseDist`` with the wrapper (``detach()``/eval/``attach()`` mid-epoch
   where TorchRec can);
2. ``SemiSyncTrainPipeline(staleness=0)``, the same (``detach()``/eval/``attach()`` in
   every cell whose eval forward changes nothing): bitwise equal outputs, weights and
   optimizer state;
3. README's drop-in loop as written (``SemiSyncTrainPipeline`` with default arguments):
   frozen tables and their optimizer state bitwise unchanged through the frozen epoch,
   trained tables changed, frozen tables trained afterwards, replicas equal across ranks,
   and the README's saved dict ``{"model", "optimizer", "freeze"}`` restored by one
   ``dcp.load`` on every sharding, tables a rank holds no shard of included.

First-step outputs agree across sharding types (row-wise on CPU computes what table-wise
does). One spawn covers many cells; each rank checks its own shards.

docs/DROPIN.md's drop-in block (the remedies and the automatic schedule in a user's loop,
with the user's validation) gives bitwise the app ``Trainer``'s per-step losses, weights
and automatic decisions (a frozen->joint transition among them) with the matching flags,
on TorchRec's ``TestSparseNN`` and the example's DeepFM (``examples/deepfm``: an EBC and an
EC sequence feature, over TorchRec's ``Batch``) trained on a synthetic one-task dataset:
the Trainer runs ``TestSparseNN`` through a ``TrainSpec`` and the DeepFM by
``--model app_model:build``, as a user names their model (``tests/dropin_models.py``'s
``TRAINER_MODELS``), the DROPIN.md block the same model from ``build_sharded_model``; both
pipelines overlap every sharded lookup. The app's own DLRM goes through the same Trainer and
parts in the Trainer's tests.
"""

import contextlib
import logging
import re
import subprocess
import sys
from logging.handlers import BufferingHandler
from typing import Any, Dict, Iterator, List

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from fbgemm_gpu.tbe.config import WeightDecayMode
from torch import nn
from torchrec import EmbeddingBagCollection, EmbeddingBagConfig
from torchrec.distributed.train_pipeline import TrainPipelineSparseDist
from torchrec.optim.keyed import CombinedOptimizer

from dlrm_multiepoch import FreezeScheduleWrapper, SemiSyncTrainPipeline, embedding_modules, init_optimizer_state
from dlrm_multiepoch.data.config import DataConfig
from dlrm_multiepoch.data.synthetic import synthetic_data
from dlrm_multiepoch.distributed import init_distributed
from dlrm_multiepoch.models.config import ModelConfig
from dlrm_multiepoch.testing.ranks import run_on_ranks
from dlrm_multiepoch.train.build import build_loaders, build_sharded_model
from dlrm_multiepoch.train.config import OptimConfig, TrainConfig
from dlrm_multiepoch.train.trainer import Trainer
from tests.dropin_models import FUSED, MODELS, STEPS_PER_EPOCH, TRAINER_MODELS, dense_optimizer, shard
from tests.freeze_helpers import changed
from tests.doc_blocks import LOOP, PARTS, doc_block, import_example
from tests.resume_helpers import assert_bitwise_equal
from tests.sharding_helpers import differing_keys, snapshot

EPOCHS = 2
CPU = torch.device("cpu")
ALL_TABLES = ("t0", "t1", "t2", "w0")


class Loader:
    """A user's dataloader as the loop sees it: ``len()``, ``set_epoch`` and a fresh iterator per epoch."""

    def __init__(self, batches: List[Any], on_epoch) -> None:
        self.batches, self.on_epoch, self.epoch = batches, on_epoch, 0

    def __len__(self) -> int:
        return STEPS_PER_EPOCH

    def set_epoch(self, epoch: int) -> None:
        assert epoch == self.epoch, (epoch, self.epoch)  # the loop goes through the epochs in order

    def __iter__(self):
        self.on_epoch(self.epoch)  # the previous epoch is drained: its updates are all applied
        start, self.epoch = self.epoch * STEPS_PER_EPOCH, self.epoch + 1
        return iter(self.batches[start : start + STEPS_PER_EPOCH])


def _tensors(x: Any) -> List[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x.detach().clone()]
    if isinstance(x, (tuple, list)):
        return [t for v in x for t in _tensors(v)]
    return []


def _train(model, pipeline, freeze, batches, detach: bool, on_step=lambda: None) -> List[torch.Tensor]:
    """Both epochs' outputs; with ``detach``, after the first step: detach, eval forward on the plain model, attach."""
    outputs: List[torch.Tensor] = []
    for epoch in range(EPOCHS):
        it = iter(batches[epoch * STEPS_PER_EPOCH : (epoch + 1) * STEPS_PER_EPOCH])
        while True:
            try:
                outputs += _tensors(pipeline.progress(it))
            except StopIteration:
                break
            freeze.step()
            on_step()
            if detach and freeze.global_step == 1:
                pipeline.detach()
                with torch.no_grad():
                    model(batches[-1])
                pipeline.attach(model)
    return outputs


def _on_any_rank(flag: bool) -> bool:
    t = torch.tensor([int(flag)])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def _all_tables(model) -> List[str]:
    return sorted(name for m in embedding_modules(model) for name in m.table_names)


def _replicas_equal(model) -> None:
    """Every replicated tensor (dense weights, data-parallel tables) is the same on all ranks."""
    local = torch.cat([v.flatten().float() for v in model.state_dict().values() if not hasattr(v, "local_shards")])
    gathered = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, local)
    assert all(torch.equal(gathered[0], g) for g in gathered[1:])


def _cell(name: str, sharding: str, rank: int, world_size: int, tmp: str) -> List[torch.Tensor]:
    case = MODELS[name]()
    where = f"{name}/{sharding}"

    def fresh():
        """Model, optimizer and batches as at the start (a row-wise FP-EBC edits its input KJTs in place)."""
        torch.manual_seed(0)
        model = shard(case.build(), sharding, world_size)
        return model, CombinedOptimizer([model.fused_optimizer, dense_optimizer(model)]), case.batches(rank, world_size)

    if case.refused:
        model, optimizer, _ = fresh()
        with pytest.raises(ValueError, match=case.refused[1]):
            FreezeScheduleWrapper(model, case.refused[0], STEPS_PER_EPOCH, EPOCHS, optimizer=optimizer)
    runs = {}
    for pipeline_name in ("sparse_dist", "staleness0"):
        model, optimizer, batches = fresh()
        freeze = FreezeScheduleWrapper(model, case.schedule, STEPS_PER_EPOCH, EPOCHS, optimizer=optimizer)
        pipeline = (
            TrainPipelineSparseDist(model, optimizer, CPU)
            if pipeline_name == "sparse_dist"
            else SemiSyncTrainPipeline(model, optimizer, CPU, staleness=0)
        )
        # TorchRec's pipeline detaches only where it can; ours wherever the eval forward changes nothing.
        ours = pipeline_name == "staleness0"
        detach = not case.eval_changes_state if ours else sharding in case.detach_shardings
        outputs = _train(model, pipeline, freeze, batches, detach)
        runs[pipeline_name] = (outputs, snapshot(model, optimizer))
        if ours and not detach:
            pipeline.detach()
            with torch.no_grad():
                model(batches[-1])
    (out_sd, end_sd), (out_s0, end_s0) = runs["sparse_dist"], runs["staleness0"]
    assert len(out_sd) == len(out_s0) and all(torch.equal(a, b) for a, b in zip(out_sd, out_s0)), where
    assert not differing_keys(end_sd, end_s0), (where, differing_keys(end_sd, end_s0)[:5])

    # README's loop, as written.
    model, _, batches = fresh()
    snaps = []
    namespace = dict(
        model=model, dense_optimizer=dense_optimizer(model), schedule=case.schedule, epochs=EPOCHS, device=CPU,
        loader=Loader(batches, lambda epoch: snaps.append(snapshot(model, namespace["optimizer"]))),
        checkpoint_dir=f"{tmp}/{name}-{sharding}", resume_from=None,
    )
    with _logged("dlrm_multiepoch") as lines:
        exec(doc_block(LOOP), namespace)
    start, after_frozen, end = snaps[0], snaps[1], snapshot(model, namespace["optimizer"])
    for table in _all_tables(model):
        during = changed(start, after_frozen, ALL_TABLES, table)  # empty on a rank holding no shard of it
        after = changed(after_frozen, end, ALL_TABLES, table)
        if table in case.frozen:  # weights and optimizer state bitwise still, then trained
            assert not any(during.values()), (where, table, during)
            assert _on_any_rank(any(v for k, v in after.items() if k.startswith("w."))), (where, table)
        else:  # some rank's shard moved (a managed-collision remapper may use one rank's rows only)
            assert _on_any_rank(any(v for k, v in during.items() if k.startswith("w."))), (where, table)
    _replicas_equal(model)
    synchronous = sharding in case.synchronous  # data-parallel and managed-collision modules look up late
    assert bool(namespace["pipeline"]._early) != synchronous, where
    # Which modules overlap is said once, whether all do or not.
    said = [line for line in lines if line.startswith("SemiSyncTrainPipeline: ") and "previous backward" in line]
    late = "after each update (TrainPipelineSparseDist's order)" if namespace["pipeline"]._late else "every lookup overlaps"
    assert len(said) == (rank == 0) and all(late in line for line in said), (where, said)
    if synchronous:  # nothing overlaps: exactly the synchronous pipeline's result
        assert not differing_keys(end, end_sd), (where, differing_keys(end, end_sd)[:5])
    if sharding == "table_wise" and case.frozen:
        _check_semi_sync_options(case, world_size, rank, out_sd)
    _check_loads_back(namespace, case, f"{tmp}/{name}-{sharding}/epoch_{EPOCHS - 1}", end, where)
    return out_sd[:1]


@contextlib.contextmanager
def _logged(name: str) -> Iterator[List[str]]:
    """The messages logger ``name`` emits at INFO and above inside the block."""
    handler, logger = BufferingHandler(10_000), logging.getLogger(name)
    level, lines = logger.level, []
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        lines.extend(r.getMessage() for r in handler.buffer)


def _check_loads_back(namespace: Dict[str, Any], case, checkpoint: str, end: Dict[str, torch.Tensor], where: str) -> None:
    """One dcp.load of README's dict, on every sharding (tables a rank holds no shard of included), as saved.

    Not the optimizer where the dense optimizer trains a sharded dense-kernel table (the
    weighted model's table-wise cell): its Adam state is a plain tensor of the rank's local
    shard, empty on a rank without one, which DCP saves once and cannot reshard (docs/DROPIN.md).
    """
    model, optimizer, freeze = namespace["model"], namespace["optimizer"], namespace["freeze"]
    freeze.remove()
    restored = FreezeScheduleWrapper(model, case.schedule, STEPS_PER_EPOCH, EPOCHS, optimizer=optimizer)
    assert restored.global_step == 0
    state = {"model": model, "optimizer": optimizer, "freeze": restored}
    sharded_dense = [t.name for m in embedding_modules(model) for t in m.sharded_tables() if t.dense_kernel and not t.data_parallel]
    if sharded_dense:
        del state["optimizer"]
    else:
        init_optimizer_state(optimizer, checkpoint)
    dcp.load(state, checkpoint_id=checkpoint)
    assert restored.global_step == EPOCHS * STEPS_PER_EPOCH and restored.frozen_tables() == [], where
    assert not differing_keys(end, snapshot(model, optimizer)), (where, differing_keys(end, snapshot(model, optimizer))[:5])
    restored.remove()


def _check_semi_sync_options(case, world_size: int, rank: int, reference: List[torch.Tensor]) -> None:
    """Non-default arguments: no measurement with a freeze hint and warm-up; exact per-step measurement."""
    for kwargs in (dict(measure_staleness=False, warmup_batches=2), dict(staleness_interval=1)):
        torch.manual_seed(0)
        model = shard(case.build(), "table_wise", world_size)
        optimizer = CombinedOptimizer([model.fused_optimizer, dense_optimizer(model)])
        freeze = FreezeScheduleWrapper(model, case.schedule, STEPS_PER_EPOCH, EPOCHS, optimizer=optimizer)
        pipeline = SemiSyncTrainPipeline(model, optimizer, CPU, frozen_tables=freeze.frozen_tables, **kwargs)
        fractions: List[float] = []
        outputs = _train(
            model, pipeline, freeze, case.batches(rank, world_size), False, lambda: fractions.append(pipeline.stale_fraction)
        )
        if "warmup_batches" in kwargs:  # the first epoch is warm-up: fresh lookups, the synchronous result
            half = len(reference) // 2
            assert all(torch.equal(a, b) for a, b in zip(outputs[:half], reference[:half]))
        else:  # epoch starts are fresh (0); later steps overlap the previous batch's rows
            assert fractions[0] == fractions[STEPS_PER_EPOCH] == 0.0 and all(0.0 <= f <= 1.0 for f in fractions)
            assert fractions[-1] > 0.0, fractions


def _check_refusals(rank: int, world_size: int) -> None:
    """What the wrapper must refuse at construction, before anything trains."""
    case = MODELS["dlrm_dcn"]()
    decay = dict(FUSED, weight_decay=0.01, weight_decay_mode=WeightDecayMode.L2)  # as a user sets it
    torch.manual_seed(0)
    model = shard(case.build(), "table_wise", world_size, fused=decay)
    optimizer = CombinedOptimizer([model.fused_optimizer, dense_optimizer(model)])
    start = snapshot(model, optimizer)
    message = (
        r"freezes table 't0' but not all tables of ShardedEmbeddingBagCollection "
        r"'model.sparse_arch.embedding_bag_collection' .* weight_decay=0.01 \(weight_decay_mode=L2\)"
    )
    with pytest.raises(ValueError, match=message):  # a window in the last epoch: refused now, not then
        FreezeScheduleWrapper(model, "table:t0=frozen@[1,2)", STEPS_PER_EPOCH, EPOCHS, optimizer=optimizer)
    assert not differing_keys(start, snapshot(model, optimizer))
    # All tables of the module frozen: the output is cut whole, weight decay never runs on them.
    freeze = FreezeScheduleWrapper(model, "tables=frozen@[0,1)", STEPS_PER_EPOCH, EPOCHS, optimizer=optimizer)
    for batch in case.batches(rank, world_size)[:STEPS_PER_EPOCH]:
        optimizer.zero_grad()
        model(batch)[0].backward()
        optimizer.step()
        freeze.step()
    assert not [k for k in differing_keys(start, snapshot(model, optimizer)) if re.search(r"embedding_bags\.t\d\.", k)]

    # Built on the unsharded model, then sharded in place by DMP: its hooks are gone; the first forward says so.
    unsharded = case.build()
    optimizer = torch.optim.SGD(unsharded.parameters(), lr=0.1)
    FreezeScheduleWrapper(unsharded, "tables=frozen@[0,1)", STEPS_PER_EPOCH, EPOCHS, optimizer=optimizer)
    model = shard(unsharded, "table_wise", world_size)
    with pytest.raises(RuntimeError, match=r"'model.sparse_arch.embedding_bag_collection' \(now ShardedEmbeddingBagCollection\)"):
        model(case.batches(rank, world_size)[0])


def _check_cells(rank: int, world_size: int, names: List[str], tmp: str) -> None:
    if "dlrm_dcn" in names:
        _check_refusals(rank, world_size)
    for name in names:
        first: Dict[str, torch.Tensor] = {}
        for sharding in MODELS[name]().shardings:
            first[sharding] = _cell(name, sharding, rank, world_size, tmp)[0]
        for sharding, out in first.items():  # the first forward, before any update
            torch.testing.assert_close(out, first[next(iter(first))], msg=f"{name}: {sharding} vs table_wise")


@pytest.mark.parametrize("names", [["dlrm_dcn", "sparse_nn_weighted", "managed_collision"], ["sparse_nn_fp", "mixed_ebc_ec"]])
def test_components_on_torchrec_models(names, tmp_path):
    run_on_ranks(_check_cells, 2, names, str(tmp_path))


def _record_losses(model) -> List[torch.Tensor]:
    """Each training step's loss, as the model returns it (evaluation forwards left out)."""
    losses: List[torch.Tensor] = []
    model.module.register_forward_hook(lambda m, _, out: losses.append(out[0].detach().clone()) if m.training else None)
    return losses


def _parts_loop_equals_trainer(rank: int, world_size: int, tmp: str) -> None:
    """Per model: the app's Trainer, then the parts loop (docs/DROPIN.md) from the same seed, on the same data."""
    env = init_distributed()
    import_example()  # the example's folder on the path: --model app_model:build imports from it
    remedies = OptimConfig(
        learning_rate=0.03, embedding_learning_rate=0.5, table_lr_warmup="0.5", table_lr_decay="cosine",
        table_lr_final=0.1, falr="log", reinit="tables@1", grad_accum_steps=2,
    )  # fmt: skip
    for name, (spec, model_flag, data_args) in TRAINER_MODELS.items():
        # 8 steps per epoch of 256 rows (128 per rank), no padding: these models' losses count padding rows.
        tables = {"user": 200, "item": 300, "age": 8}
        data = synthetic_data(3200, tables, tasks=("like",), test_fraction=0.2, val_fraction=0.2, **data_args)
        # data: the record of `data` (handed to the Trainer, not loaded); of the model flags the models read only
        # embedding_dim, but validation holds the app's layer sizes to it (sparse_nn is --model dlrm to the app).
        cfg = TrainConfig.from_flags(
            data=DataConfig(val_fraction=0.2),
            model=ModelConfig(model=model_flag, embedding_dim=8, dense_arch_layer_sizes="8"),
            optim=remedies, tensorboard_dir=tmp, run_name=name, epochs=2, batch_size=256, eval_batch_size=1024,
            train_eval_rows=0, progress_bar=False, sharding_types="table_wise", freeze_schedule="auto",
            pipeline="semi_sync", skip_nonfinite_batches=True, id_dropout="0.1", checkpoint=False,
        )  # fmt: skip
        app = Trainer(cfg, env, data=data, spec=spec)
        assert app.steps_per_epoch == 8, name
        app_losses = _record_losses(app.model)
        app.train()

        loader, eval_loaders = build_loaders(cfg, data, env)
        torch.manual_seed(cfg.seed)
        model, optimizer, _ = build_sharded_model(cfg, data, env, fresh=True, log=lambda _: None, spec=spec)
        losses = _record_losses(model)
        namespace = dict(
            model=model, optimizer=optimizer, loader=loader, val_loader=eval_loaders["val"], tasks=data.tasks,
            epochs=cfg.epochs, device=env.device, rank=rank, checkpoint_dir=f"{tmp}/{name}-user",
            id_dropout={f: 0.1 for t in data.tables for f in t.feature_names}, resume_from=None,
        )  # fmt: skip
        exec(doc_block(PARTS), namespace)
        decisions = [d.to_dict() for d in namespace["freeze"].decisions]
        assert decisions == [d.to_dict() for d in app.freeze.decisions], name
        assert any(d["transition"] for d in decisions), (name, decisions)  # the schedule did act
        assert len(losses) == len(app_losses) == namespace["progress"].step == 16, name
        assert all(torch.equal(a, b) for a, b in zip(losses, app_losses)), name
        assert_bitwise_equal(model.state_dict(), app.model.state_dict(), f"{name}: user loop vs Trainer: final weights")
        # Every sharded lookup overlaps through the adapter, in both loops.
        overlapping = [sorted(m.forward.name for m in p._early) for p in (app.pipeline, namespace["pipeline"])]
        assert overlapping[0] == overlapping[1] == sorted(m.path for m in embedding_modules(model)), (name, overlapping)


def test_readme_parts_loop_gives_the_trainers_results_bitwise(tmp_path):
    run_on_ranks(_parts_loop_equals_trainer, 2, str(tmp_path))


def test_table_names_shared_by_two_collections_are_refused():
    tables = lambda: EmbeddingBagCollection([EmbeddingBagConfig(name="user", embedding_dim=4, num_embeddings=10, feature_names=["u"])])
    model = nn.ModuleDict({"query": tables(), "candidate": tables(), "tower": nn.Linear(4, 1)})
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match=r"'user' in \['query', 'candidate'\]. Rename them"):
        FreezeScheduleWrapper(model, "table:user=frozen", steps_per_epoch=2, num_epochs=1, optimizer=optimizer)
    FreezeScheduleWrapper(model, "module:tower=frozen", 2, 1, optimizer=optimizer)  # no table group: nothing ambiguous


def test_import_is_lazy():
    """Neither the package nor its TorchX component imports torch (the component loads in a bare launcher)."""
    code = "import sys, dlrm_multiepoch, dlrm_multiepoch.components; print(sorted({'torch', 'torchrec'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
    import dlrm_multiepoch

    assert dlrm_multiepoch.SemiSyncTrainPipeline.__name__ == "SemiSyncTrainPipeline"
    assert set(dlrm_multiepoch.__all__) <= set(dir(dlrm_multiepoch))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        dlrm_multiepoch.Nope
