"""Scale-out: one exact enumeration over many workers (Ray actors), the same answers as one process.

``pip install 'arenum[ray]'``. See ``docs/distributed.md``::

    from arenum.distributed import DistributedEnumerable, ModelSpec
    with DistributedEnumerable(ModelSpec.ngram("model.npz", max_len=8), workers=2) as d:
        d.threshold(10**6)
"""
from .backend import LocalBackend, RayBackend
from .enumerable import DistributedEnumerable
from .plan import ShardPlan, plan_shards
from .spec import ModelSpec
from .worker import ShardWorker

__all__ = ["DistributedEnumerable", "ModelSpec", "ShardPlan", "plan_shards", "ShardWorker", "LocalBackend",
           "RayBackend"]
