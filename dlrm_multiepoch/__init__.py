"""dlrm-multiepoch: multi-epoch training components for TorchRec DLRM-style models.

The top level exports the components a TorchRec user puts into their own model and
training loop, and what their model needs under the training app, and nothing else
(``tests/test_public_api.py`` checks this list):

- freeze schedule: ``FreezeSchedule``, ``Window``, ``FreezeScheduleWrapper``,
  ``ScheduleSource``, ``FixedSchedule``
- automatic schedule: ``AutoFreezeSchedule``, ``AutoSchedulePolicy``, ``AutoScheduleConfig``
- gradient gates: ``GradientGate``
- table remedies: ``TableLRScheduler``, ``TableLRSchedule``, ``FrequencyAdaptiveLR``,
  ``FALRConfig``, ``reinit_tables``, ``ReinitSchedule``, ``GradientAccumulation``
- semi-synchronous pipeline: ``SemiSyncTrainPipeline``, ``SemiSyncContext``, ``StalenessMeter``
- lookups: ``FusedKJTLookup``, ``SingletonEmbeddingBagCollection``,
  ``SmallTableEmbeddingBagCollection``, ``dense_grad_embedding_bag``
- tables: ``embedding_modules``, ``EmbeddingModule``
- the training loop's parts (the app's Trainer is a loop over them): ``TrainPart``,
  ``TrainParts``, ``TrainProgress``, ``Validator``, ``Decisions``, ``AutoRun``, ``TableReinit``,
  ``IdDropout``, ``SkipNonFiniteBatches``, ``BinaryMetrics``, ``eval_outputs``, ``MetricsLogger``
- what they read from your model's output: ``StepOutput`` (a protocol), ``ModelOutput`` (the
  app's models' output, one that fits it)
- resuming with one ``dcp.load``: ``init_optimizer_state``
- your model under the training app, sweep and search (``--model MODULE:NAME``,
  docs/YOUR_MODEL.md): ``ModelBuilder`` (what the path names), what it is called with
  (``InteractionData``, ``ModelConfig``), the batch its model receives (``Batch``) and
  ``BatchAdapter`` (a model over its own batch type)

Everything else lives in its subpackage: the datasets and loaders in
:mod:`dlrm_multiepoch.data`, the models in :mod:`dlrm_multiepoch.models`, the training
app in :mod:`dlrm_multiepoch.train`, the ``--pipeline`` factory in
:mod:`dlrm_multiepoch.pipeline.factory`, the all-to-all counter tests and benchmarks use
in :mod:`dlrm_multiepoch.lookup.comm_count`.

The exports load on first use (PEP 562), so ``import dlrm_multiepoch.<config module>``
(the TorchX components, the ``dlrm-multiepoch`` command) does not load torch.

Example::

    from dlrm_multiepoch import FreezeScheduleWrapper, SemiSyncTrainPipeline
"""

from dlrm_multiepoch.lazy import lazy_exports

# The one place the version is written: pyproject.toml reads it from here (setuptools' dynamic version).
# It changes with every user-visible change, and CHANGELOG.md says what changed (tests/test_public_api.py).
__version__ = "0.2.0"

_EXPORTS = {
    "FreezeSchedule": "dlrm_multiepoch.schedule",
    "Window": "dlrm_multiepoch.schedule",
    "FreezeScheduleWrapper": "dlrm_multiepoch.freeze",
    "ScheduleSource": "dlrm_multiepoch.freeze",
    "FixedSchedule": "dlrm_multiepoch.freeze",
    "AutoFreezeSchedule": "dlrm_multiepoch.auto",
    "AutoSchedulePolicy": "dlrm_multiepoch.auto",
    "AutoScheduleConfig": "dlrm_multiepoch.auto",
    "GradientGate": "dlrm_multiepoch.gates",
    "TableLRScheduler": "dlrm_multiepoch.optim",
    "TableLRSchedule": "dlrm_multiepoch.optim",
    "FrequencyAdaptiveLR": "dlrm_multiepoch.optim",
    "FALRConfig": "dlrm_multiepoch.optim",
    "reinit_tables": "dlrm_multiepoch.optim",
    "ReinitSchedule": "dlrm_multiepoch.optim",
    "GradientAccumulation": "dlrm_multiepoch.optim",
    "SemiSyncTrainPipeline": "dlrm_multiepoch.pipeline",
    "SemiSyncContext": "dlrm_multiepoch.pipeline",
    "StalenessMeter": "dlrm_multiepoch.pipeline",
    "FusedKJTLookup": "dlrm_multiepoch.lookup",
    "SingletonEmbeddingBagCollection": "dlrm_multiepoch.lookup",
    "SmallTableEmbeddingBagCollection": "dlrm_multiepoch.lookup",
    "dense_grad_embedding_bag": "dlrm_multiepoch.lookup",
    "embedding_modules": "dlrm_multiepoch.tables",
    "EmbeddingModule": "dlrm_multiepoch.tables",
    "TrainPart": "dlrm_multiepoch.part",
    "TrainParts": "dlrm_multiepoch.part",
    "TrainProgress": "dlrm_multiepoch.train.progress",
    "StepOutput": "dlrm_multiepoch.step_output",
    "ModelOutput": "dlrm_multiepoch.models.dlrm",
    "init_optimizer_state": "dlrm_multiepoch.train.checkpoint.load",
    "ModelBuilder": "dlrm_multiepoch.models.user_model",
    "InteractionData": "dlrm_multiepoch.data.dataset",
    "ModelConfig": "dlrm_multiepoch.models.config",
    "Batch": "dlrm_multiepoch.data.batch",
    "BatchAdapter": "dlrm_multiepoch.models.batch_adapter",
    "Validator": "dlrm_multiepoch.train.validator",
    "Decisions": "dlrm_multiepoch.train.validator",
    "AutoRun": "dlrm_multiepoch.train.auto_run",
    "TableReinit": "dlrm_multiepoch.optim.reinit",
    "IdDropout": "dlrm_multiepoch.data.id_dropout",
    "SkipNonFiniteBatches": "dlrm_multiepoch.train.nonfinite",
    "BinaryMetrics": "dlrm_multiepoch.train.evaluate",
    "eval_outputs": "dlrm_multiepoch.train.evaluate",
    "MetricsLogger": "dlrm_multiepoch.train.metrics_logger",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
