"""Which messages a placement makes: computed once per simulation, before any event."""

from __future__ import annotations


def messages(place: list[int], par, chi):
    """What each op sends: its output once per remote device (the largest edge tensor there), and its
    backward's gradients summed per remote device; its local consumers; the gradients it makes and takes."""
    n = len(place)
    # Where each op's output goes: {remote device: largest edge bytes}; local consumers.
    fwd_dest: list[dict[int, float]] = []
    local_children: list[list[int]] = []
    for i in range(n):
        dests: dict[int, float] = {}
        loc = []
        for ch, b, _ in chi[i]:
            if place[ch] == place[i]:
                loc.append(ch)
            else:
                dests[place[ch]] = max(dests.get(place[ch], 0.0), b)
        fwd_dest.append(dests)
        local_children.append(loc)
    # Gradients a backward sends: {remote device: summed bytes}; an all-zero message
    # (gradients nobody needs) is not sent, its receivers are released at once.
    bwd_dest: list[dict[int, float]] = []
    grad_out = [0.0] * n  # all input gradients a backward produces
    grad_in = [0.0] * n  # all output gradients a backward consumes
    for i in range(n):
        dests: dict[int, float] = {}
        for p, _, g in par[i]:
            grad_out[i] += g
            if place[p] != place[i]:
                dests[place[p]] = dests.get(place[p], 0.0) + g
        bwd_dest.append(dests)
        grad_in[i] = sum(g for _, _, g in chi[i])
    return fwd_dest, local_children, bwd_dest, grad_out, grad_in
