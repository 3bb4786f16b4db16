"""The cost of the project's layer: its logical HBM bytes and its time at the presets' peak rates.

Public face: ``LayerShape`` (one validated layer shape), ``iteration_bytes`` (logical HBM bytes
behind the "HBM model" rate), ``predicted_ms`` (roofline + all-to-all prediction),
``speed_of_light`` (the least time the layer's work takes at the peaks), ``HARDWARE`` presets and
``hardware_for_device``.
"""

from pipeline.cost.hardware import HARDWARE, Hardware, hardware_for_device
from pipeline.cost.layer_cost import LayerShape, iteration_bytes
from pipeline.cost.prediction import Prediction, predict, predicted_ms
from pipeline.cost.roofline import Roofline, speed_of_light

__all__ = [
    "HARDWARE",
    "Hardware",
    "LayerShape",
    "Prediction",
    "Roofline",
    "hardware_for_device",
    "iteration_bytes",
    "predict",
    "predicted_ms",
    "speed_of_light",
]
