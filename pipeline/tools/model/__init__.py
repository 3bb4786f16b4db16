"""The reduced-order model of one MoE layer (the published document's inputs and outputs, seed 004):
capacity, drops, padding, sparsity and the EP all-to-all (:mod:`pipeline.tools.model.reduced_order`),
and its command line (``python -m pipeline.model``)."""
