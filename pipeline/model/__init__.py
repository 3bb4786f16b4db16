"""Reduced-order MoE model: the published analytical layer model and the project's layer in its terms.

Public face: ``LayerShape`` (one validated layer shape), ``iteration_bytes`` (logical HBM bytes
behind the "HBM model" rate), ``predicted_ms`` (roofline + all-to-all prediction), ``HARDWARE``
presets and ``hardware_for_device``.
"""

from pipeline.model.hardware import HARDWARE, Hardware, hardware_for_device
from pipeline.model.layer_cost import LayerShape, iteration_bytes
from pipeline.model.prediction import Prediction, predict, predicted_ms

__all__ = [
    "HARDWARE",
    "Hardware",
    "LayerShape",
    "Prediction",
    "hardware_for_device",
    "iteration_bytes",
    "predict",
    "predicted_ms",
]
