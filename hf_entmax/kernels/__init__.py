"""Optional fast implementations of α-entmax, picked automatically when they apply.

The pure-PyTorch functions in `hf_entmax/modeling/entmax.py` are the reference and the always-available
fallback (a model loaded from the Hub without hf_entmax uses them). With hf_entmax installed, those
functions, and the model's attention, hand CPU tensors to the native kernel in `cpu.py`, built on first use
and cached.
"""
