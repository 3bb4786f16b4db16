"""Datasets written by every earlier metadata version stay readable: ``tests/fixtures/datasets/schema-N``
holds two executions of a real sweep written by the code of version N (1 and 2: commits 4870968 and
9cad9a9, the last that wrote each, at ``scale=ci``; 3: commit 0936276, 4: the commit before version
5, 5: commit 1a6e3f1, the last before version 6, and 6: commit 99c2a40, the last before version 7, at
``scale=cpu``), shards and ledger as that code left them (version 1's ledger is its ``ledger.jsonl``).
Each is read by ``status``, ``aggregate`` and ``compare`` with what it recorded as it recorded it and
what it did not record unknown, never made up: empty cells, no deviation said. A comparison of one
with a dataset of today's version (the same windows, written with today's metadata) finds nothing
changed and says which conditions it could not check. Only what cannot be interpreted is refused, with
the version named."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from pipeline.bench.sanity import rows_across
from pipeline.bench.work import layer_config
from pipeline.commands.aggregate import main as aggregate_main
from pipeline.commands.status import main as status_main
from pipeline.data.codec import encode
from pipeline.data.dataset import Dataset
from pipeline.data.meta import (
    Contention,
    EmulationCopies,
    ExecutionMeta,
    Kernels,
    MetaError,
    unknown_conditions,
)
from pipeline.data.reader import read_shard
from pipeline.data.scan import scan_shards
from pipeline.data.schema import METADATA_KEY
from pipeline.data.topology import Binding, Topology
from pipeline.matrix import EXECUTION_BY_ID
from pipeline.report.document import PackingEvidence
from pipeline.report.publish import rounded
from pipeline.tools.compare import compare, load
from pipeline.tools.compare.cli import main as compare_main

FIXTURES = Path(__file__).parent / "fixtures" / "datasets"
VERSIONS = (1, 2, 3, 4, 5, 6)
BEFORE_3 = (1, 2)  # no collective, timing request, kernels, contention or emulation copies
# what every version before 7 did not record: the topology and the gate's rows across ranks
UNRECORDED_BEFORE_7 = ("sanityCrossedRows", "sanitySliceRows")
UNCOUNTED = {"crossed_rows": None, "slice_rows": None}  # the gate's rows, unknown before 7
EXECUTIONS = ("inference-ep8-f1536-bf16-dist-moe-bf16", "inference-ep8-f1536-bf16-mok-native")
DIST, MOK = EXECUTIONS
# The published columns of what versions 1 and 2 did not record, and the deviations that read them.
UNRECORDED_BEFORE_3 = ("collective", "gemm", "cpuWaitShare", "oversubscribed", "emulationCopiesGiB")
UNSAID_BEFORE_3 = {"collective", "grouped GEMM", "MXFP8 products", "host contention"}


def _path(version: int, execution_id: str) -> Path:
    return FIXTURES / f"schema-{version}" / "shards" / f"execution={execution_id}" / "attempt-1.parquet"


def _raw(version: int, execution_id: str) -> dict[str, Any]:
    """The metadata JSON as the version's code wrote it."""
    meta: dict[str, Any] = json.loads(pq.read_schema(_path(version, execution_id)).metadata[METADATA_KEY])
    return meta


def _copy(version: int, to: Path) -> Path:
    shutil.copytree(FIXTURES / f"schema-{version}", to)
    return to


