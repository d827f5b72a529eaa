"""The sub callable of paged_attention_worker.py: paged attention in numpy,
compared with what the chip wrote (it runs in a sub worker child, on views of
the shared memory)."""
import numpy as np


def reference(q, kc, vc, table, lens, B, H, D, BS, MB):
    """out[b, h] = softmax(q[b, h] . K^T / sqrt(D)) V over the request's context, K and V gathered
    from the cache blocks its block table names."""
    out = np.zeros((B, H, D))
    kc = kc.reshape(-1, D).astype(np.float64)
    vc = vc.reshape(-1, D).astype(np.float64)
    for b in range(B):
        ctx = int(lens[b])
        rows = np.array([int(table.reshape(B, MB)[b, t // BS]) * BS + t % BS for t in range(ctx)])
        s = q.reshape(B, H, D)[b].astype(np.float64) @ kc[rows].T / np.sqrt(D)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        out[b] = (p / p.sum(axis=1, keepdims=True)) @ vc[rows]
    return out


def check(out, q, kc, vc, table, lens, verdict, B, H, D, BS, MB):
    want = reference(q, kc, vc, table, lens, B, H, D, BS, MB)
    verdict[0] = np.isclose(out.reshape(B, H, D), want, rtol=1e-4, atol=1e-5).sum()
    verdict[1] = want.size
