"""The cost of the project's layer: its logical bytes, its work by phase, and its time at the presets'
peaks (speed of light) and at the device's measured kernel rates (the expectation).

Public face: ``LayerShape`` (one validated layer shape), ``iteration_bytes`` (logical HBM bytes behind
the "HBM model" rate), ``phase_work`` (each layer phase's FLOPs and bytes), ``speed_of_light_ms``
(roofline + all-to-all at the datasheet peaks; ``inter_node_share``: the rows that leave an NVLink
domain), ``expected_phases`` (the phases at measured rates,
``KernelRates``), ``roofline`` (the compulsory bytes and FLOPs alone: a case's %SOL), the products'
peaks (:mod:`pipeline.cost.products`), ``HARDWARE`` presets and ``hardware_for_device``.
"""

from pipeline.cost.expectation import GemmRate, KernelRates, expected_phases
from pipeline.cost.hardware import HARDWARE, Hardware, hardware_for_device
from pipeline.cost.layer_cost import LayerShape, PhaseWork, iteration_bytes, phase_work
from pipeline.cost.roofline import Roofline, roofline
from pipeline.cost.speed_of_light import SpeedOfLight, inter_node_share, speed_of_light, speed_of_light_ms

__all__ = [
    "HARDWARE",
    "GemmRate",
    "Hardware",
    "KernelRates",
    "LayerShape",
    "PhaseWork",
    "Roofline",
    "SpeedOfLight",
    "expected_phases",
    "hardware_for_device",
    "inter_node_share",
    "iteration_bytes",
    "phase_work",
    "roofline",
    "speed_of_light",
    "speed_of_light_ms",
]
