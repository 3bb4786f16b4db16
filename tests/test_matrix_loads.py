"""The loads of a routing plan (:mod:`pipeline.matrix.loads`) against their definition, counted naively
with exact fractions: every row slot of the step labelled by destination, sorted by its fractional
position (i + 1/2) / count (ties by destination), dealt to the sources in contiguous shares of T x K."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from pipeline.matrix.loads import Loads


def naive_sent(received: list[int], share: int) -> list[list[int]]:
    slots = sorted(
        (Fraction(2 * i + 1, 2 * count), dest) for dest, count in enumerate(received) for i in range(count)
    )
    world = len(received)
    return [
        [sum(d == dest for _, d in slots[r * share : (r + 1) * share]) for dest in range(world)]
        for r in range(world)
    ]


def cases() -> list[tuple[int, int, int, int, float]]:
    """Seeded (tokens, experts, top_k, world, load factor): balanced, imbalanced, every row on rank 0
    (the others receive none), one rank, ragged splits."""
    rng = random.Random(20261207)
    found = [(6, 8, 2, 4, 4.0), (5, 3, 1, 1, 1.0), (7, 12, 3, 4, 1.0), (9, 8, 2, 2, 0.1)]
    while len(found) < 60:
        world = rng.choice([1, 2, 3, 4, 5, 8])
        experts = world * rng.randint(1, 6)
        top_k = rng.randint(1, min(4, experts))
        factor = 1.0 if world == 1 else round(rng.uniform(0.05, world), 3)
        found.append((rng.randint(1, 40), experts, top_k, world, factor))
    return found


@pytest.mark.parametrize(("tokens", "experts", "top_k", "world", "factor"), cases())
def test_sent_rows_are_the_definitions_or_refused_where_no_routing_realizes_them(
    tokens: int, experts: int, top_k: int, world: int, factor: float
) -> None:
    balanced = tokens * top_k
    hot = round(factor * balanced)
    rest = world * balanced - hot
    received = (
        [hot] + [rest // (world - 1) + (i < rest % (world - 1)) for i in range(world - 1)]
        if world > 1
        else [hot]
    )
    want = naive_sent(received, balanced)
    cap = tokens * min(top_k, experts // world)
    worst = max(max(row) for row in want)
    if worst > cap:
        with pytest.raises(ValueError, match=f"a rank would send {worst} rows to one destination"):
            Loads(tokens, experts, top_k, world, factor)
        return
    loads = Loads(tokens, experts, top_k, world, factor)
    assert loads.received_rows == received
    assert loads.sent.dtype.name == "int64" and loads.sent.tolist() == want


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ((0, 8, 2, 2, 1.0), "num_tokens must be positive, got 0"),
        ((4, 8, 9, 2, 1.0), "top_k=9 exceeds num_experts=8"),
        ((4, 6, 2, 4, 1.0), "num_experts=6 is not divisible by world_size=4"),
        ((4, 8, 2, 2, 2.5), "allowed: 0 < f <= 2"),
        ((4, 8, 2, 1, 0.5), "needs more than one rank; allowed with 1 rank: 1.0"),
        ((64, 24, 6, 4, 5.0), "load_factor=5.0"),
        ((64, 24, 6, 1, 2.0), "allowed: 0 < f <= 1"),
        ((64, 24, 6, 5, 1.0), "not divisible"),
        ((64, 4, 6, 1, 1.0), "top_k=6 exceeds"),
        ((64, 8, 6, 8, 4.0), "not feasible"),
    ],
)
def test_loads_no_routing_realizes_are_refused_in_one_line(arguments: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message) as refused:
        Loads(*arguments)
    assert "\n" not in str(refused.value)
