"""The pre-training app as a module: pre-train the embedding tables, then fine-tune from them.

``python -m dlrm_multiepoch.pretrain --help``. A run of the training app's
:class:`~dlrm_multiepoch.train.trainer.Trainer` with the pre-training model and loss
(:class:`~dlrm_multiepoch.train.pretrain.PretrainSpec`): it takes the training app's
flags plus ``--pretrain_output`` and ``--pretrain_train_fraction``, and at the end saves
the tables with ``torch.distributed.checkpoint`` to ``--pretrain_output``. Launch it like
the training app, e.g. on 2 CPU ranks, then fine-tune::

    torchrun --nproc_per_node 2 -m dlrm_multiepoch.pretrain --history_length 10 --pretrain_output tables/bx-h10
    torchrun --nproc_per_node 2 -m dlrm_multiepoch.train --model multipath --history_length 10 \\
        --pretrained_tables tables/bx-h10
"""

from dlrm_multiepoch.train.app import pretrain_main

if __name__ == "__main__":
    pretrain_main()
