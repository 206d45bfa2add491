"""Match the ops of two entry graphs independently of SSA names (GumTree / hlo_diff style).

Stages, each only touching nodes the previous ones left unmatched:

1. **exact anchors** -- structural hashes that occur exactly once on each side, tallest
   (deepest operand/region closure) first; a matched pair pulls its whole operand closure
   and region contents along (equal hashes mean isomorphic subgraphs);
2. **propagation** over a work list of matched pairs:
   top-down into operands at the same position, bottom-up into users at the same operand
   position, into region children and up to the owning region op; when several candidates
   share an op name the best Dice similarity of already-matched neighbours wins, ties are
   left for later;
3. **twins** -- what is still unmatched but hash-identical on both sides (dead duplicate
   constants, twin view ops) is paired in text order;
4. **structural signatures** -- networkx's Weisfeiler-Lehman subgraph hashes over the
   unmatched ops and their matched neighbours (each matched pair labelled by one shared id,
   unmatched ops by their op name only, edges by kind): an op whose signature is unique on
   both sides is paired with its twin there.  Types and attributes are left out of the
   labels, so this pairs what a tile-size or dtype change altered in place;
5. **similarity recovery** inside matched regions and then globally per op name, greedy
   by Dice score above a threshold, each followed by propagation and twins again.

Caps keep large inputs linear: nodes with more than ``max_fanout`` users (tokens,
broadcast constants) do not propagate to users, candidate lists and similarity matrices are
bounded.  Matching never pairs ops of different names; the entry node and the arguments
(by position) are always paired.
"""
from __future__ import annotations

import warnings
from collections import defaultdict, deque
from dataclasses import dataclass, field

import networkx as nx

from .graph import ROOT, IRGraph


@dataclass
class MatchOptions:
    """Bounds that keep matching near-linear on large dumps, and the similarity thresholds."""
    max_fanout: int = 256          # users examined per node during propagation
    max_candidates: int = 64       # candidates scored per node
    max_group: int = 400           # similarity matrices are at most max_group^2 per op name
    min_similarity: float = 0.34   # Dice threshold for fuzzy pairs
    min_content: float = 0.5       # region ops: Dice of their nested op names
    rounds: int = 4                # recovery + propagation rounds
    wl_iterations: int = 3         # Weisfeiler-Lehman depth of the structural signatures


@dataclass
class Matching:
    """A one-to-one node pairing of two graphs (-1: unmatched), with the stage that paired each node."""
    a: IRGraph
    b: IRGraph
    a2b: list[int]
    b2a: list[int]
    how: dict[int, str] = field(default_factory=dict)     # A node -> stage that matched it
    stats: dict[str, int] = field(default_factory=dict)

    def matched(self, a: int) -> int:
        """The B node paired with A node ``a``, or -1."""
        return self.a2b[a]

    @property
    def pairs(self) -> list[tuple[int, int]]:
        """Every (a, b) pair, in A's node order."""
        return [(a, b) for a, b in enumerate(self.a2b) if b >= 0]