def _as_today(meta: ExecutionMeta) -> ExecutionMeta:
    """``meta`` as today's code writes it for these CPU executions. What versions 1 and 2 did not record
    takes what today's writer records on this host (the process group gloo, torch's grouped GEMM, no
    emulation copies, a quiet host, the timing asked for as the one that ran); version 1's missing
    gate and policy take those that version 2's code recorded for the same execution and scale; what
    versions before 7 did not record, the topology of the ranks on the one host the shard names and
    the rows of the gate's slices (for the execution and seed it ran)."""
    if meta.schema_version in BEFORE_3:
        written_by_2 = read_shard(_path(2, meta.execution_id)).meta
        meta = dataclasses.replace(
            meta,
            provenance=dataclasses.replace(meta.provenance, collective="gloo"),
            timing=dataclasses.replace(meta.timing, requested=meta.timing.plan),
            kernels=Kernels("torch", None, None),
            contention=Contention(cores=2, ranks_per_host=2, cpu_wait_share=0.01, oversubscribed=False),
            memory=dataclasses.replace(meta.memory, emulation=EmulationCopies(0, 0)),
            sanity=meta.sanity or written_by_2.sanity,
            policy=meta.policy or written_by_2.policy,
        )
    (host,) = meta.provenance.hosts
    ranks = meta.shape.ranks
    crossed, checked = rows_across(
        layer_config(EXECUTION_BY_ID[meta.execution_id], meta.shape), ranks, meta.config["seed"]
    )
    assert meta.sanity is not None
    return dataclasses.replace(
        meta,
        schema_version=ExecutionMeta.VERSION,
        conditions=unknown_conditions("no GPU: the execution ran on cpu"),
        topology=Topology.of([Binding(r, host, r, "cpu") for r in range(ranks)], [{}] * ranks),
        sanity=dataclasses.replace(meta.sanity, crossed_rows=crossed, slice_rows=checked),
    )


def _today(dataset: Path, to: Path) -> Path:
    """The dataset's shards rewritten by today's code: the same rows, the metadata as today's version."""
    for path in sorted(Path(dataset, "shards").glob("*/*.parquet")):
        shard = read_shard(path)
        table = pq.read_table(path)
        out = Dataset(to).shard_path(shard.execution_id, shard.attempt)
        out.parent.mkdir(parents=True, exist_ok=True)
        encoded = json.dumps(_as_today(shard.meta).to_json(), sort_keys=True).encode()
        pq.write_table(table.replace_schema_metadata({METADATA_KEY: encoded}), out)
    return to


def _rewritten(path: Path, change: dict[str, Any]) -> None:
    """The shard at ``path`` with its metadata's top-level fields changed."""
    table = pq.read_table(path)
    meta = json.loads(table.schema.metadata[METADATA_KEY]) | change
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()}), path)


@pytest.mark.parametrize("version", VERSIONS)
def test_an_earlier_version_reads_with_what_it_lacks_unknown(version: int) -> None:
    scan = scan_shards(Dataset(FIXTURES / f"schema-{version}"))
    assert scan.skipped == [] and sorted(scan.newest) == list(EXECUTIONS)
    for shard in scan.newest.values():
        meta = shard.meta
        assert meta.schema_version == version
        unrecorded = f"not recorded (schema_version {version})"
        said = "no GPU: the execution ran on cpu" if version >= 5 else unrecorded  # 5 on sampled GPUs
        assert meta.conditions.gpus == () and meta.conditions.unknown == said
        if version == 6:  # 6 profiled every rank
            assert [a.rank for a in meta.account.ranks] == [0, 1] and meta.account.unknown is None
        else:
            assert meta.account.ranks == () and meta.account.unknown == unrecorded  # none profiled
        assert meta.account.traces is False
        assert meta.topology is None  # no version before 7 recorded where its ranks ran
        assert meta.sanity is None or (meta.sanity.crossed_rows, meta.sanity.slice_rows) == (None, None)
        raw = _raw(version, shard.execution_id)
        if version in BEFORE_3:
            assert "contention" not in raw and meta.contention == Contention(None, None, None, None)
        elif version == 3:  # runnable processes per core is not a wait share: unknown, not converted
            assert "runnable_per_core" in raw["contention"] and "cpu_wait_share" not in raw["contention"]
            assert meta.contention.cpu_wait_share is None and meta.contention.oversubscribed is None
            assert meta.contention.cores == raw["contention"]["cores"]
        else:
            assert meta.contention.cpu_wait_share == raw["contention"]["cpu_wait_share"]
            assert meta.contention.cores == raw["contention"]["cores"]
        assert meta.provenance.hosts == tuple(raw["provenance"]["hosts"])


