"""Hand-written CPU kernels, compiled from their C++ sources at first use (``build.load_kernel``).

Each kernel has an exact eager torch path beside it; ``SEQREC_KERNELS=0`` selects the eager paths, and a
missing compiler or ninja, or a failed build, falls back to them with one warning line.
"""