class _Matcher:
    def __init__(self, A: IRGraph, B: IRGraph, opts: MatchOptions):
        self.A, self.B, self.o = A, B, opts
        self.a2b = [-1] * A.size
        self.b2a = [-1] * B.size
        self.how: dict[int, str] = {}
        self.queue: deque[tuple[int, int]] = deque()
        self._na: dict[int, dict[str, int]] = {}
        self._nb: dict[int, dict[str, int]] = {}

    # -- bookkeeping
    def pair(self, a: int, b: int, how: str) -> bool:
        if self.a2b[a] >= 0 or self.b2a[b] >= 0:
            return False
        self.a2b[a] = b
        self.b2a[b] = a
        self.how[a] = how
        self.queue.append((a, b))
        return True

    def free_a(self, a: int) -> bool:
        return self.a2b[a] < 0

    def free_b(self, b: int) -> bool:
        return self.b2a[b] < 0

    # -- stage 1
    def match_exact(self, a0: int, b0: int, how: str = "exact") -> None:
        A, B = self.A, self.B
        stack = [(a0, b0)]
        while stack:
            a, b = stack.pop()
            if not self.pair(a, b, how):
                continue
            how = "exact"
            for (sa, pa), (sb, pb) in zip(A.operands[a], B.operands[b]):
                if sa > ROOT and sb > ROOT and pa == pb and pa >= 0 and A.kind[sa] == "op" \
                        and self.a2b[sa] < 0 and self.b2a[sb] < 0 and A.hash[sa] == B.hash[sb]:
                    stack.append((sa, sb))
            pa, pb = A.order_pred[a], B.order_pred[b]
            if pa >= 0 and pb >= 0 and self.a2b[pa] < 0 and self.b2a[pb] < 0 and A.hash[pa] == B.hash[pb]:
                stack.append((pa, pb))
            for ka, kb in zip(A.children[a], B.children[b]):
                by_hash: dict[int, list[int]] = defaultdict(list)
                for k in reversed(kb):
                    if self.b2a[k] < 0:
                        by_hash[B.hash[k]].append(k)
                for k in ka:
                    if self.a2b[k] >= 0:
                        continue
                    lst = by_hash.get(A.hash[k])
                    if lst:
                        stack.append((k, lst.pop()))

    def anchors(self) -> None:
        A, B = self.A, self.B
        count_a: dict[int, int] = defaultdict(int)
        first_a: dict[int, int] = {}
        for v in A.op_nodes:
            h = A.hash[v]
            count_a[h] += 1
            first_a.setdefault(h, v)
        count_b: dict[int, int] = defaultdict(int)
        first_b: dict[int, int] = {}
        for v in B.op_nodes:
            h = B.hash[v]
            count_b[h] += 1
            first_b.setdefault(h, v)
        unique = [h for h, c in count_a.items() if c == 1 and count_b.get(h) == 1]
        unique.sort(key=lambda h: -A.height[first_a[h]])
        for h in unique:
            a, b = first_a[h], first_b[h]
            if self.a2b[a] < 0 and self.b2a[b] < 0:
                self.match_exact(a, b)

    # -- similarity
    def score(self, u: int, v: int) -> float:
        """Dice coefficient of matched neighbours (operands by position, users by position).

        Zero when no neighbour agrees and the labels differ: sharing only the enclosing
        region is no evidence (every top-level op shares it).  Same region and equal labels
        add small bonuses that break ties.
        """
        A, B, a2b = self.A, self.B, self.a2b
        common = 0
        ou, ov = A.operands[u], B.operands[v]
        for (sa, pa), (sb, pb) in zip(ou, ov):
            if sa >= 0 and sb >= 0 and a2b[sa] == sb and pa == pb:
                common += 1
        total = len(ou) + len(ov)
        uu, uv = A.users[u], B.users[v]
        cap = self.o.max_fanout
        if len(uu) <= cap and len(uv) <= cap:
            if uu and uv:
                vb = set(uv)
                for (w, pos) in uu:
                    m = a2b[w]
                    if m >= 0 and (m, pos) in vb:
                        common += 1
            total += len(uu) + len(uv)
        same_label = A.label[u] == B.label[v]
        if common == 0 and not same_label:
            return 0.0
        s = (2.0 * common / total) if total else 0.0
        if same_label:
            s += 0.25
        pu, pv = A.parent[u], B.parent[v]
        if pu >= 0 and a2b[pu] == pv and A.region[u] == B.region[v]:
            s += 0.05
        return s

    def best(self, u: int, cands: list[int]) -> int:
        """The best candidate for ``u``, or -1 on a tie or below threshold."""
        if len(cands) > self.o.max_candidates:
            cands = cands[: self.o.max_candidates]
        A, B = self.A, self.B
        best, best_s, tie = -1, -1.0, False
        hu = A.hash[u]
        for v in cands:
            s = self.score(u, v) + (1.0 if B.hash[v] == hu else 0.0)
            if s > best_s + 1e-9:
                best, best_s, tie = v, s, False
            elif abs(s - best_s) <= 1e-9:
                tie = True
        if tie or best_s < self.o.min_similarity:
            return -1
        return best

    # -- stage 2
    def propagate(self) -> None:
        A, B, o = self.A, self.B, self.o
        while self.queue:
            a, b = self.queue.popleft()
            # top-down: operands at the same position
            for (sa, pa), (sb, pb) in zip(A.operands[a], B.operands[b]):
                if sa <= ROOT or sb <= ROOT:
                    continue
                if pa < 0 or pb < 0:
                    # block argument: the owners correspond
                    if pa == pb and self.a2b[sa] < 0 and self.b2a[sb] < 0 and A.name[sa] == B.name[sb]:
                        self.pair(sa, sb, "owner")
                    continue
                if self.a2b[sa] >= 0 or self.b2a[sb] >= 0 or pa != pb or A.kind[sa] != "op" \
                        or A.name[sa] != B.name[sb]:
                    continue
                if A.hash[sa] == B.hash[sb]:
                    self.match_exact(sa, sb, "operand")
                else:
                    self.pair(sa, sb, "operand")
            # bottom-up: users at the same operand position
            ua, ub = A.users[a], B.users[b]
            if ua and ub and len(ua) <= o.max_fanout and len(ub) <= o.max_fanout:
                index: dict[tuple[int, str], list[int]] = defaultdict(list)
                for (v, pos) in ub:
                    if self.b2a[v] < 0:
                        index[(pos, B.name[v])].append(v)
                if index:
                    for (u, pos) in ua:
                        if self.a2b[u] >= 0:
                            continue
                        cands = [v for v in index.get((pos, A.name[u]), ()) if self.b2a[v] < 0]
                        if not cands:
                            continue
                        v = cands[0] if len(cands) == 1 else self.best(u, cands)
                        if v >= 0:
                            if A.hash[u] == B.hash[v]:
                                self.match_exact(u, v, "user")
                            else:
                                self.pair(u, v, "user")
            # region children
            for ka, kb in zip(A.children[a], B.children[b]):
                self.match_siblings(ka, kb)
            # up: the owners of a matched pair
            pa, pb = A.parent[a], B.parent[b]
            if pa > ROOT and pb > ROOT and self.a2b[pa] < 0 and self.b2a[pb] < 0 and A.name[pa] == B.name[pb]:
                self.pair(pa, pb, "parent")

    def match_siblings(self, ka: list[int], kb: list[int], fuzzy: bool = False) -> None:
        A, B = self.A, self.B
        fa = [k for k in ka if self.a2b[k] < 0]
        if not fa:
            return
        fb = [k for k in kb if self.b2a[k] < 0]
        if not fb:
            return
        by_hash: dict[int, list[int]] = defaultdict(list)
        for k in reversed(fb):
            by_hash[B.hash[k]].append(k)
        count_a: dict[int, int] = defaultdict(int)
        for k in fa:
            count_a[A.hash[k]] += 1
        rest = []
        for k in fa:
            lst = by_hash.get(A.hash[k])
            if lst and len(lst) == 1 and count_a[A.hash[k]] == 1:
                v = lst.pop()
                if self.b2a[v] < 0:
                    self.match_exact(k, v, "region")
                    continue
            rest.append(k)
        names_a: dict[str, list[int]] = defaultdict(list)
        names_b: dict[str, list[int]] = defaultdict(list)
        for k in rest:
            if self.a2b[k] < 0:
                names_a[A.name[k]].append(k)
        for k in fb:
            if self.b2a[k] < 0:
                names_b[B.name[k]].append(k)
        for nm, la in names_a.items():
            lb = names_b.get(nm)
            if not lb:
                continue
            if len(la) == 1 and len(lb) == 1:
                # two region ops are no pair just for being alone in their region: a K loop
                # that became the inner loop of a new persistent loop must not be paired
                # with the persistent loop (their contents tell them apart)
                if not A.children[la[0]] or self.content(la[0], lb[0]) >= self.o.min_content:
                    self.pair(la[0], lb[0], "region")
            elif fuzzy:
                self.greedy(la, lb, "similar")

    def content(self, u: int, v: int) -> float:
        """Dice coefficient of the op names nested in two region ops (1.0 for leaf ops)."""
        ca, cb = self._names(self.A, u, self._na), self._names(self.B, v, self._nb)
        total = sum(ca.values()) + sum(cb.values())
        if total == 0:
            return 1.0
        common = sum(min(n, cb.get(k, 0)) for k, n in ca.items())
        return 2.0 * common / total

    @staticmethod
    def _names(g: IRGraph, v: int, cache: dict) -> dict[str, int]:
        hit = cache.get(v)
        if hit is None:
            hit = {}
            for k in g.walk_region(v):
                hit[g.name[k]] = hit.get(g.name[k], 0) + 1
            cache[v] = hit
        return hit

    def greedy(self, la: list[int], lb: list[int], how: str) -> None:
        o = self.o
        if len(la) > o.max_group or len(lb) > o.max_group:
            la, lb = la[: o.max_group], lb[: o.max_group]
        scored = []
        A, B = self.A, self.B
        for u in la:
            if self.a2b[u] >= 0:
                continue
            for v in lb:
                if self.b2a[v] >= 0:
                    continue
                s = self.score(u, v) + (1.0 if A.hash[u] == B.hash[v] else 0.0)
                if s >= o.min_similarity and (not A.children[u] or self.content(u, v) >= o.min_content):
                    scored.append((-s, u, v))
        scored.sort()
        for _s, u, v in scored:
            if self.a2b[u] < 0 and self.b2a[v] < 0:
                self.pair(u, v, how)

    # -- stage 5
    def recover(self) -> bool:
        A, B = self.A, self.B
        before = len(self.how)
        # inside matched regions first
        for a in range(A.size):
            b = self.a2b[a]
            if b < 0 or not A.children[a]:
                continue
            for ka, kb in zip(A.children[a], B.children[b]):
                self.match_siblings(ka, kb, fuzzy=True)
        self.propagate()
        # then anywhere, per op name
        la: dict[str, list[int]] = defaultdict(list)
        lb: dict[str, list[int]] = defaultdict(list)
        for v in A.op_nodes:
            if self.a2b[v] < 0:
                la[A.name[v]].append(v)
        for v in B.op_nodes:
            if self.b2a[v] < 0:
                lb[B.name[v]].append(v)
        for nm, xs in la.items():
            ys = lb.get(nm)
            if ys:
                self.greedy(xs, ys, "similar")
        self.propagate()
        return len(self.how) > before

    # -- stage 4
    def signatures(self) -> None:
        A, B = self.A, self.B
        fa = [v for v in A.op_nodes if self.a2b[v] < 0]
        fb = [v for v in B.op_nodes if self.b2a[v] < 0]
        if not fa or not fb:
            return
        sa = _wl_signatures(A, fa, self.a2b, lambda v: v, self.o.wl_iterations)
        sb = _wl_signatures(B, fb, self.b2a, lambda v: self.b2a[v], self.o.wl_iterations)
        only_b: dict[str, int] = {}
        seen_b: dict[str, int] = defaultdict(int)
        for v in fb:
            seen_b[sb[v]] += 1
            only_b[sb[v]] = v
        seen_a: dict[str, int] = defaultdict(int)
        for u in fa:
            seen_a[sa[u]] += 1
        for u in fa:
            h = sa[u]
            if seen_a[h] != 1 or seen_b.get(h) != 1:
                continue
            v = only_b[h]
            if self.a2b[u] < 0 and self.b2a[v] < 0 and \
                    (not A.children[u] or self.content(u, v) >= self.o.min_content):
                if A.hash[u] == B.hash[v]:
                    self.match_exact(u, v, "signature")
                else:
                    self.pair(u, v, "signature")
        self.propagate()

    # -- stage 3
    def twins(self) -> None:
        A, B = self.A, self.B
        by_hash: dict[int, deque[int]] = defaultdict(deque)
        for v in B.op_nodes:
            if self.b2a[v] < 0:
                by_hash[B.hash[v]].append(v)
        for u in A.op_nodes:
            if self.a2b[u] >= 0:
                continue
            q = by_hash.get(A.hash[u])
            while q:
                v = q.popleft()
                if self.b2a[v] < 0:
                    self.match_exact(u, v, "twin")
                    break
        self.propagate()


