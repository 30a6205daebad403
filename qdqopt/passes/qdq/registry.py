"""The CPU EP's selector/action registry of ``QDQSelectorActionTransformer`` (ORT 1.32), in registration order.

Each :class:`Entry` has ORT's rule name, its op keys with allowed ``SinceVersion`` lists (empty: any), the selector,
the action and the EPs it accepts. :func:`entries_for` gives the entries for one node's key, most recently
registered first, as libstdc++'s ``unordered_multimap::equal_range`` yields them (the selectors for the shared keys
``MatMul`` and ``Gemm`` are mutually exclusive, so the order never changes the result)::

    Conv ──key "Conv"──> [Entry("Conv", ConvSelector, ConvAction)]
    MatMul ─key "MatMul"─> [Entry("DQMatMulToMatMulNBits"), Entry("MatMul")]
"""

from __future__ import annotations

from dataclasses import dataclass

from qdqopt.passes.qdq import actions as act
from qdqopt.passes.qdq import selectors as sel

__all__ = ["Entry", "build_registry", "entries_for"]

CPU = "CPUExecutionProvider"
DML = "DmlExecutionProvider"
ACL = "ACLExecutionProvider"
CUDA = "CUDAExecutionProvider"


@dataclass(frozen=True, init=False)
class Entry:
    name: str
    ops: dict[str, tuple[int, ...]]
    selector: sel.NodeGroupSelector
    action: act.Action
    eps: tuple[str, ...]

    def __init__(
        self,
        name: str,
        ops: dict[str, tuple[int, ...]],
        selector: sel.NodeGroupSelector,
        action: act.Action,
        eps: tuple[str, ...],
    ) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "ops", ops)
        object.__setattr__(self, "selector", selector)
        object.__setattr__(self, "action", action)
        object.__setattr__(self, "eps", eps)


def build_registry(accuracy_level: int = 4, block_size: int = 0) -> list[Entry]:
    """The CPU table (notes §1.1), in ORT's registration order."""
    drop_ops = (
        "Expand",
        "Flatten",
        "Gather",
        "GatherElements",
        "Reshape",
        "Slice",
        "Squeeze",
        "Tile",
        "Transpose",
        "Unsqueeze",
    )
    return [
        Entry("dropSplitQDQ", {"Split": ()}, sel.SplitSelector(), act.SplitAction(), (CPU, DML)),
        Entry(
            "drop_no_int16_support",
            {"DepthToSpace": (), "Resize": ()},
            sel.DropQDQSelector(False, False, True),
            act.DropAction(),
            (CPU,),
        ),
        Entry(
            "drop_no_int16_support_and_positive_scale",
            {"MaxPool": (12, 22), "ReduceMax": (), "ReduceMin": ()},
            sel.DropQDQSelector(False, True, False),
            act.DropAction(),
            (CPU, DML),
        ),
        Entry(
            "drop", dict.fromkeys(drop_ops, ()), sel.DropQDQSelector(True, False, True), act.DropAction(), (CPU, DML)
        ),
        Entry("dropDQ", {"ArgMax": ()}, sel.DropDQSelector(), act.DropAction(drop_q=False), (CPU, DML)),
        Entry(
            "1DQ",
            {"AveragePool": (), "GlobalAveragePool": (), "Sigmoid": ()},
            sel.UnarySelector(),
            act.UnaryAction(),
            (CPU, DML),
        ),
        Entry("1DQ_CPU", {"LeakyRelu": (), "Softmax": ()}, sel.UnarySelector(), act.UnaryAction(), (CPU,)),
        Entry("2DQ", {"Add": (), "Mul": ()}, sel.BinarySelector(), act.BinaryAction(), (CPU,)),
        Entry("*DQ", {"Concat": ()}, sel.VariadicSelector(), act.VariadicAction(), (CPU, DML)),
        Entry("Conv", {"Conv": ()}, sel.ConvSelector(), act.ConvAction(), (CPU, DML, ACL)),
        Entry("MatMul", {"MatMul": ()}, sel.MatMulSelector(), act.MatMulAction(), (CPU, DML)),
        Entry("Gemm", {"Gemm": ()}, sel.GemmSelector(), act.GemmAction(), (CPU,)),
        Entry("Where", {"Where": ()}, sel.WhereSelector(), act.WhereAction(), (CPU,)),
        Entry(
            "DQMatMulToMatMulNBits",
            {"MatMul": (), "Gemm": ()},
            sel.DQMatMulNBitsSelector(),
            act.MatMulNBitsAction(accuracy_level, block_size),
            (CPU, CUDA, DML, ""),
        ),
    ]


def entries_for(registry: list[Entry], op_key: str) -> list[Entry]:
    """``equal_range(key)``: the most recently registered entry first."""
    return [e for e in reversed(registry) if op_key in e.ops]
