"""Optional fast implementations of α-entmax, picked automatically when they apply.

The pure-PyTorch functions in `hf_entmax/modeling/entmax.py` are the reference and the always-available
fallback (a model loaded from the Hub without hf_entmax uses them). With hf_entmax installed, those
functions, and the model's attention, hand CPU tensors to the native kernel (`cpu.py`; the C++ in ``csrc/``, built on
first use and cached by `build.py`); with ``HF_ENTMAX_TRITON=1``, the model's attention hands CUDA tensors to the
Triton kernel (`gpu.py`, `triton_attention.py`). `dispatch.py` decides, in one place, which implementation runs;
`describe()` says which does on this machine and why.
"""

from .dispatch import describe


__all__ = ["describe"]
