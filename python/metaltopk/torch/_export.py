"""Adoption without editing a model: rewrite an exported program to use metaltopk's ops.

`replace_topk(ep)` turns every aten.topk of an ExportedProgram into metaltopk::mtk_topk, which
has the same schema, and, with `router=True`, every MoE router written as

    scores = softmax(logits.float(), dim=-1)        # float32 scores, last dim
    weights, ids = topk(scores, k, dim=-1)          # largest, sorted
    weights = weights / weights.sum(-1, keepdim=True)

into one metaltopk::mtk_moe_route. The router is matched only where nothing else reads the
scores, the unnormalised weights or their sum, so no intermediate the model uses disappears.
What changes there is float rounding: the fused router ranks experts by their logits, so its ids
are the exact top-k of the logits (the composite's ties between distinct logits that softmax
rounds to the same float32 go to the lower expert id), and its weights agree to float32
rounding (about 1e-7 relative).

Nodes are retargeted in place, keeping their names, so the program's signature stays valid.
"""

import operator

import torch

aten = torch.ops.aten

_SOFTMAX = (aten.softmax.int, aten._softmax.default)
_CASTS = (aten.to.dtype, aten._to_copy.default)
_ROUTER_LOGIT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _arguments(node) -> dict:
    """The call's arguments by schema name, defaults filled in."""
    values = {}
    for position, argument in enumerate(node.target._schema.arguments):
        if position < len(node.args):
            values[argument.name] = node.args[position]
        elif argument.name in node.kwargs:
            values[argument.name] = node.kwargs[argument.name]
        elif argument.has_default_value():
            values[argument.name] = argument.default_value
    return values


def _value(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _is_last_dim(dim, ndim) -> bool:
    return dim in (-1, ndim - 1)


def _only_user(node):
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def _router_logits(softmax):
    """The router's logits if `softmax` computes float32 scores over the last dim of a 2-D
    float tensor (maybe through an exact cast to float32), else None."""
    arguments = _arguments(softmax)
    scores = _value(softmax)
    source = arguments.get("self")
    if scores is None or scores.dtype != torch.float32 or scores.dim() != 2:
        return None
    if not _is_last_dim(arguments["dim"], 2):
        return None
    if softmax.target is aten._softmax.default and arguments["half_to_float"]:
        return None
    if softmax.target is aten.softmax.int and arguments.get("dtype") not in (None, torch.float32):
        return None
    if isinstance(source, torch.fx.Node) and source.target in _CASTS and len(source.users) == 1:
        cast = _arguments(source)
        if cast.get("dtype") == torch.float32 and _value(cast["self"]) is not None:
            source = cast["self"]
    logits = _value(source)
    if logits is None or logits.dim() != 2 or logits.dtype not in _ROUTER_LOGIT_DTYPES:
        return None
    return source


def _rewrite_router(graph, topk) -> bool:
    """Fuses softmax -> topk -> renormalise ending at this topk node, if it is one."""
    arguments = _arguments(topk)
    softmax = arguments["self"]
    if (not isinstance(softmax, torch.fx.Node) or softmax.target not in _SOFTMAX
            or len(softmax.users) != 1 or not arguments["largest"] or not arguments["sorted"]
            or not _is_last_dim(arguments["dim"], 2) or not isinstance(arguments["k"], int)):
        return False
    logits = _router_logits(softmax)
    if logits is None:
        return False
    picks = {user.args[1]: user for user in topk.users
             if user.target is operator.getitem and len(user.args) == 2}
    if len(picks) != len(topk.users) or 0 not in picks:
        return False
    weights = picks[0]
    users = list(weights.users)
    total = next((u for u in users if u.target is aten.sum.dim_IntList), None)
    divide = next((u for u in users if u.target is aten.div.Tensor), None)
    if total is None or divide is None or len(users) != 2 or _only_user(total) is not divide:
        return False
    total_arguments = _arguments(total)
    if (list(total_arguments["dim"] or ()) not in ([-1], [1]) or not total_arguments["keepdim"]
            or total_arguments.get("dtype") is not None
            or divide.args[:2] != (weights, total) or divide.kwargs):
        return False
    ids = picks.get(1)
    with graph.inserting_before(topk):
        route = graph.call_function(
            torch.ops.metaltopk.mtk_moe_route.default,
            (logits, arguments["k"], "softmax", None, 0, 0, True, 1.0, torch.int64))
    route.meta["val"] = (_value(divide), _value(ids) if ids is not None
                         else _value(divide).new_empty(_value(divide).shape, dtype=torch.int64))
    divide.target, divide.args, divide.kwargs = operator.getitem, (route, 0), {}
    if ids is not None:
        ids.args = (route, 1)
    return True


def replace_topk(exported_program, *, router=True):
    """Rewrites `exported_program` in place to use metaltopk's ops and returns it.

    Every aten.topk becomes metaltopk::mtk_topk (same arguments, same results: metaltopk's are
    a valid torch.topk result with ties to the lower index). With `router`, each
    softmax -> topk -> renormalise router (module docstring) becomes one mtk_moe_route.
    """
    graph = exported_program.graph_module.graph
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not aten.topk.default:
            continue
        if router and _rewrite_router(graph, node):
            continue
        node.target = torch.ops.metaltopk.mtk_topk.default
    graph.eliminate_dead_code()
    exported_program.graph_module.recompile()
    return exported_program
