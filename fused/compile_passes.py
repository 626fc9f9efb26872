"""An Inductor post-grad pass that moves the activation and the gate/up pair of per-Linear converted MLPs
into our kernels under torch.compile.

With the default conversion (every nn.Linear -> FusedLinear(act="none")) a compiled Llama MLP reads

    g = fusedmlp.linear(x, Wg, ...); u = fusedmlp.linear(x, Wu, ...)
    y = fusedmlp.linear(silu(g) * u, Wd, ...)

and the ops are opaque to Inductor: it runs silu(g) * u as a kernel of its own, after a round trip of g
and u through memory (4 launches per block instead of 2). This pass rewrites the post-grad graph:

  1. act(linear(x, W, s, b, "none", dyn)) -> linear(x, W, s, b, act, dyn)      (also sparse24_linear)
  2. mul(linear(x, Wg, sg, bg, act, dyn), linear(x, Wu, su, bu, "none", dyn))  (either order, same x)
     -> gated_pair(x, Wg, sg, bg, Wu, su, bu, act, dyn): one gated kernel reading both weights where
     they are (stacking them would copy the weights on every call)

The post-grad graph holds activations decomposed (silu in bf16: convert to fp32, neg, exp, add, div,
convert back), and the decomposition depends on the dtype and the torch version. So the patterns are
not written by hand: each activation (and the hand-written forms transformers uses: NewGELU, FastGELU,
x * sigmoid(x)) is traced through Inductor's own decomposition table (``pattern_matcher.fwd_only``) per
float dtype, once, on the first graph holding a fused linear, and matched with Inductor's pattern matcher.
A rewrite happens only when every node it removes feeds nothing outside the matched region.
(transformers' NewGELUActivation is matched with dynamic=False only: under dynamic=True Dynamo turns its
``math.pi`` into a graph input, so the constant is unknown when the pass runs; it then stays Inductor's.)

Numerics: the fused op applies the activation (and the gate product) to the fp32 accumulator and rounds
once; the unfused graph rounds each linear's output to the activation dtype first. The compiled model
therefore differs from eager by that rounding (tests bound it by SQNR).

`install()` (called by ``import fused``) appends the pass to ``torch._inductor.config.
post_grad_custom_post_pass``, keeping any pass already there; a pass assigned to that setting later
replaces ours (call `install()` again, or chain both with `ChainedPass`). Off: ``FUSED_COMPILE_PASSES=0`` or
`set_enabled(False)`; the state is part of the pass's cache key, so Inductor's FX graph cache never hands
out a graph built in the other state. `stats` counts the rewrites ("linear+silu", "gated_pair(silu)").
"""
from __future__ import annotations

import os
from collections import Counter

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

# rewrites made, by kind: "linear+<act>", "sparse24_linear+<act>", "gated_pair(<act>)"
stats: Counter = Counter()
_enabled = os.environ.get("FUSED_COMPILE_PASSES", "1") != "0"

FUSABLE_ACTS = ("relu", "gelu", "gelu_tanh", "silu")
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_patterns: dict = {}  # dtype -> [(act, pattern)]


def enabled() -> bool:
    return _enabled


def set_enabled(on: bool = True) -> None:
    """Turn the rewrites on or off for the compilations that follow (FUSED_COMPILE_PASSES=0: off)."""
    global _enabled
    _enabled = bool(on)


def _act_forms() -> list[tuple[str, object]]:
    """(activation, function): every form we recognise as that activation."""
    import math

    from fused.activations import apply_activation

    def named(act):
        return lambda t: apply_activation(t, act)  # (one argument: make_fx traces every parameter)

    forms = [(act, named(act)) for act in FUSABLE_ACTS]
    forms += [
        ("silu", lambda t: t * torch.sigmoid(t)),
        # transformers' NewGELUActivation (gelu_new, GPT-2) and FastGELUActivation (gelu_fast)
        ("gelu_tanh", lambda t: 0.5 * t * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (t + 0.044715 * torch.pow(t, 3.0))))),
        ("gelu_tanh", lambda t: 0.5 * t * (1.0 + torch.tanh(t * 0.7978845608 * (1.0 + 0.044715 * t * t)))),
    ]
    return forms


def _act_patterns(dtype: torch.dtype) -> list:
    """[(activation, pattern)] for activations in ``dtype``, traced on first use (~0.3 s per dtype)."""
    pats = _patterns.get(dtype)
    if pats is None:
        from torch._inductor.pattern_matcher import fwd_only, fx_to_pattern

        pats = _patterns[dtype] = [(act, fx_to_pattern(fwd_only(fn, [torch.linspace(-4, 4, 8, dtype=dtype)]), argnames=("x",)))
                                   for act, fn in _act_forms()]
    return pats


def _ops():
    f = torch.ops.fusedmlp
    # op -> index of its `act` argument
    return {f.linear.default: 4, f.sparse24_linear.default: 5}


def _val(n):
    return n.meta.get("val") if isinstance(n, torch.fx.Node) else None


def _fake_call(target, args):
    """The output's fake value for a node we add (Inductor's lowering reads node.meta["val"])."""
    from torch._guards import detect_fake_mode

    vals = [_val(a) if isinstance(a, torch.fx.Node) else a for a in args]
    mode = detect_fake_mode([v for v in vals if isinstance(v, torch.Tensor)])
    with mode:
        return target(*vals)


def _erase(graph: torch.fx.Graph, nodes) -> None:
    order = {n: i for i, n in enumerate(graph.nodes)}
    for n in sorted(set(nodes), key=order.__getitem__, reverse=True):
        if not n.users:
            graph.erase_node(n)


