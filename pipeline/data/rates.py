"""The kernel-rate table a dataset carries (``Dataset.rates_path``): the rates the device run measured
on the dataset's GPU (:class:`pipeline.cost.KernelRates`), from which aggregation publishes the
expectation beside each measured iteration. A dataset is untrusted input: the table is read as JSON
and checked field by field (:mod:`pipeline.data.codec`), and a table that does not construct is
refused with the field named, never half-used."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.cost import KernelRates
from pipeline.data.atomic import atomic_write
from pipeline.data.codec import RecordError, decode, encode
from pipeline.data.dataset import Dataset

MAX_BYTES = 4 * 2**20  # a table of every op, shape and variant is a few tens of kilobytes


class RatesError(ValueError):
    """A kernel-rate table that cannot be read; the message names the file and why."""


def load(path: Path) -> KernelRates:
    """The table in ``path`` (a regular file of at most MAX_BYTES of JSON), checked."""
    try:
        if not path.is_file():
            raise RatesError(f"kernel rates {str(path)!r}: not a regular file")
        if path.stat().st_size > MAX_BYTES:
            raise RatesError(f"kernel rates {str(path)!r}: larger than {MAX_BYTES} bytes")
        data = json.loads(path.read_text())
    except OSError as err:
        raise RatesError(f"kernel rates {str(path)!r}: {err.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise RatesError(f"kernel rates {str(path)!r} is not JSON: {err}") from None
    try:
        return decode(KernelRates, data)
    except RecordError as err:
        raise RatesError(f"kernel rates {str(path)!r}: {err}") from None


def kept(dataset: Dataset) -> KernelRates | None:
    """The dataset's table, None where it has none (a RatesError where it has one that is bad)."""
    path = dataset.rates_path
    if not path.exists() and not path.is_symlink():
        return None
    if not dataset.inside(path):
        raise RatesError(f"kernel rates {dataset.relative(path)!r} link out of the dataset")
    return load(path)


def keep(dataset: Dataset, rates: KernelRates) -> Path:
    """Write ``rates`` as the dataset's table (whole or not at all)."""
    return atomic_write(dataset.rates_path, json.dumps(encode(rates), indent=1, sort_keys=True) + "\n")
