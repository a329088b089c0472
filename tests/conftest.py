"""Test configuration shared by every test module.

The Numba CUDA simulator is switched on before anything imports numba, so the
real ``@cuda.jit`` kernels run here (no GPU on the build machines); CPU
``@njit`` code is unaffected by it. PTX compilation for real architectures is
tested in a subprocess without the simulator.
"""

import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

from hypothesis import settings  # noqa: E402

settings.register_profile(
    "gpubpe",
    max_examples=int(os.environ.get("GPUBPE_HYPOTHESIS_EXAMPLES", "60")),
    deadline=None,
    database=None,  # no .hypothesis/ folder in the working directory
)
settings.load_profile("gpubpe")