def _descendants(node: torch.fx.Node, depth: int = 16) -> list[torch.fx.Node]:
    """Nodes fed by ``node`` within ``depth`` steps, nearest first (where an activation's output can be)."""
    seen, out, frontier = set(), [], [node]
    for _ in range(depth):
        nxt = []
        for n in frontier:
            for u in n.users:
                if u not in seen and u.op == "call_function":
                    seen.add(u)
                    out.append(u)
                    nxt.append(u)
        frontier = nxt
    return out


def _fuse_activations(graph: torch.fx.Graph) -> None:
    ops = _ops()
    for lin in [n for n in graph.nodes if n.op == "call_function" and n.target in ops]:
        i = ops[lin.target]
        v = _val(lin)
        if len(lin.args) <= i or lin.args[i] != "none" or v is None or v.dtype not in _DTYPES:
            continue
        for cand in _descendants(lin):
            hit = None
            for act, pat in _act_patterns(v.dtype):
                m = pat.match(cand)
                if m and m.kwargs.get("x") is lin and set(lin.users) <= set(m.nodes):
                    hit = act, m
                    break
            if hit is None:
                continue
            act, m = hit
            out = _val(cand)
            if out is None or out.dtype != v.dtype or out.shape != v.shape:
                break
            args = lin.args[:i] + (act,) + lin.args[i + 1:]
            with graph.inserting_before(cand):
                new = graph.call_function(lin.target, args, dict(lin.kwargs))
            new.meta["val"] = _fake_call(lin.target, args)
            cand.replace_all_uses_with(new)
            _erase(graph, list(m.nodes) + [lin])
            stats[f"{str(lin.target).split('.')[1]}+{act}"] += 1
            break


def _fuse_gated_pairs(graph: torch.fx.Graph) -> None:
    linear = torch.ops.fusedmlp.linear.default
    for mul in [n for n in graph.nodes if n.op == "call_function" and n.target == torch.ops.aten.mul.Tensor]:
        a, b = mul.args[0], mul.args[1]
        if not all(isinstance(n, torch.fx.Node) and n.target == linear and len(n.users) == 1 for n in (a, b)):
            continue
        if a is b or len(a.args) != 6 or len(b.args) != 6:
            continue
        if a.args[4] == "none" and b.args[4] != "none":
            a, b = b, a  # a: the gate (the activated one; both "none" is a bilinear GLU, fused too)
        if b.args[4] != "none":
            continue  # act(g) * act(u) has no fused form
        x, wg, sg, bg, act, dyn = a.args
        xu, wu, su, bu, _, dyn_u = b.args
        if a.kwargs or b.kwargs or xu is not x or dyn_u != dyn or (bg is None) != (bu is None):
            continue
        vg, vu, vx, vm = _val(wg), _val(wu), _val(x), _val(mul)
        if None in (vg, vu, vx, vm) or vg.dtype != vu.dtype or vg.shape != vu.shape:
            continue
        if vm.dtype != vx.dtype or vm.shape != _val(a).shape:  # no promotion, no broadcast
            continue
        args = (x, wg, sg, bg, wu, su, bu, act, dyn)
        with graph.inserting_before(mul):
            new = graph.call_function(torch.ops.fusedmlp.gated_pair.default, args)
        new.meta["val"] = _fake_call(torch.ops.fusedmlp.gated_pair.default, args)
        mul.replace_all_uses_with(new)
        _erase(graph, [mul, a, b])
        stats[f"gated_pair({act})"] += 1


def rewrite(graph: torch.fx.Graph) -> None:
    """Apply both rewrites to a post-grad graph (in place); a no-op when disabled or nothing matches."""
    if not _enabled:
        return
    ops = _ops()
    if not any(n.op == "call_function" and n.target in ops for n in graph.nodes):
        return
    _fuse_activations(graph)
    _fuse_gated_pairs(graph)
    graph.lint()


def _activations_file() -> str:
    from fused import activations  # the patterns are traced from its definitions

    return activations.__file__


class FusedMLPPass(CustomGraphPass):
    """The pass as Inductor wants it: callable on the graph, with a cache key (source + on/off)."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        rewrite(graph)

    def uuid(self):
        return get_hash_for_files((__file__, _activations_file())), _enabled


class ChainedPass(CustomGraphPass):
    """Several passes as one: torch <= 2.12 takes a single post-grad pass, not a list."""

    def __init__(self, passes):
        self.passes = tuple(passes)

    def __call__(self, graph: torch.fx.Graph) -> None:
        for p in self.passes:
            p(graph)

    def uuid(self):
        keys = tuple(p.uuid() if isinstance(p, CustomGraphPass) else None for p in self.passes)
        return None if None in keys else keys  # a plain callable has no key: no FX-graph caching


def _as_tuple(custom_pass) -> tuple:
    if custom_pass is None:
        return ()
    if isinstance(custom_pass, ChainedPass):
        return custom_pass.passes
    if isinstance(custom_pass, (list, tuple)):
        return tuple(custom_pass)
    return (custom_pass,)


def install() -> None:
    """Add the pass to torch._inductor.config.post_grad_custom_post_pass (idempotent; keeps others,
    chained into one pass object, which every torch version accepts)."""
    from torch._inductor import config

    passes = _as_tuple(config.post_grad_custom_post_pass)
    if any(isinstance(p, FusedMLPPass) for p in passes):
        return
    config.post_grad_custom_post_pass = ChainedPass(passes + (FusedMLPPass(),)) if passes else FusedMLPPass()