@pytest.mark.parametrize("version", BEFORE_3)
def test_versions_1_and_2_read_what_they_recorded_and_nothing_else(version: int) -> None:
    for execution_id in EXECUTIONS:
        meta, raw = read_shard(_path(version, execution_id)).meta, _raw(version, execution_id)
        # not recorded: unknown
        assert meta.kernels is None and meta.provenance.collective is None
        assert meta.timing.requested is None and meta.memory.emulation is None
        # recorded: as recorded (the backend under its old name, the timing that ran inside the shape)
        provenance = raw["provenance"]
        assert (meta.provenance.backend, meta.provenance.cluster) == (
            provenance["launcher"],
            provenance["cluster"],
        )
        assert meta.provenance.git_sha == provenance["git_sha"] and meta.job_id == raw["job_id"]
        assert encode(meta.provenance.versions) == provenance["versions"]
        plan, shape = meta.timing.plan, raw["shape"]
        assert (plan.warmup, plan.windows, plan.iterations) == (
            shape["warmup"],
            shape["windows"],
            shape["iterations"],
        )
        assert plan.min_window_ms == shape.get("min_window_ms", 0.0)  # version 1 asked for no minimum
        assert encode(meta.shape) == {k: v for k, v in shape.items() if k in encode(meta.shape)}
        assert {k: v for k, v in encode(meta.timing).items() if k in raw["timing"]} == raw["timing"]
        assert {k: v for k, v in encode(meta.memory).items() if k != "emulation"} == raw["memory"]
        assert encode(meta.nvlink) == raw["nvlink"] and meta.config == raw["config"]
        if version == 1:
            assert "sanity" not in raw and "policy" not in raw
            assert meta.sanity is None and meta.policy is None
            (layer,), (entry,) = meta.saved_state, raw["saved_state"]
            assert layer.recomputes == (entry["recomputed_rows"] > 0)
            assert layer.capacity_flag == (entry["overflow"] if execution_id == DIST else None)
            assert layer.budget_rows == entry["budget_rows"]  # one layer: the pooled slot is its share
            assert layer.factor == entry["budget_rows"] / (shape["nominal_tokens"] * shape["top_k"])
        else:
            assert encode(meta.sanity) == raw["sanity"] | UNCOUNTED and encode(meta.policy) == raw["policy"]
            assert [encode(layer) for layer in meta.saved_state] == raw["saved_state"]


@pytest.mark.parametrize("version", VERSIONS)
def test_status_and_aggregate_read_an_earlier_version(version: int, tmp_path: Path, capsys) -> None:
    dataset = _copy(version, tmp_path / "d")
    assert status_main([str(dataset)]) == 0
    out = capsys.readouterr().out
    assert f"{len(EXECUTIONS)} done" in out and "skipped" not in out
    assert aggregate_main([str(dataset), "--no-figures"]) == 0
    published = json.loads((dataset / "mok-comparison.json").read_text())
    assert sorted(e["execution_id"] for e in published["executions"]) == list(EXECUTIONS)
    assert published["meta"]["shards_skipped"] == []
    assert (published["accounts"] == []) == (version < 6)  # no version before 6 profiled its iterations
    for row in published["executions"]:
        raw = _raw(version, row["execution_id"])
        assert (row["cpuWaitShare"] is None) == (version <= 3)
        assert (row["profiledMS"] is None) == (version < 6) and (row["phaseFpropMS"] is None) == (version < 6)
        # the one host the shard names is its one node; no GPU preset, so no NVLink domain
        assert row["communication"] == ("gloo all-to-all, 2 ranks on one node" if version > 2 else None)
        assert {c: row[c] for c in UNRECORDED_BEFORE_7} == dict.fromkeys(UNRECORDED_BEFORE_7)
        if version in BEFORE_3:
            assert {c: row[c] for c in UNRECORDED_BEFORE_3} == dict.fromkeys(UNRECORDED_BEFORE_3)
            sanity = raw.get("sanity", {})  # version 1 ran no gate: empty
            assert [row["sanityMaxError"], row["sanityTolerance"], row["sanityPassed"]] == rounded(
                [sanity.get("max_error"), sanity.get("tolerance"), sanity.get("passed")]
            )
            shape, timing = raw["shape"], raw["timing"]
            assert (row["windows"], row["iterationsPerWindow"]) == (shape["windows"], shape["iterations"])
            assert (row["tokens"], row["d_model"], row["d_ff_run"]) == (
                shape["nominal_tokens"],
                shape["d_model"],
                shape["d_ff"],
            )
            assert (row["clock"], row["cudaGraphs"], row["cudaGraphsReason"]) == (
                timing["clock"],
                timing["cuda_graphs"],
                timing["cuda_graphs_reason"],
            )
            assert row["git_sha"] == raw["provenance"]["git_sha"] and row["job_id"] == raw["job_id"]
    said = {d["what"] for d in published["meta"]["deviations"]}
    if version in BEFORE_3:  # what was not recorded is no deviation: nothing is said of it
        assert not said & UNSAID_BEFORE_3
        assert {"scale", "dtype", "ranks", "CUDA graphs"} <= said  # what was recorded still is
    else:  # these CPU runs recorded gloo and torch's GEMMs
        assert {"collective", "grouped GEMM"} <= said