def _wl_signatures(g: IRGraph, free: list[int], matched: list[int], pair_id, iterations: int) -> dict[int, str]:
    """Weisfeiler-Lehman subgraph hashes of the unmatched ops ``free`` over the subgraph of
    them and their direct neighbours.  A matched neighbour is labelled by its pair's id
    (``pair_id``: the before-side node), so both sides' labels are comparable."""
    G = g.nx
    nodes = set(free)
    for v in free:
        nodes.update(G.predecessors(v))
        nodes.update(G.successors(v))
    # WL wants a simple graph: parallel def-use edges (an op using a value twice) collapse
    H = nx.DiGraph(G.subgraph(nodes))
    labels = {v: (g.name[v] if matched[v] < 0 else f"={pair_id(v)}") for v in H}
    nx.set_node_attributes(H, labels, "sig")
    with warnings.catch_warnings():     # "hashes for directed graphs changed in networkx 3.5"
        warnings.simplefilter("ignore", UserWarning)
        hashes = nx.weisfeiler_lehman_subgraph_hashes(H, node_attr="sig", edge_attr="kind",
                                                      iterations=iterations)
    return {v: g.name[v] + ":" + hashes[v][-1] for v in free}


def match_graphs(A: IRGraph, B: IRGraph, opts: MatchOptions | None = None) -> Matching:
    """Pair the nodes of A and B: root and arguments, Merkle anchors, propagation, twins, WL
    signatures, then rounds of similarity recovery (see the module docstring)."""
    m = _Matcher(A, B, opts or MatchOptions())
    m.pair(ROOT, ROOT, "root")
    for i in range(min(len(A.entry.args), len(B.entry.args))):
        m.pair(1 + i, 1 + i, "arg")
    m.anchors()
    exact = len(m.how)
    m.propagate()
    m.twins()
    m.signatures()
    for _ in range(m.o.rounds):
        if not m.recover():
            break
        m.twins()
    stats = {"nodes_a": A.size, "nodes_b": B.size, "matched": len(m.how), "exact": exact}
    for h in m.how.values():
        stats[f"by_{h}"] = stats.get(f"by_{h}", 0) + 1
    return Matching(A, B, m.a2b, m.b2a, m.how, stats)
