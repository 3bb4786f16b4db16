"""Each rank's GPU under every way Slurm binds GPUs to tasks, from the environment each task is given:
all of a node's GPUs visible to every task, one per task (local rank 3 sees one device, 0), a site's
``CUDA_VISIBLE_DEVICES`` list, and a node whose tasks see fewer GPUs than it has ranks, which a timed
execution refuses in one line. The choice is a pure function of the environment and the devices the
task sees, so it is tested here; the CUDA calls that read a device's identity are one thin function.
Then the record every rank makes of its GPU and the job's topology, as the shard will carry them."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.bench.binding import (
    BindingError,
    canonical_uuid,
    choose,
    exclusive,
    numa_node,
    pci_bus_id,
    visible_entries,
)
from pipeline.bench.distributed import nccl_environment
from pipeline.data.topology import Binding, Topology

NODE_GPUS = 8  # an HGX node
# the GPUs of two nodes, by physical index on each: their UUIDs, bus ids and NUMA nodes
UUIDS = {
    (node, i): f"GPU-{node}{i:07d}-0000-0000-0000-000000000000" for node in ("n1", "n2") for i in range(8)
}


def slurm_task(node: str, localid: int, tasks_per_node: int, visible: str | None, **more: str) -> dict:
    """The environment Slurm gives one task (the variables a rank's binding reads, and their kin)."""
    env = {
        "SLURMD_NODENAME": node,
        "SLURM_LOCALID": str(localid),
        "SLURM_NTASKS_PER_NODE": str(tasks_per_node),
        "SLURM_JOB_GPUS": "0,1,2,3,4,5,6,7",
        **more,
    }
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    return env


def device_count(env: dict) -> int:
    """What ``torch.cuda.device_count()`` returns in that task on a node of NODE_GPUS GPUs."""
    listed = visible_entries(env.get("CUDA_VISIBLE_DEVICES"))
    return NODE_GPUS if listed is None else len(listed)


def binding(rank: int, env: dict) -> Binding:
    """The rank's binding as :func:`pipeline.bench.binding.bind` makes it, the GPU's identity looked up
    in the node's table by the physical index its task's view maps the chosen device to."""
    local = int(env["SLURM_LOCALID"])
    ordinal, entry = choose(local, device_count(env), env.get("CUDA_VISIBLE_DEVICES"))
    physical = int(entry) if entry is not None else ordinal
    node = env["SLURMD_NODENAME"]
    uuid = UUIDS[(node, physical)]
    return Binding(
        rank, node, local, f"cuda:{ordinal}", entry, "NVIDIA H200", uuid, pci_bus_id(0, 0x18 + physical, 0)
    )


def test_all_gpus_visible_to_every_task_each_rank_takes_its_local_rank():
    envs = [slurm_task("n1", r, 8, "0,1,2,3,4,5,6,7") for r in range(8)]
    picked = [choose(int(e["SLURM_LOCALID"]), device_count(e), e["CUDA_VISIBLE_DEVICES"]) for e in envs]
    assert picked == [(r, str(r)) for r in range(8)]
    # CUDA_VISIBLE_DEVICES unset (no gres plugin): every GPU visible, the same choice, no entry
    assert choose(3, NODE_GPUS, None) == (3, None)
    exclusive([binding(r, e) for r, e in enumerate(envs)])  # eight GPUs, eight ranks: accepted


def test_one_gpu_per_task_local_rank_3_sees_one_device_0():
    """--gpus-per-task=1 (or --gpu-bind=single:1, map_gpu): Slurm sets each task's own GPU."""
    env = slurm_task("n1", 3, 8, "3", SLURM_GPUS_PER_TASK="1", SLURM_STEP_GPUS="3")
    assert device_count(env) == 1
    assert choose(3, device_count(env), env["CUDA_VISIBLE_DEVICES"]) == (0, "3")
    mine = binding(3, env)
    assert (mine.device, mine.visible, mine.uuid) == ("cuda:0", "3", UUIDS[("n1", 3)])
    # the job's 16 ranks on two such nodes: each its own GPU
    ranks = [
        binding(n * 8 + r, slurm_task(node, r, 8, str(r)))
        for n, node in enumerate(("n1", "n2"))
        for r in range(8)
    ]
    assert all(b.device == "cuda:0" for b in ranks) and len({b.uuid for b in ranks}) == 16
    exclusive(ranks)


def test_a_site_list_of_visible_gpus_gives_local_rank_3_the_fourth_of_them():
    """A prolog that hands a 4-task job the upper half of a node (by index, or by UUID)."""
    envs = [slurm_task("n2", r, 4, "4,5,6,7") for r in range(4)]
    assert choose(3, device_count(envs[3]), "4,5,6,7") == (3, "7")
    ranks = [binding(r, e) for r, e in enumerate(envs)]
    assert [b.uuid for b in ranks] == [UUIDS[("n2", i)] for i in (4, 5, 6, 7)]
    exclusive(ranks)
    by_uuid = ",".join(UUIDS[("n2", i)] for i in (6, 7))
    assert choose(1, 2, by_uuid) == (1, UUIDS[("n2", 7)])
    assert choose(1, 2, " 6 , 7 ") == (1, "7")  # spaces around the entries, as some prologs write them


def test_two_ranks_of_a_node_on_one_gpu_are_refused_in_one_line():
    """Eight tasks on a node whose tasks see four GPUs (--gres=gpu:4 --ntasks-per-node=8): local ranks
    3 and 7 take the same device, which a timed execution refuses before any work."""
    envs = [slurm_task("n1", r, 8, "0,1,2,3") for r in range(8)]
    ranks = [binding(r, e) for r, e in enumerate(envs)]
    assert [b.device for b in ranks] == [f"cuda:{r % 4}" for r in range(8)]
    with pytest.raises(BindingError) as refused:
        exclusive(ranks)
    message = str(refused.value)
    assert "\n" not in message
    assert message == (
        f"ranks 0 (n1, local rank 0) and 4 (n1, local rank 4) would share GPU {UUIDS[('n1', 0)]} "
        "(0000:18:00.0): a timed execution needs a GPU of its own per rank; allowed: as many GPUs visible "
        "on a node as ranks on it, one per task (--gpus-per-task=1) or all of them to every task "
        "(--gres=gpu:N, N the tasks per node)"
    )
    # ranks on CPUs carry no UUID and share nothing
    exclusive([Binding(r, "n1", r, "cpu") for r in range(4)])


def test_a_task_that_sees_no_gpu_is_refused_in_one_line():
    with pytest.raises(BindingError) as refused:
        choose(3, 0, "")
    assert str(refused.value) == (
        "local rank 3 sees no GPU (CUDA_VISIBLE_DEVICES ''); allowed: a task that sees a GPU "
        "(--gpus-per-task=1, or --gres=gpu:N with N the tasks per node)"
    )


def test_a_gpus_identity_in_the_forms_nvidia_and_linux_print(tmp_path: Path):
    assert (
        canonical_uuid("8f0c2a1e-1111-2222-3333-444455556666") == "GPU-8f0c2a1e-1111-2222-3333-444455556666"
    )
    assert canonical_uuid("MIG-abc") == "MIG-abc" and canonical_uuid(" GPU-x ") == "GPU-x"
    assert pci_bus_id(0, 0x1B, 0) == "0000:1b:00.0"
    (tmp_path / "0000:1b:00.0").mkdir()
    (tmp_path / "0000:1b:00.0" / "numa_node").write_text("1\n")
    (tmp_path / "0000:9a:00.0").mkdir()
    (tmp_path / "0000:9a:00.0" / "numa_node").write_text("-1\n")  # a machine without NUMA
    assert numa_node("0000:1B:00.0", tmp_path) == 1
    assert numa_node("0000:9a:00.0", tmp_path) is None
    assert numa_node("0000:00:00.0", tmp_path) is None and numa_node(None, tmp_path) is None


def test_the_jobs_topology_as_the_shard_carries_it():
    """16 ranks on two nodes of 8, NCCL, rank 11 with an NCCL setting of its own: the record says the
    nodes and ranks per node, every rank's GPU, rank 0's NCCL environment and who differs; it reads
    back equal from its JSON."""
    envs = [slurm_task(node, r, 8, str(r)) for node in ("n1", "n2") for r in range(8)]
    nccl = {
        "NCCL_IB_HCA": "mlx5",
        "NCCL_DEBUG": "WARN",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "HOME": "/root",
    }
    environments = [
        nccl_environment({**nccl, **({"NCCL_ALGO": "Ring"} if r == 11 else {})}) for r in range(16)
    ]
    assert list(environments[0]) == ["NCCL_DEBUG", "NCCL_IB_HCA", "TORCH_NCCL_ASYNC_ERROR_HANDLING"]
    topology = Topology.of([binding(r, e) for r, e in enumerate(envs)], environments)
    assert (topology.hosts, topology.ranks_per_node, topology.nodes) == (("n1", "n2"), (8, 8), 2)
    assert topology.env_differs == (11,) and "HOME" not in topology.nccl_env
    assert Topology.from_json(topology.to_json()) == topology
    uneven = Topology.of([Binding(r, "n1" if r < 3 else "n2", r % 3, "cpu") for r in range(4)], [{}] * 4)
    assert (uneven.ranks_per_node, uneven.most_per_node, uneven.env_differs) == ((3, 1), 3, ())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"ranks_per_node": [3, 2]},
            r"ranks_per_node \[3, 2\] of hosts \['n1', 'n2'\] are not the bindings' \[3, 1\]",
        ),
        ({"hosts": ["n1"], "ranks_per_node": [4]}, r"are not the bindings' \[3\] of 4 ranks"),
        ({"hosts": ["n1", "n1"]}, "hosts must name each node once"),
        ({"env_differs": [4]}, r"env_differs must name ranks 1 to 3, got \[4\]"),
        ({"bindings": []}, "bindings must hold every rank's binding, got none"),
    ],
)
def test_a_topology_read_back_holds_its_nodes_ranks_and_bindings_together(change: dict, message: str):
    """A dataset is untrusted input: a topology whose nodes, ranks per node and bindings disagree does
    not construct, and the error says which."""
    good = Topology.of([Binding(r, "n1" if r < 3 else "n2", r % 3, "cpu") for r in range(4)], [{}] * 4)
    with pytest.raises(ValueError, match=message):
        Topology.from_json(good.to_json() | change)
    with pytest.raises(ValueError, match="numa_node must be >= 0"):
        Binding.from_json(Binding(0, "n1", 0, "cuda:0", numa_node=0).to_json() | {"numa_node": -1})