@pytest.mark.parametrize("version", VERSIONS)
def test_an_earlier_version_compares_with_today_s(version: int, tmp_path: Path, capsys) -> None:
    old = FIXTURES / f"schema-{version}"
    today = _today(old, tmp_path / "today")
    assert {s.meta.schema_version for s in scan_shards(Dataset(today)).newest.values()} == {
        ExecutionMeta.VERSION
    }
    base = load(old)
    document = compare(base, load(today), 0.05)
    assert all(t["ratio"] == 1.0 and t["change"] == "unchanged" for t in document["times"])
    assert {t["execution_id"] for t in document["times"]} == set(EXECUTIONS)
    assert document["settings_differ"] == []
    conditions = document["conditions"]
    assert conditions["differ"] == 0
    # versions 1 to 3 recorded no wait share (nor does a rewrite of 3 invent one): unknown, never
    # counted as differing
    unknown = {"base": len(EXECUTIONS) if version <= 3 else 0, "new": len(EXECUTIONS) if version == 3 else 0}
    assert conditions["unknown"] == unknown
    said = "no GPU: the execution ran on cpu" if version >= 5 else f"not recorded (schema_version {version})"
    for e in conditions["executions"].values():
        assert e["base"]["gpu_unknown"] == said
    described = document["base"]["described"]
    n = len(EXECUTIONS)
    if version in BEFORE_3:
        assert described["collective"] == {"unknown": n} and described["gemm"] == {"unknown": n}
        assert document["new"]["described"]["collective"] == {"gloo": n}
    for execution_id, ran in base.ran.items():
        raw = _raw(version, execution_id)["provenance"]
        assert (ran.schema_version, ran.git_sha, ran.hosts) == (version, raw["git_sha"], tuple(raw["hosts"]))
    assert described["git_sha"] == {_raw(version, DIST)["provenance"]["git_sha"]: n}
    assert described["backend"] == {"local": n} and described["cuda_graphs"] == {"false": n}
    assert compare_main([str(old), str(today)]) == 0
    out = capsys.readouterr().out
    if version <= 3:
        assert f"not recorded for {n} in BASE" in out


@pytest.mark.parametrize("version, named", [(99, "99"), (0, "0"), ("4", "'4'"), (True, "True")])
def test_an_unknown_version_is_refused_naming_it(version: object, named: str, tmp_path: Path) -> None:
    dataset = _copy(4, tmp_path / "d")
    path = sorted((dataset / "shards").glob("*/*.parquet"))[0]
    _rewritten(path, {"schema_version": version})
    message = f"unknown schema_version {named}; this reader reads 1, 2, 3, 4, 5, 6, 7"
    (skipped,) = scan_shards(Dataset(dataset)).skipped
    assert message in skipped.reason
    with pytest.raises(MetaError, match=message.split(";")[0]):
        ExecutionMeta.from_json(json.loads(pq.read_schema(path).metadata[METADATA_KEY]))


