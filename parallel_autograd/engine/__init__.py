"""The two backward engines and what they share.

Layers, each importing only from those above it in this list (tests/test_layering.py
checks there is no circle; outside the engine they import the floors below the op families
and `ops/forms`, never an op family; docs/design.md, "The layers"):

- `accumulate`: the canonical sum (order and arithmetic) every engine uses, and its
  recorded form for create_graph (`graph_add`).
- `blas`, `callbacks`, `pool`: BLAS thread limits; what code inside a pass may ask of it;
  persistent worker threads and the calls' ready queues.
- `cost`: the cost model that picks a mode per call.
- `graph`: create_graph's pieces (seeds, hook results, `GraphPending`, `renumber`).
- `plan`: validating a call and planning it (nodes, in-degrees, grad() pruning).
- `step`: the per-node step (hooks, staging, the rule or, recording, the formulas) and the
  final `commit`.
- `sequential`: the reference engine (`backward`, `grad`).
- `rows`: independent passes over one graph, concurrent when it pays (the Jacobian's
  rows, `grad(..., is_grads_batched=True)`), and the public `grad`.
- `strategy`: a parallel call's two ways of summing contributions (ranked, keyed), each
  owning its state.
- `executor` -> `task`: running ready nodes on one thread; one parallel call's state.
- `engine`: `Engine`, the default engines, `backward_parallel`, `grad_parallel`.
"""
