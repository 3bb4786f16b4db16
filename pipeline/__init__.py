"""Expert-parallel MoE benchmark pipeline: matrix, layers, execution, launch, data, model, report."""
