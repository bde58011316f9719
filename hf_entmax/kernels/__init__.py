"""Optional fast implementations of α-entmax, picked automatically when they apply.

The pure-PyTorch functions in `hf_entmax/modeling/entmax.py` are the reference and the always-available
fallback (a model loaded from the Hub without hf_entmax uses them). With hf_entmax installed, those
functions, and the model's attention, call the entries of `dispatch.py`, which decides, in one place, which
implementation runs: the native kernel on CPU tensors (`cpu.py`; the C++ in ``csrc/``, built on first use and cached
by `build.py`), with ``HF_ENTMAX_TRITON=1`` the Triton kernel on CUDA tensors (`triton_attention.py`), or PyTorch.
`describe()` says which does on this machine and why.
"""

from .dispatch import describe


__all__ = ["describe"]
