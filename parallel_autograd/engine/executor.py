"""Running the ready nodes of a parallel call on one thread.

`execute(task, first)` runs item `first` and, depth-first, every cheap node that
becomes ready on this thread; heavy ready nodes go to the pool's queue for this call
(`WorkerPool.submit`), except one kept for this thread when it has nothing else to
do. After each node, its input gradients are fanned out to their consumers through
the call's accumulation strategy (`task.acc.fanout`: engine/strategy.py).

Errors are recorded on the task (`GraphTask.fail`), which every thread of the call
polls every 8 nodes. This module changes the task's state only through its methods.

Thread safety: any number of threads may run `execute` on one task at once.
"""
from __future__ import annotations

import time

from .step import Sink, annotate, run_node


def execute(task, first: list) -> None:
    """Run ready item `first` ([node, grad, owned]; its grad is taken out of the list)
    and what it makes ready on this thread. The caller brackets it (`GraphTask.run`).

    With `task.share_cheap` (no GIL: small kernels do overlap), this thread gives
    away the oldest cheap node on its stack when it has more than one
    (`GraphTask.give_away`), and when its stack is empty takes work from
    `task.shared` before returning.
    """
    sink = Sink(task.plan, task.profile, task.calls)
    stack = [(first[0], first[1], first[2])]  # cheap ready nodes, run depth-first
    first[1] = None
    heavy = None  # one heavy ready node kept for this thread
    acc, share, shared = task.acc, task.share_cheap, task.shared
    keyed, fanout = acc.keyed, acc.fanout
    t_start = time.perf_counter()
    ran = runs = absorbed = 0
    try:
        while True:
            if stack and runs and acc.full:
                yield_to_queue(task, stack)  # `runs`: the item it was given always runs
                if heavy is None:
                    break
            if stack:
                node, g, owned = stack.pop()
            elif heavy is not None:
                (node, g, owned), heavy = heavy, None
            elif share and shared:
                try:
                    node, g, owned = shared.popleft()
                except IndexError:  # another thread took it first
                    break
                absorbed += 1
            else:
                break
            if not runs & 7 and task.error is not None:  # not every node: a shared read
                break  # the call failed: drop the rest of this thread's local work
            runs += 1
            ready = stack if keyed else []  # keyed: every node is cheap
            try:
                grads = None
                if g is not None:  # else nothing flowed here: pass "no gradient" on
                    grads = run_node(node, g, owned, sink)
                    ran += grads is not None
                g = None  # drop our reference now: lowers the peak
                fanout(node, grads, ready)
                grads = None
            except BaseException as e:
                annotate(e, node)
                task.fail(e)
                break
            if not keyed:
                heavy = dispatch(task, ready, stack, heavy)
            ready = None
            if share and len(stack) > 1:
                task.give_away(stack)
    finally:
        task.merge(sink, ran, runs, absorbed, time.perf_counter() - t_start)


def yield_to_queue(task, stack: list) -> None:
    """Backpressure for work this thread would run on its own: too many contributions
    are parked, so its cheap ready items go to the call's queue, where no thread starts
    one while another runs the call (`GraphTask.throttled`) and the highest-seq one (the
    contribution the parked ones wait for) comes first. (The one heavy item a thread
    keeps is bounded already: one per thread.)"""
    submit = task.pool.submit
    while stack:
        submit(task, *stack.pop())


def dispatch(task, ready: list, stack: list, heavy):
    """Cheap ready items onto this thread's `stack`, heavy ones to the pool; returns
    the heavy item this thread keeps (it keeps one when it has nothing else to do)."""
    inline_below = task.inline_below
    hand_off = None
    for item in ready:
        nxt = item[0]
        if item[1] is None or nxt.variable is not None or nxt.cost < inline_below:
            stack.append(item)
        elif hand_off is None:
            hand_off = [item]
        else:
            hand_off.append(item)
    if hand_off is not None:
        if heavy is None and not stack:
            heavy = hand_off.pop(0)
        submit = task.pool.submit
        for item in hand_off:
            submit(task, *item)
    return heavy
