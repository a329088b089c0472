"""Array kernels of gpubpe, installed as ``gpubpe.kernels``.

Kernels take arrays and return arrays: no policy, no I/O, no Python objects in
hot loops. Each operation is offered per target under one naming scheme:
``<op>_cpu`` (Numba ``@njit``), ``<op>_numpy`` where a plain NumPy version is
useful, and ``<op>_cuda`` (Numba ``@cuda.jit`` launches over CuPy arrays).
"""
