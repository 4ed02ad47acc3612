"""Train pipelines: the semi-synchronous ``TrainPipelineSparseDist`` and the ``--pipeline`` factory."""

from dlrm_multiepoch.pipeline.factory import PIPELINES, StepPipeline, make_train_pipeline
from dlrm_multiepoch.pipeline.semi_sync import SemiSyncContext, SemiSyncTrainPipeline
from dlrm_multiepoch.pipeline.staleness import StaleFractionLog, StalenessMeter

__all__ = [
    "PIPELINES", "SemiSyncContext", "SemiSyncTrainPipeline", "StaleFractionLog", "StalenessMeter", "StepPipeline",
    "make_train_pipeline",
]
