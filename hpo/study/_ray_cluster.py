"""A connected Ray cluster, node by node, and how many of a study's workers it places at once.

Ray places each worker on one node, with all it reserves there: a cluster's totals overstate what it
places (two nodes of one GPU each hold no worker of two GPUs). A worker that cannot be placed waits for
ever, and so would the driver that waits for every worker: such a run is refused before it starts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import ModuleType

from hpo._errors import UserError

LOCAL_CLUSTER = "a local Ray cluster"  # a RayCluster's address when it was started here (or this process had one)
_EPSILON = 1e-9  # Ray's resource arithmetic in floats: 3 x 0.1 GPU must count as 0.3


def check_gpus_per_trial(value: float) -> None:
    """Ray places a fraction of one GPU, or whole GPUs: 0.25 and 2 are fine, 1.5 is not."""
    if not (math.isfinite(value) and value >= 0 and (value <= 1 or value == int(value))):
        raise UserError(f"--gpus-per-trial must be a fraction of one GPU (0.25, 0.5) or a whole number of GPUs, got {value:g}")


def trials_per_gpu(gpus_per_trial: float) -> int:
    """How many trials share one GPU: ``floor(1 / F)`` for a fraction F (Ray places a fraction within one GPU), else 1."""
    return max(1, math.floor(1 / gpus_per_trial + _EPSILON)) if 0 < gpus_per_trial < 1 else 1


@dataclass(frozen=True)
class Node:
    """What one live node of the cluster offers Ray's workers."""

    cpus: float
    gpus: float

    def gpu_slots(self, gpus_per_trial: float) -> int:
        """How many trials of ``gpus_per_trial`` (> 0) this node's GPUs hold at once: a fraction packs within one GPU
        (0.4 is two a GPU), whole GPUs come from this node alone."""
        if gpus_per_trial < 1:
            return math.floor(self.gpus + _EPSILON) * trials_per_gpu(gpus_per_trial)
        return math.floor(self.gpus / gpus_per_trial + _EPSILON)

    def places(self, cpus: float, gpus: float) -> int:
        """How many workers reserving ``cpus`` CPUs and ``gpus`` GPUs this node holds at once."""
        by_cpus = math.floor(self.cpus / cpus + _EPSILON) if cpus else math.inf
        return int(min(by_cpus, self.gpu_slots(gpus) if gpus else by_cpus))


@dataclass
class RayCluster:
    """A connected Ray cluster: its live nodes, and how to let go of it (a cluster started here is shut down)."""

    ray: ModuleType
    address: str
    node_list: tuple[Node, ...]
    started_here: bool

    @property
    def nodes(self) -> int:
        return len(self.node_list)

    @property
    def cpus(self) -> float:
        return sum(node.cpus for node in self.node_list)

    @property
    def gpus(self) -> float:
        return sum(node.gpus for node in self.node_list)

    @property
    def named(self) -> str:
        """``the Ray cluster at ADDRESS``, or ``a local Ray cluster``: the cluster in a line the user reads."""
        return self.address if self.address == LOCAL_CLUSTER else f"the Ray cluster at {self.address}"

    def places(self, cpus: float, gpus: float) -> int:
        """How many workers reserving ``cpus`` CPUs and ``gpus`` GPUs the cluster holds at once, node by node."""
        return sum(node.places(cpus, gpus) for node in self.node_list)

    def shutdown(self) -> None:
        if self.started_here:
            self.ray.shutdown()


@dataclass
class RayRun:
    """How the study's workers are placed: how many, and what each reserves."""

    workers: int
    gpus_per_trial: float
    cpus_per_trial: float

    @property
    def trials_per_gpu(self) -> int:
        return trials_per_gpu(self.gpus_per_trial)


def plan(cluster: RayCluster, workers: int | None, gpus_per_trial: float | None) -> RayRun:
    """How ``workers`` (default: as many as the cluster places) run on ``cluster``; refused when they cannot all be
    placed at once. Without GPUs, each worker reserves the most whole CPUs that still place them all, so one worker
    alone trains on a node's every core, as ``--workers`` shares out a machine's."""
    gpus = (1.0 if any(node.gpus >= 1 for node in cluster.node_list) else 0.0) if gpus_per_trial is None else gpus_per_trial
    check_gpus_per_trial(gpus)
    _check_fits(cluster, gpus)
    count = workers or max(1, cluster.places(1, gpus))
    cpus = 1
    if gpus == 0:
        cpus = max([c for c in range(1, math.floor(max(node.cpus for node in cluster.node_list) + _EPSILON) + 1)
                    if cluster.places(c, 0) >= count], default=1)
    _check_placeable(cluster, count, cpus, gpus)
    return RayRun(workers=count, gpus_per_trial=gpus, cpus_per_trial=cpus)


def _check_fits(cluster: RayCluster, gpus_per_trial: float) -> None:
    most = max((node.gpus for node in cluster.node_list), default=0.0)
    if gpus_per_trial > most:
        where = f"has {cluster.gpus:g} GPUs in all" if cluster.nodes <= 1 else \
            f"has no node with {gpus_per_trial:g} GPUs (the most on one node: {most:g}; a worker's GPUs are on one node)"
        raise UserError(f"--gpus-per-trial {gpus_per_trial:g}: {cluster.named} {where}; ask for less, or add GPU nodes")


def _check_placeable(cluster: RayCluster, count: int, cpus: float, gpus: float) -> None:
    """Refuse ``count`` workers the cluster, as it stands, cannot place all at once."""
    shared = f" ({trials_per_gpu(gpus)} share a GPU)" if 0 < gpus < 1 else ""
    for name, each, total, fit in (
        ("CPUs", f"{cpus:g}", cluster.cpus, cluster.places(cpus, 0)),
        ("GPUs", f"{gpus:g}{shared}", cluster.gpus, cluster.places(0, gpus) if gpus else count),
    ):
        if count > fit:
            raise UserError(
                f"--workers {count}: {cluster.named} has {total:g} {name}, and each worker needs {each}"
                f"{' on one node' if cluster.nodes > 1 else ''}; "
                + (f"pass --workers {fit} or fewer (or add nodes)" if fit else f"add nodes with {name}")
            )
    if count > (fit := cluster.places(cpus, gpus)):  # enough of each, not on the same nodes
        raise UserError(
            f"--workers {count}: {cluster.named} places {fit} at once (each worker needs {cpus:g} CPUs and {gpus:g} GPUs "
            f"on one node); pass --workers {fit} or fewer (or add nodes)"
        )


def cluster_nodes(ray: ModuleType) -> tuple[Node, ...]:
    """The live nodes of the cluster ``ray`` is connected to, with the CPUs and GPUs each offers Ray."""
    return tuple(
        Node(cpus=float(node.get("Resources", {}).get("CPU", 0)), gpus=float(node.get("Resources", {}).get("GPU", 0)))
        for node in ray.nodes() if node.get("Alive")
    )

