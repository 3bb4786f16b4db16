"""Device memory of a fake run, from the live storages themselves.

Every storage a device op creates is one record (its bytes rounded up to the CUDA caching allocator's
512-byte blocks, which is what ``torch.cuda.max_memory_allocated`` counts), alive until torch frees it
(a weak-reference finalizer on the storage). The peak is the largest sum of live records, and what
held it is the records alive at that moment, each under the category it had then:

- an *identity* the estimate names after building (weights, quantized weights, policy buffers,
  scratch, inputs) holds for the record's whole life;
- otherwise its *role*, which starts as ``temporaries`` and changes as the run proceeds: a forward's
  storage still alive when its layer's forward returns becomes ``saved activations`` (held for
  backward, whatever holds it: autograd, a ``ctx`` attribute, a policy view) or ``layer outputs``, and
  a storage that autograd accumulates into a ``.grad`` becomes ``gradients``.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch

BLOCK = 512  # the caching allocator's rounding of every allocation
CATEGORIES = (
    "weights",
    "quantized weights",
    "policy buffers",
    "scratch",
    "inputs",
    "saved activations",
    "layer outputs",
    "gradients",
    "temporaries",
)


@dataclass
class Record:
    """One device storage: bytes, when it was created and freed (event numbers), and its category
    changes as (event, category)."""

    nbytes: int
    created: int
    roles: list[tuple[int, str]]
    what: str = ""  # the op that made it and the tensor it made, e.g. "aten.mm bfloat16[92160, 6144]"
    freed: int | None = None
    identity: str | None = None

    def category(self, at: int) -> str:
        if self.identity is not None:
            return self.identity
        return [role for event, role in self.roles if event <= at][-1]


@dataclass
class Peak:
    """The largest live sum in one phase, and the event it happened at."""

    nbytes: int = 0
    event: int = 0


@dataclass
class Tracker:
    """Live device storages, their records and the peaks per phase."""

    records: list[Record] = field(default_factory=list)
    live: int = 0
    event: int = 0
    phase: str = "build"
    peaks: dict[str, Peak] = field(default_factory=dict)
    _by_storage: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary)

    def saw(self, t: torch.Tensor, op: str = "") -> None:
        """Record ``t``'s storage if it is new (the output of ``op``)."""
        storage = t.untyped_storage()
        if storage in self._by_storage:
            return
        self.event += 1
        nbytes = -(-storage.nbytes() // BLOCK) * BLOCK
        what = f"{op} {str(t.dtype).removeprefix('torch.')}{list(t.shape)}"
        record = Record(nbytes, self.event, [(self.event, "temporaries")], what)
        self._by_storage[storage] = record
        self.records.append(record)
        weakref.finalize(storage, self._free, record)
        self.live += nbytes
        peak = self.peaks.setdefault(self.phase, Peak())
        if self.live > peak.nbytes:
            peak.nbytes, peak.event = self.live, self.event

    def _free(self, record: Record) -> None:
        self.event += 1
        record.freed = self.event
        self.live -= record.nbytes

    def record_of(self, t: torch.Tensor) -> Record | None:
        return self._by_storage.get(t.untyped_storage())

    def name(self, tensors: Iterable[torch.Tensor | None], identity: str) -> None:
        """Give the storages of ``tensors`` an identity for their whole life (the first one given)."""
        for t in tensors:
            record = None if t is None else self.record_of(t)
            if record is not None and record.identity is None:
                record.identity = identity

    def become(self, t: torch.Tensor, role: str) -> None:
        """``t``'s storage takes ``role`` from now on."""
        record = self.record_of(t)
        if record is not None:
            self.event += 1
            record.roles.append((self.event, role))

    def since(self, start: int) -> list[Record]:
        """Records created after record number ``start`` that are still alive."""
        return [r for r in self.records[start:] if r.freed is None]

    def held(self, phases: tuple[str, ...] | None = None) -> tuple[int, dict[str, int]]:
        """The peak (of some phases, or of the whole run) and the bytes of each category at it."""
        peak, live = self._at_peak(phases)
        held = dict.fromkeys(CATEGORIES, 0)
        for r in live:
            held[r.category(peak.event)] += r.nbytes
        return peak.nbytes, held

    def largest(self, phases: tuple[str, ...] | None = None, count: int = 12) -> list[dict[str, object]]:
        """The ``count`` largest storages alive at the peak: category, bytes, what made them, when."""
        peak, live = self._at_peak(phases)
        top = sorted(live, key=lambda r: -r.nbytes)[:count]
        return [{"category": r.category(peak.event), "bytes": r.nbytes, "what": r.what} for r in top]

    def _at_peak(self, phases: tuple[str, ...] | None) -> tuple[Peak, list[Record]]:
        peaks = [p for name, p in self.peaks.items() if phases is None or name in phases]
        peak = max(peaks, key=lambda p: p.nbytes, default=Peak())
        at = peak.event
        live = [r for r in self.records if r.created <= at and (r.freed is None or r.freed > at)]
        return peak, live

    def peak_phase(self) -> str:
        return max(self.peaks, key=lambda p: self.peaks[p].nbytes)
