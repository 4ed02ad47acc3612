"""Train pipelines: the semi-synchronous ``TrainPipelineSparseDist`` and the ``--pipeline`` factory."""

from dlrm_multiepoch.pipeline.factory import PIPELINES, make_train_pipeline
from dlrm_multiepoch.pipeline.semi_sync import SemiSyncContext, SemiSyncTrainPipeline
from dlrm_multiepoch.pipeline.staleness import StalenessMeter

__all__ = ["PIPELINES", "SemiSyncContext", "SemiSyncTrainPipeline", "StalenessMeter", "make_train_pipeline"]
