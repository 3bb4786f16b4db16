"""The correctness gate checks rows that cross ranks, on four real gloo ranks: every rank's slice sends
rows to other ranks' experts (and one expert receives rows from two ranks), and the gate compares the
whole layer with its float64 reference; here, independently, every token whose rows crossed ranks is
compared with the tests' token-repeat reference of the whole layer (tests/moe_reference.py, all
experts' weights). A wrong split or a regrouping off by one row, planted on one rank as
``pipeline.bench.plants`` plants faults, fails every rank's gate. One spawn of four ranks runs it all,
for MoK BF16 and Dist-MoE's FP8 dispatch (MXFP8 rows on the wire), forward and backward."""

from __future__ import annotations

import os

import pytest
import torch

from pipeline.bench import sanity
from pipeline.bench.plants import PLANT_ENV, off_by_one, planted, wrong_split
from pipeline.data.meta import Sanity
from pipeline.moe import ExpertWeights, MoEConfig, build_stack
from pipeline.moe.dispatch import DispatchPlan
from pipeline.tools.ranks import run_ranks
from tests.moe_reference import reference_moe

WORLD, SEED, WEIGHTS = 4, 3, 5
CASES = {
    "mok-bf16": MoEConfig(d_model=64, d_ff=32, num_experts=32, top_k=4, dtype=torch.float32),
    "dist-moe-fp8-dispatch": MoEConfig(
        d_model=64, d_ff=32, num_experts=32, top_k=4, implementation="dist-moe", pipeline="fp8-dispatch",
        precision="mxfp8", dtype=torch.float32,
    ),
}  # fmt: skip
PLANTS = {"split": 2, "perm": 1}  # the kind and the rank it is planted on


def _gate(rank: int, world: int) -> dict:
    """Per case: the gate's errors unplanted, this rank's layer output on its slice, the verdict, and
    each planted fault's errors and verdict."""
    out: dict = {}
    for name, cfg in CASES.items():
        stack = build_stack(cfg, [ExpertWeights.local(cfg, rank, world, seed=WEIGHTS)])
        layer = stack.layers[0]
        errors = sanity.check_layer(layer, backward=True, seed=SEED, weights=WEIGHTS)
        piece = sanity.slice_of(cfg, rank, world, SEED, torch.device("cpu"))
        with torch.no_grad():
            y = layer(piece.x, piece.idx, piece.weight)
        found = {"errors": errors, "y": y, "verdict": _verdict(stack, SEED)}
        for kind, on in PLANTS.items():
            os.environ[PLANT_ENV] = f"{kind}:{name}:{on}"
            with planted(name, rank):
                found[kind] = {
                    "errors": sanity.check_layer(layer, backward=True, seed=SEED, weights=WEIGHTS),
                    "verdict": _verdict(stack, SEED + 1),
                }
            del os.environ[PLANT_ENV]
        out[name] = found
    return out


def _verdict(stack, seed: int) -> Sanity | str:
    try:
        return sanity.gate(stack, backward=True, seed=seed, weights=WEIGHTS)
    except sanity.SanityError as err:
        return str(err)


@pytest.fixture(scope="module")
def ranks() -> list[dict]:
    return run_ranks(WORLD, _gate)


def tolerance(cfg: MoEConfig) -> float:
    return sanity.tolerance(cfg.dtype, cfg.precision, sanity.SLICE_TOKENS * cfg.top_k * cfg.d_ff)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_rows_that_cross_ranks_match_the_float64_reference_of_the_whole_layer(ranks, case):
    cfg = CASES[case]
    local = cfg.local_experts(WORLD)
    crossed = [sanity.crossing_rows(cfg, r, WORLD, SEED) for r in range(WORLD)]
    assert all(0 < c < sanity.SLICE_TOKENS * cfg.top_k for c in crossed), crossed  # some cross, some stay
    senders = {r: set() for r in range(WORLD)}
    owners = []
    full = ExpertWeights.random(cfg, seed=WEIGHTS)
    weights = [t.double() for t in (full.w1, full.w2, full.shared_w1, full.shared_w2)]
    mode = cfg.mx_scale_mode if cfg.precision == "mxfp8" else None
    for rank, got in enumerate(ranks):
        piece = sanity.slice_of(cfg, rank, WORLD, SEED, torch.device("cpu"))
        owner = piece.idx // local
        owners.append(owner)
        for r in owner.unique().tolist():
            senders[r].add(rank)
        ref = reference_moe(
            piece.x.double(), piece.idx, piece.weight, *weights, mx_mode=mode, dtype=cfg.dtype
        )
        y = got[case]["y"].double()
        across = (owner != rank).any(dim=1)  # tokens with a row on another rank
        assert across.sum() >= sanity.SLICE_TOKENS // 2
        row_error = (y - ref).norm(dim=1) / ref.norm(dim=1)
        assert float(row_error[across].max()) <= tolerance(cfg), (rank, row_error[across].max())
        assert got[case]["errors"]["y"] <= tolerance(cfg)
        assert max(got[case]["errors"].values()) <= tolerance(cfg), got[case]["errors"]
        verdict = got[case]["verdict"]
        assert isinstance(verdict, Sanity) and verdict.passed, verdict
    assert all(len(s) >= 2 for s in senders.values()), senders  # every rank's experts get others' rows
    # the verdict, as the shard records it, counts every rank's slice rows and those that crossed ranks
    crossed_here = sum(int((owner != rank).sum()) for rank, owner in enumerate(owners))
    assert {(got[case]["verdict"].crossed_rows, got[case]["verdict"].slice_rows) for got in ranks} == {
        (crossed_here, WORLD * sanity.SLICE_TOKENS * cfg.top_k)
    }
    assert crossed_here == sum(crossed)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kind", PLANTS)
def test_a_wrong_split_or_regrouping_on_one_rank_fails_every_ranks_gate(ranks, case, kind):
    cfg = CASES[case]
    errors = [got[case][kind]["errors"] for got in ranks]
    worst = max(max(e.values()) for e in errors)
    assert worst > 10 * tolerance(cfg), errors
    # the rank it was planted on sees its experts' rows wrong; so do the ranks whose rows it returned
    assert sum(max(e.values()) > tolerance(cfg) for e in errors) >= 2, errors
    verdicts = {got[case][kind]["verdict"] for got in ranks}
    (verdict,) = verdicts  # every rank raised the same
    assert verdict.startswith("sanity: ") and "> tolerance" in verdict, verdict


def test_the_planted_faults_keep_the_all_to_all_whole():
    """A wrong split keeps each source's total (the collective stays matched) and moves one row to
    the next expert; the regrouping off by one row is still a permutation."""
    recv = torch.tensor([[0, 2, 0], [3, 0, 1]])
    moved = wrong_split(recv)
    assert moved.tolist() == [[0, 1, 1], [3, 0, 1]] and torch.equal(moved.sum(1), recv.sum(1))
    idx = torch.tensor([[0, 3], [2, 1], [3, 0]])
    plan = DispatchPlan.from_counts(idx, torch.tensor([[1, 1], [1, 3]]).T, torch.tensor([[2, 0], [1, 3]]))
    rolled = off_by_one(plan)
    assert plan.perm is not None and rolled.perm is not None and rolled.perm_inverse is not None
    assert torch.equal(rolled.perm, plan.perm.roll(1)) and not torch.equal(rolled.perm, plan.perm)
    assert torch.equal(rolled.perm[rolled.perm_inverse], torch.arange(len(plan.perm)))
