"""The torch functions ``@lossjit.jit`` recognizes in a trace, by role."""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor


def _tensor_attrs(*names: str) -> set:
    out = set()
    for n in names:
        f = getattr(torch.Tensor, n, None)
        if f is not None:
            out.add(f)
    return out


def _torch_attrs(*names: str) -> set:
    out = set()
    for n in names:
        f = getattr(torch, n, None)
        if f is not None:
            out.add(f)
    return out


_CE = {F.cross_entropy}
_NLL = {F.nll_loss}
_LOG_SOFTMAX = {F.log_softmax} | _torch_attrs("log_softmax") | _tensor_attrs("log_softmax")
_LOGSUMEXP = _torch_attrs("logsumexp") | _tensor_attrs("logsumexp")
_LINEAR = {F.linear}
_MATMUL = _torch_attrs("matmul", "mm") | _tensor_attrs("matmul", "mm", "__matmul__")
_CAST_METHODS = {torch.Tensor.float: torch.float32, torch.Tensor.half: torch.float16,
                 torch.Tensor.bfloat16: torch.bfloat16, torch.Tensor.double: torch.float64}
_TO = _tensor_attrs("to", "type")
_MUL = _torch_attrs("mul", "multiply") | _tensor_attrs("mul", "multiply", "__mul__",
                                                         "__rmul__")
_DIV = _torch_attrs("div", "divide", "true_divide") | _tensor_attrs(
    "div", "divide", "true_divide", "__truediv__", "__div__")
_NEG = _torch_attrs("neg", "negative") | _tensor_attrs("neg", "negative", "__neg__")
_ADD = _torch_attrs("add") | _tensor_attrs("add", "__add__", "__radd__")
_VIEW = _torch_attrs("reshape", "flatten") | _tensor_attrs("view", "reshape", "flatten")
_TRANSPOSE_METHODS = _torch_attrs("t", "transpose", "swapaxes", "swapdims") | _tensor_attrs(
    "t", "transpose", "swapaxes", "swapdims", "permute")
_TANH = _torch_attrs("tanh") | _tensor_attrs("tanh") | (
    {F.tanh} if getattr(F, "tanh", None) is not None else set())
_DIALECT_DTYPES = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32",
                   torch.float64: "f64"}


def _is_property(func: Any, name: str) -> bool:
    return getattr(func, "__self__", None) is getattr(torch._C.TensorBase, name, None) \
        and getattr(func, "__name__", "") == "__get__"


def _func_name(func: Any) -> str:
    if getattr(func, "__name__", "") == "__get__":
        owner = getattr(func, "__self__", None)
        return f"Tensor.{getattr(owner, '__name__', '?')}"
    module = getattr(func, "__module__", None) or ""
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
    if name.startswith("TensorBase."):
        return "Tensor." + name[len("TensorBase."):]
    if name.startswith("_VariableFunctionsClass."):
        name = name[len("_VariableFunctionsClass."):]
        return ("F." if getattr(F, name, None) is func else "torch.") + name
    if module.startswith("torch.nn.functional"):
        return "F." + name
    if module in ("torch", "torch._C._VariableFunctions") or type(func).__name__ == \
            "builtin_function_or_method":
        if name in dir(F) and getattr(F, name, None) is func:
            return "F." + name
        return "torch." + name
    return f"{module}.{name}" if module else name


_SOFTMAX = {F.softmax} | _torch_attrs("softmax") | _tensor_attrs("softmax")
_EXP = _torch_attrs("exp") | _tensor_attrs("exp")
_SUB = _torch_attrs("sub", "subtract") | _tensor_attrs("sub", "subtract", "__sub__")
_RSUB = _tensor_attrs("__rsub__") | _torch_attrs("rsub")
_SUM = _torch_attrs("sum") | _tensor_attrs("sum")
_MEAN = _torch_attrs("mean") | _tensor_attrs("mean")
_GATHER = _torch_attrs("gather", "take_along_dim") | _tensor_attrs("gather", "take_along_dim")
_SQUEEZE = _torch_attrs("squeeze", "unsqueeze") | _tensor_attrs("squeeze", "unsqueeze")
_GETITEM = _tensor_attrs("__getitem__")



def linear_operands(slots: List[Any], x: int, w: int, bias: Optional[int],
                    storage: torch.dtype, transposed: bool
                    ) -> Tuple[Tensor, Tensor, Optional[Tensor]]:
    """What a fused step hands the kernel: x, w ([V, D]) and the bias from
    their slots, in the storage the graph was built for (under autocast,
    what F.linear would cast them to)."""
    xv, wv = slots[x], slots[w]
    bv = slots[bias] if bias is not None else None
    if xv.dtype != storage:
        xv, wv = xv.to(storage), wv.to(storage)
        bv = bv.to(storage) if bv is not None else None
    return xv, (wv.t() if transposed else wv), bv
_LOG = _torch_attrs("log") | _tensor_attrs("log")
_KL_DIV = {F.kl_div}
_STACK = _torch_attrs("stack")
_DETACH = _torch_attrs("detach") | _tensor_attrs("detach")
