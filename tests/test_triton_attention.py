"""The Triton kernels of α-entmax attention (hf_entmax/kernels/triton_attention.py): their tests in Triton's
interpreter (tests/test_triton_attention_interpreted.py, in a process of their own), the route that opts into them,
and their compilation for GPUs, which needs no GPU."""

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hf_entmax.kernels import dispatch


triton = pytest.importorskip("triton")

MODULE = "hf_entmax.kernels.triton_attention"
INTERPRETED_TESTS = Path(__file__).with_name("test_triton_attention_interpreted.py")


def test_kernels_in_the_interpreter(request):
    """The kernels' tests in a fresh process that imports triton with TRITON_INTERPRET=1, which the interpreter needs
    (see that file), with this run's ``-m``; nothing else sees the variable."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(INTERPRETED_TESTS)]
    if marks := request.config.getoption("markexpr"):
        command += ["-m", marks]
    environment = {**os.environ, "TRITON_INTERPRET": "1"}
    result = subprocess.run(
        command, env=environment, cwd=INTERPRETED_TESTS.parent.parent, capture_output=True, text=True
    )
    # 5: every test deselected by -m.
    assert result.returncode in (0, 5), result.stdout[-6000:] + result.stderr[-3000:]
    assert "skipped" not in result.stdout.splitlines()[-1], result.stdout[-3000:]  # not run uninterpreted


def test_triton_route_names_each_reason(monkeypatch):
    monkeypatch.setattr(dispatch, "TRITON_DEVICE_TYPES", ("cpu",))  # as the interpreter would run them
    monkeypatch.setenv("HF_ENTMAX_TRITON", "1")
    query, key, value = (torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4))
    mask = torch.zeros(1, 1, 3, 5)
    route = dispatch.triton_attention_route(query, key, value, mask)
    assert route.triton and route.implementation == "Triton kernel" and "HF_ENTMAX_TRITON=1" in route.reason
    cases = {
        "not CUDA tensors": ((query, key.to("meta"), value, mask), {}),
        "float16/bfloat16/float32": ((query.double(), key.double(), value.double(), mask), {}),
        "one dtype": ((query, key.half(), value, mask), {}),
        "gradient": ((query, key, value, mask.clone().requires_grad_()), {}),
        "dropout": ((query, key, value, mask), {"dropout": 0.1}),
        "output_attentions": ((query, key, value, mask), {"weights_wanted": True}),
        "head dimension": ((torch.zeros(1, 1, 1, 512),) * 3, {}),
        "empty": ((query, key[:, :, :0], value[:, :, :0], None), {}),
    }
    for reason, (tensors, options) in cases.items():
        route = dispatch.triton_attention_route(*tensors, **options)
        assert not route.triton and reason in route.reason and route.implementation == "PyTorch operations", reason
    monkeypatch.setenv("HF_ENTMAX_TRITON", "0")
    route = dispatch.triton_attention_route(query, key, value, mask)
    assert not route.triton and "opt-in" in route.reason
    assert "attention on CUDA tensors: PyTorch operations (the Triton kernel is opt-in" in dispatch.describe()


def test_without_triton_the_route_says_why(monkeypatch):
    monkeypatch.setattr(dispatch, "TRITON_DEVICE_TYPES", ("cpu",))  # as the interpreter would run them
    monkeypatch.setenv("HF_ENTMAX_TRITON", "1")
    monkeypatch.setitem(sys.modules, "triton", None)  # import triton raises ImportError
    dispatch._triton_import_route.cache_clear()
    try:
        route = dispatch.triton_attention_route(*(torch.randn(1, 1, 2, 2),) * 3)
        assert not route.triton and "triton cannot be imported" in route.reason
    finally:
        dispatch._triton_import_route.cache_clear()


# Triton's types of the kernels' arguments: the pointers by role, every other non-constant argument an int32.
_POINTER_TYPES = {torch.float16: "*fp16", torch.bfloat16: "*bf16", torch.float32: "*fp32"}
_INPUT_POINTERS = {"Q", "K", "V", "Out", "GradOut", "GradQ", "GradK", "GradV"}


def _compile_for_gpu(kernel, input_dtype: torch.dtype, constants: dict, options: dict, capability: int):
    """Compile ``kernel`` (JIT-decorated) for an NVIDIA GPU of compute ``capability``, without one, as Triton would on
    its first launch: inputs of ``input_dtype``, float32 statistics, α and mask."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature = {}
    for name, parameter in zip(kernel.arg_names, kernel.params, strict=True):
        if parameter.is_constexpr:
            signature[name] = "constexpr"
        elif name[0].isupper():
            signature[name] = _POINTER_TYPES[input_dtype if name in _INPUT_POINTERS else torch.float32]
        else:
            signature[name] = "i32"
    source = ASTSource(fn=kernel, signature=signature, constexprs=constants)
    return triton.compile(source, target=GPUTarget("cuda", capability, 32), options=options)


@pytest.mark.slow
def test_kernels_compile_for_gpus():
    """The interpreter accepts more than the compiler: the forward (α's gradient included) and both backward kernels
    compile for sm_80 and sm_90 with the launch settings a (4, 8, L, 64) bfloat16 call gets (CUDA backend; no GPU)."""
    if "nvidia" not in triton.backends.backends:
        pytest.skip("this triton has no CUDA backend")
    kernels = importlib.import_module(MODULE)
    query = torch.empty(4, 8, 1024, 64, dtype=torch.bfloat16)
    problem = kernels._Problem(query, query, torch.zeros(4, 1, 1, 1024), causal=True)
    forward_constants = dict(
        problem.constants,
        NEED_GRAD=True,
        ALPHA_GRAD=True,
        TOLERANCE=kernels.NEWTON_TOLERANCE_EPS * torch.finfo(torch.float32).eps,
        MAX_PASSES=kernels.MAX_NEWTON_STEPS,
        SERIES_THRESHOLD=kernels.SERIES_THRESHOLD,
        SERIES_TERMS=kernels.SERIES_TERMS,
    )
    for capability in (80, 90):
        for kernel, constants in (
            (kernels._entmax_attention_forward, forward_constants),
            (kernels._entmax_attention_backward_key_value, problem.constants),
            (kernels._entmax_attention_backward_query, problem.constants),
        ):
            binary = _compile_for_gpu(kernel, torch.bfloat16, constants, problem.launch_options, capability)
            assert binary.asm["cubin"], (kernel, capability)
