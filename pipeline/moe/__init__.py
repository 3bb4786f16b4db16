"""Expert-parallel MoE layers (MoK and Dist-MoE) on any torch.distributed group."""

from pipeline.moe.config import MoEConfig
from pipeline.moe.layer import MoELayer, build_layer
from pipeline.moe.packing import LayerStack, build_stack
from pipeline.moe.policy import SavedState
from pipeline.moe.routing import RoutingPlan, routing_plan, validate_routing
from pipeline.moe.weights import ExpertWeights

__all__ = [
    "ExpertWeights",
    "LayerStack",
    "MoEConfig",
    "MoELayer",
    "RoutingPlan",
    "SavedState",
    "build_layer",
    "build_stack",
    "routing_plan",
    "validate_routing",
]
