"""Partition invariants: a hypothesis property test over random DAGs, plus small cases."""

import networkx as nx
from hypothesis import given, settings, strategies as st

from tensorplay_graph.passes.partition import partition_dag

LABELS = (None, "a", "b", "fence")


@st.composite
def random_dags(draw):
    n = draw(st.integers(min_value=1, max_value=40))
    density = draw(st.floats(min_value=0.02, max_value=0.5))
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n))
    rand = draw(st.randoms(use_true_random=False))
    for j in range(n):
        for i in range(max(0, j - 8), j):  # local edges, like real programs
            if rand.random() < density:
                graph.add_edge(i, j)
        if j > 8 and rand.random() < density / 2:  # occasional long edge
            graph.add_edge(rand.randrange(0, j - 8), j)
    labels = {i: draw(st.sampled_from(LABELS)) for i in range(n)}
    return graph, labels


def run(graph, labels):
    order = list(range(graph.number_of_nodes()))  # 0..n-1 is topological by construction
    return partition_dag(
        order,
        preds=lambda n: sorted(graph.predecessors(n)),
        label=lambda n: labels[n] if labels[n] in ("a", "b") else None,
        is_fence=lambda n: labels[n] == "fence",
    )


def contracted(graph, region_of):
    unit = {n: ("r", region_of[n]) if n in region_of else ("n", n) for n in graph}
    out = nx.DiGraph()
    out.add_nodes_from(set(unit.values()))
    for u, v in graph.edges:
        if unit[u] != unit[v]:
            out.add_edge(unit[u], unit[v])
    return out


def check_invariants(graph, labels, result):
    claimed = {n for n, lab in labels.items() if lab in ("a", "b")}
    members = [n for region in result.regions for n in region]
    assert len(members) == len(set(members)), "regions overlap"
    assert set(members) == claimed, "union of regions != claimed nodes"
    for rid, region in enumerate(result.regions):
        assert region, "empty region"
        assert {labels[n] for n in region} == {result.labels[rid]}, "mixed or barrier labels"
        assert all(result.region_of[n] == rid for n in region)
        inside = set(region)
        # convex: nothing reachable from the region outside it reaches back into it
        outside_reach = set()
        for n in region:
            for succ in graph.successors(n):
                if succ not in inside:
                    outside_reach |= {succ} | nx.descendants(graph, succ)
        assert not (outside_reach & inside), f"region {rid} is not convex"
        # no region spans a fence
        for f in (n for n, lab in labels.items() if lab == "fence"):
            assert not (min(region) < f < max(region)), f"region {rid} spans fence {f}"
    assert nx.is_directed_acyclic_graph(contracted(graph, result.region_of))


@settings(max_examples=300, deadline=None)
@given(random_dags())
def test_partition_invariants_on_random_dags(case):
    graph, labels = case
    result = run(graph, labels)
    check_invariants(graph, labels, result)
    again = run(graph, labels)
    assert again.regions == result.regions and again.labels == result.labels  # deterministic


def chain_graph(n):
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n))
    graph.add_edges_from((i, i + 1) for i in range(n - 1))
    return graph


def test_chain_is_one_region():
    graph = chain_graph(6)
    result = run(graph, {i: "a" for i in range(6)})
    assert result.regions == [[0, 1, 2, 3, 4, 5]]


def test_barrier_in_chain_splits_it():
    graph = chain_graph(5)
    result = run(graph, {0: "a", 1: "a", 2: None, 3: "a", 4: "a"})
    assert result.regions == [[0, 1], [3, 4]]


def test_diamond_around_barrier_is_not_fused():
    # 0 -> 1(barrier) -> 2 and 0 -> 2: fusing 0 and 2 would create a cycle.
    graph = nx.DiGraph([(0, 1), (1, 2), (0, 2)])
    result = run(graph, {0: "a", 1: None, 2: "a"})
    assert sorted(result.regions) == [[0], [2]]


def test_independent_producers_merge_at_their_consumer():
    # x -> 1, y -> 2, (1, 2) -> 3: one region {1, 2, 3}.
    graph = nx.DiGraph([(0, 2), (1, 3), (2, 4), (3, 4)])
    result = run(graph, {0: None, 1: None, 2: "a", 3: "a", 4: "a"})
    assert result.regions == [[2, 3, 4]]


def test_backend_preference_labels_split_regions():
    graph = chain_graph(4)
    result = run(graph, {0: "a", 1: "a", 2: "b", 3: "b"})
    assert result.regions == [[0, 1], [2, 3]] and result.labels == ["a", "b"]


def test_fence_is_never_spanned_even_without_edges():
    graph = nx.DiGraph()
    graph.add_nodes_from(range(3))
    graph.add_edges_from([(0, 2)])
    result = run(graph, {0: "a", 1: "fence", 2: "a"})
    assert sorted(result.regions) == [[0], [2]]


