"""parallel/ddp.py: one process keeps the module itself (the wrapper of several processes is
exercised by ``train --model ... --nproc 2``, tests/cli/test_training.py)."""

import torch

from torchrankboost.parallel import get_context
from torchrankboost.parallel.ddp import data_parallel


def test_one_process_keeps_the_module():
    net = torch.nn.Linear(3, 1)
    assert data_parallel(net, get_context(False), torch.device("cpu")) is net
