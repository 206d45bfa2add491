"""The array matcher issue 14 replaced (graph.py + match.py as of commit 9a66a42), frozen for
``bench/bench_diff.py``'s side-by-side timing; the package never imports it."""