@pytest.mark.parametrize(
    "version, field, message",
    [
        (4, "kernels", "kernels is null, but schema_version 4 records it"),
        (3, "contention.cores", "contention.cores is null, but schema_version 3 records it"),
        (4, "provenance.collective", "provenance.collective is null, but schema_version 4 records it"),
        (3, "memory.emulation", "memory.emulation is null, but schema_version 3 records it"),
        (4, "sanity", "sanity is null, but schema_version 4 records it"),
        (2, "policy", "policy is null, but schema_version 2 records it"),
    ],
)
def test_a_version_s_field_is_unknown_only_where_it_did_not_record_it(
    version: int, field: str, message: str
) -> None:
    meta = _raw(version, DIST)
    *parents, name = field.split(".")
    record = meta
    for parent in parents:
        record = record[parent]
    record[name] = None
    with pytest.raises(MetaError, match=message):
        ExecutionMeta.from_json(meta)


def test_today_s_version_without_an_account_or_a_topology_is_refused(tmp_path: Path) -> None:
    today = read_shard(Dataset(_today(FIXTURES / "schema-6", tmp_path / "d")).shard_path(DIST, 1)).meta
    meta = today.to_json()
    assert ExecutionMeta.from_json(meta) == today and today.topology is not None
    for field in ("account", "topology"):
        lacking = {k: v for k, v in meta.items() if k != field}
        with pytest.raises(MetaError, match=f"metadata {field} is missing"):
            ExecutionMeta.from_json(lacking)
    with pytest.raises(MetaError, match="topology is null, but schema_version 7 records it"):
        ExecutionMeta.from_json(meta | {"topology": None})
    for field in ("crossed_rows", "slice_rows"):
        sanity = {k: v for k, v in meta["sanity"].items() if k != field}
        with pytest.raises(MetaError, match=f"sanity.{field} is null, but schema_version 7 records it"):
            ExecutionMeta.from_json(meta | {"sanity": sanity})
    one_rank = meta["topology"] | {
        "hosts": ["vm"],
        "ranks_per_node": [1],
        "bindings": meta["topology"]["bindings"][:1],
    }
    with pytest.raises(MetaError, match="topology has 1 ranks' bindings, shape.ranks 2"):
        ExecutionMeta.from_json(meta | {"topology": one_rank})


def test_a_bad_field_of_an_earlier_version_names_it_and_the_version() -> None:
    meta = _raw(3, DIST)
    meta["contention"]["cores"] = 0
    with pytest.raises(MetaError, match=r"cores must be >= 1, got 0 \(read from schema_version 3\)"):
        ExecutionMeta.from_json(meta)
    meta = _raw(1, MOK)
    meta["saved_state"][0]["overflow"] = "no"
    with pytest.raises(
        MetaError, match=r"saved_state\[0\].overflow must be a boolean.*\(read from schema_version 1\)"
    ):
        ExecutionMeta.from_json(meta)
    meta = _raw(2, MOK)
    del meta["shape"]["windows"]
    with pytest.raises(MetaError, match=r"shape.windows is missing \(read from schema_version 2\)"):
        ExecutionMeta.from_json(meta)


def _two_layers(execution_id: str, budgets: list[int], retained: list[int]) -> dict[str, Any]:
    """Version 1 metadata of ``execution_id`` from the fixture's, with two timed layers of T x K = 96
    routed rows, as version 1 wrote them: MoK's factor its budget over T x K, Dist-MoE's the requested
    one beside its pooled slot."""
    meta = _raw(1, execution_id)
    meta["shape"] |= {"layer_loads": [1.0, 1.0], "layer_tokens": [16, 16], "tracked_rows": [96, 96]}
    (entry,) = meta["saved_state"]
    meta["saved_state"] = [
        entry
        | {"layer": i, "budget_rows": b, "retained_rows": r, "recomputed_rows": 96 - r, "overflow": r < 96}
        | {"factor": 2.5 if execution_id == DIST else b / 96}
        for i, (b, r) in enumerate(zip(budgets, retained, strict=True))
    ]
    return meta


