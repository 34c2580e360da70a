"""The two backward engines and what they share.

Layers, each importing only from those above it in this list:

- `accumulate`: the canonical sum (order and arithmetic) every engine uses.
- `plan`: validating a call and planning it (nodes, in-degrees, grad() pruning).
- `step`: the per-node step (hooks, staging, the rule) and the final `commit`.
- `sequential`: the reference engine (`backward`, `grad`).
- `blas`, `cost`: BLAS thread limits; the cost model that picks a mode per call.
- `executor` -> `task`: running ready nodes on one thread; one parallel call's state.
- `pool`: persistent worker threads and the calls' ready queues.
- `engine`: `Engine`, the default engines, `backward_parallel`, `grad_parallel`.
"""
