"""TileIR op vocabulary (tileirdisasm 13.4/13.5) and the cost-model class of each op."""
from __future__ import annotations

OP_CLASSES: dict[str, tuple[str, ...]] = {
    "memory": ("load_view_tko", "store_view_tko", "load_ptr_tko", "store_ptr_tko", "atomic_rmw_tko",
               "atomic_cas_tko", "atomic_red_view_tko", "multimem_load_reduce_view_tko",
               "multimem_reduce_view_tko", "multimem_store_view_tko"),
    "tensor_core": ("mmaf", "mmai", "mmaf_scaled"),
    "view": ("make_tensor_view", "make_partition_view", "make_strided_view", "make_gather_scatter_view",
             "get_index_space_shape", "get_tensor_shape", "offset", "int_to_ptr", "ptr_to_int",
             "ptr_to_ptr"),
    "ordering": ("make_token", "join_tokens", "memory_fence_alias_tko", "gdc_wait_tko",
                 "gdc_launch_dependents_tko"),
    "assume": ("assume",),
    "grid": ("get_tile_block_id", "get_num_tile_blocks"),
    "control": ("module", "entry", "return", "for", "loop", "if", "yield", "continue", "break"),
    "reduction": ("reduce", "scan"),
    "float": ("absf", "addf", "subf", "mulf", "divf", "remf", "negf", "maxf", "minf", "fma", "ceil",
              "floor", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tan", "sinh",
              "cosh", "tanh", "atan2", "fpowf", "fpowi", "isnan", "erf"),
    "int": ("absi", "addi", "subi", "muli", "mulhii", "divi", "remi", "negi", "maxi", "mini", "andi",
            "ori", "xori", "shli", "shri", "noti", "ctlz", "cttz", "popcnt"),
    "compare": ("cmpf", "cmpi", "select"),
    "conversion": ("ftof", "ftoi", "itof", "exti", "trunci", "bitcast"),
    "shape": ("broadcast", "reshape", "permute", "cat", "extract", "insert", "pack", "unpack", "iota",
              "constant"),
    "debug": ("print_tko", "assert"),
    "module": ("global", "get_global", "alloca"),
}

OP_CLASS: dict[str, str] = {op: cls for cls, ops in OP_CLASSES.items() for op in ops}
KNOWN_OPS = frozenset(OP_CLASS)

LOADS = frozenset({"load_view_tko", "load_ptr_tko", "multimem_load_reduce_view_tko"})
STORES = frozenset({"store_view_tko", "store_ptr_tko", "multimem_store_view_tko"})
VIEW_MEMORY = frozenset({"load_view_tko", "store_view_tko", "atomic_red_view_tko"})
PTR_MEMORY = frozenset({"load_ptr_tko", "store_ptr_tko", "atomic_rmw_tko", "atomic_cas_tko"})
REGION_OPS = frozenset({"for", "loop", "if", "reduce", "scan"})
TERMINATORS = frozenset({"return", "yield", "continue", "break"})


def op_class(name: str) -> str:
    """The class of a TileIR op name, ``unknown`` for names not in the table."""
    return OP_CLASS.get(name, "unknown")