def test_version_1_saved_state_reads_in_today_s_terms() -> None:
    # Dist-MoE recorded its slot of all layers and its one flag as overflow: per layer, its share and its flag
    dist = ExecutionMeta.from_json(_two_layers(DIST, [480, 480], [96, 90]))
    assert [(s.budget_rows, s.factor) for s in dist.saved_state] == [(240, 2.5), (240, 2.5)]
    assert [(s.recomputes, s.capacity_flag) for s in dist.saved_state] == [(False, False), (True, True)]
    # MoK's budget was per layer and its overflow meant recomputed rows: it has no capacity flag
    mok = ExecutionMeta.from_json(_two_layers(MOK, [256, 64], [96, 64]))
    assert [(s.budget_rows, s.factor) for s in mok.saved_state] == [(256, 256 / 96), (64, 64 / 96)]
    assert [(s.recomputes, s.capacity_flag) for s in mok.saved_state] == [(False, None), (True, None)]
    # a slot that is no whole number of equal shares cannot be interpreted
    with pytest.raises(
        MetaError, match=r"budget_rows must be the pooled slot of 2 layers' equal shares, got 481"
    ):
        ExecutionMeta.from_json(_two_layers(DIST, [481, 481], [96, 96]))


@pytest.mark.parametrize(
    "version, change, read",
    [
        # written before the launcher fix: the backend in cluster, the preset in launcher
        (1, {"launcher": "h200", "cluster": "slurm"}, {"backend": "slurm", "cluster": "h200"}),
        (1, {"launcher": "slurm", "cluster": "h200"}, {"backend": "slurm", "cluster": "h200"}),
        (2, {"launcher": "h200", "cluster": "slurm"}, {"backend": "h200", "cluster": "slurm"}),
    ],
)
def test_the_backend_and_cluster_read_the_right_way_round(
    version: int, change: dict[str, str], read: dict[str, str]
) -> None:
    meta = _raw(version, DIST)
    meta["provenance"] |= change
    provenance = ExecutionMeta.from_json(meta).provenance
    assert {"backend": provenance.backend, "cluster": provenance.cluster} == read


def test_what_some_shards_of_a_version_recorded_reads_where_recorded() -> None:
    gate = _raw(2, MOK)["sanity"]
    with_gate = _raw(1, MOK) | {"sanity": gate}  # version 1 written after the gate
    assert encode(ExecutionMeta.from_json(with_gate).sanity) == gate | UNCOUNTED
    before_gate = _raw(2, MOK)
    del before_gate["sanity"]
    assert ExecutionMeta.from_json(before_gate).sanity is None
    before_buffers = _raw(2, DIST)
    del before_buffers["policy"]["buffers"]
    policy = ExecutionMeta.from_json(before_buffers).policy
    assert policy is not None and policy.buffers is None and policy.pooled is True


def test_a_packing_figure_without_a_recorded_policy_draws_no_budget() -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.patches import Rectangle

    from pipeline.report.figures import saved_state_figure

    layers = ExecutionMeta.from_json(_two_layers(DIST, [480, 480], [96, 90])).saved_state
    states = []
    for execution_id in (
        "packing-ep32-f3072-profile-a-bf16-mok-native",
        "packing-ep32-f3072-profile-a-bf16-dist-moe-bf16",
    ):
        e = EXECUTION_BY_ID[execution_id]
        dist = e.variant.implementation == "dist-moe"
        states.append(
            PackingEvidence(
                execution_id=execution_id,
                workload_id=e.workload_id,
                implementation=e.variant.implementation,
                pipeline=e.variant.pipeline,
                precision=e.variant.precision,
                ep=e.workload.ep,
                profile=e.workload.profile,
                balanced_rows=96,
                layers_recomputing=1,
                capacity_flags=1 if dist else None,
                policy=None,
                layers=layers,
            )
        )
    fig = saved_state_figure(states, [{"dist_execution_id": states[1].execution_id, "selected": True}])
    FigureCanvasAgg(fig).draw()
    (ax,) = fig.axes
    # each state's retained rows in both layers and its recomputed ones in the second
    assert len([b for b in ax.patches if isinstance(b, Rectangle) and b.get_height() > 0]) == 2 * 3
    assert len(ax.texts) == 0 and len(ax.collections) == 0  # no budget note, no per-layer budget tick
    assert not [t for t in fig.legends[0].get_texts() if "budget" in t.get_text()]
