"""The ground floor of the pipeline: what every stage shares and nothing of the pipeline is below.

The vocabulary (kinds, phases, precisions), the registered implementations, the exit statuses and
refusals of every command, input bounds and checks, folder and path checks, printable text, the GPU
presets of ``conf/cluster``, the saved-state record and the report's reductions (``metrics``). Each
module imports only others of this package and ``cutlass_kernels``.
"""
