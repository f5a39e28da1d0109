"""How many of a study's workers a Ray cluster places at once: node by node, as Ray places them."""

from __future__ import annotations

import pytest

from hpo._errors import UserError
from hpo.study._ray_cluster import LOCAL_CLUSTER, Node, RayCluster, plan


def _cluster(*nodes: tuple[float, float], address: str = LOCAL_CLUSTER) -> RayCluster:
    """A cluster as :func:`connect` describes it, its nodes as (CPUs, GPUs) (``plan`` reads them, never Ray)."""
    return RayCluster(ray=pytest.importorskip("ray"), address=address, node_list=tuple(Node(c, g) for c, g in nodes), started_here=False)


def test_more_workers_than_the_cluster_can_place_at_once_is_one_line_not_a_run_that_never_ends() -> None:
    # A worker Ray cannot place waits for the resources the others hold until they are killed: the driver waited on it
    # after the budget was met (--ray --workers 3 on 2 CPUs: every trial done, then no end).
    with pytest.raises(UserError, match=r"^--workers 3: a local Ray cluster has 2 CPUs, and each worker needs 1; "
                                        r"pass --workers 2 or fewer"):
        plan(_cluster((2, 0)), 3, None)
    with pytest.raises(UserError, match=r"^--workers 5: a local Ray cluster has 4 GPUs, and each worker needs 1; "
                                        r"pass --workers 4 or fewer"):
        plan(_cluster((16, 4)), 5, None)
    with pytest.raises(UserError, match=r"has 4 CPUs, and each worker needs 1; pass --workers 4 or fewer"):
        plan(_cluster((4, 2)), 8, 0.25)  # room on the GPUs for 8, not on the CPUs
    assert (plan(_cluster((2, 0)), 2, None).workers, plan(_cluster((2, 0)), 1, None).cpus_per_trial) == (2, 2)
    assert plan(_cluster((8, 2)), 8, 0.25).workers == 8
    assert plan(_cluster((2, 0)), None, None).workers == 2
    remote = _cluster((0, 1), (0, 1), address="head.invalid:6379")
    with pytest.raises(UserError, match=r"^--workers 1: the Ray cluster at head.invalid:6379 has 0 CPUs, and each worker needs 1 "
                                        r"on one node; add nodes with CPUs$"):
        plan(remote, None, 1)


def test_a_fraction_of_a_gpu_packs_within_one_gpu_so_the_default_workers_all_fit() -> None:
    # Ray places a 0.4 share within one GPU: two a GPU, four on two GPUs. One worker per 0.4 of the 2 GPUs in all made 5,
    # and the fifth, never placed, kept the run from ending (measured on a local cluster with num_gpus=2: 4 of 5 placed).
    assert plan(_cluster((8, 2)), None, 0.4).workers == 4
    assert plan(_cluster((8, 2)), None, 0.25).workers == 8
    assert plan(_cluster((8, 4)), None, 2).workers == 2
    with pytest.raises(UserError, match=r"^--workers 5: a local Ray cluster has 2 GPUs, and each worker needs 0.4 \(2 share a GPU\); "
                                        r"pass --workers 4 or fewer"):
        plan(_cluster((8, 2)), 5, 0.4)


def test_a_worker_is_placed_on_one_node_so_the_clusters_totals_are_not_what_it_places() -> None:
    # Two nodes of one GPU each: 2 GPUs in all, yet no worker of 2 GPUs can ever be placed (it waited for ever).
    with pytest.raises(UserError, match=r"^--gpus-per-trial 2: the Ray cluster at head.invalid:6379 has no node with 2 GPUs "
                                        r"\(the most on one node: 1; a worker's GPUs are on one node\); ask for less"):
        plan(_cluster((8, 1), (8, 1), address="head.invalid:6379"), None, 2)
    assert plan(_cluster((8, 1), (8, 1)), None, 0.4).workers == 4  # two a GPU on each node
    # Two nodes of 3 CPUs: 3 workers took floor(6 / 3) = 2 CPUs each, and a node holds only one of those: one waited.
    two_nodes = _cluster((3, 0), (3, 0))
    assert [(p.workers, p.cpus_per_trial) for p in (plan(two_nodes, n, None) for n in (None, 2, 3, 4))] == [(6, 1), (2, 3), (3, 1), (4, 1)]
    with pytest.raises(UserError, match=r"^--workers 7: a local Ray cluster has 6 CPUs, and each worker needs 1 on one node; "
                                        r"pass --workers 6 or fewer"):
        plan(two_nodes, 7, None)
    # Enough CPUs and GPUs in all, not on the same node: the GPU node has one CPU to give.
    lopsided = _cluster((1, 4), (8, 0))
    assert plan(lopsided, None, 1).workers == 1
    with pytest.raises(UserError, match=r"^--workers 2: a local Ray cluster places 1 at once \(each worker needs 1 CPUs and 1 GPUs "
                                        r"on one node\); pass --workers 1 or fewer"):
        plan(lopsided, 2, 1)
