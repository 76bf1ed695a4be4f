"""References that share no code with portable_rnn: float64 step loops and softmax attention,
a comparison in units of the last place (ulps) of a 16-bit dtype, and where float64 runs."""

import contextlib

import jax
import ml_dtypes
import numpy as np


@contextlib.contextmanager
def float64():
    """`jax.enable_x64`, on the host's CPU devices where the default backend is an accelerator
    (a TPU compiles float64 very slowly or not at all)."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(jax.enable_x64(True))
        if jax.default_backend() != "cpu":
            stack.enter_context(jax.default_device(jax.devices("cpu")[0]))
        yield


# The float32 accuracy a platform's transcendental functions allow, where it is coarser than
# float32 rounding: XLA:TPU's float32 tanh measured a relative error of up to 8.1e-5 against
# float64 (log1p 2.6e-4, exp 5.0e-6; matrix products at 'highest' precision 1.2e-7) on a TPU v5e
# with jax 0.10.2. Float32 results held to float32 rounding elsewhere are held to 4e-4 there.
FLOAT32_FLOOR = {"tpu": 4e-4}


def platform() -> str:
    """The platform computations run on: the default device's (a test marked `cpu` runs on the
    host's CPU on a TPU machine)."""
    device = jax.config.jax_default_device
    return (jax.default_backend() if device is None
            else device if isinstance(device, str) else device.platform)


def float32_tol(tol):
    """`tol`, a float32 result's tolerance, raised to the floor of the platform."""
    return max(tol, FLOAT32_FLOOR.get(platform(), 0.0))


def keeps_excess_precision(dtype) -> bool:
    """Whether the platform's compiler keeps values of `dtype` in float32 between operations,
    dropping roundings that docs/semantics.md places: XLA:TPU for float16, which a TPU has no
    arithmetic for (XLA's ``xla_allow_excess_precision``, on by default, removes a round trip
    float32 -> float16 -> float32). Measured on a TPU v5e: a float32 state 0.76 float16 ulps
    from the rounded loop (bound 3/8), and a state of 1 + 2^-12 read unrounded by the
    recurrent product."""
    return np.dtype(dtype) == np.float16 and platform() == "tpu"


def flat_layers(w, gates, I, H, L, bidirectional, num_heads=1):
    """The documented flat weight layout of a family with `gates` gate blocks, read here: per
    layer and direction W_ih (gates*H, I or D*H) and W_hh (gates*H, H), or with `num_heads` NH
    > 1 (NH, gates*DH, DH) (DH = H / NH), then likewise every b_ih and b_hh (gates*H,). Returns
    (W_ih, W_hh, b_ih, b_hh) per layer and direction."""
    D, G = (2 if bidirectional else 1), gates * H
    W_hh = (G, H) if num_heads == 1 else (num_heads, G // num_heads, H // num_heads)
    offset = 0

    def take(*shape):
        nonlocal offset
        n = int(np.prod(shape))
        offset += n
        return w[offset - n:offset].reshape(shape)

    mats = [(take(G, I if p < D else D * H), take(*W_hh)) for p in range(L * D)]
    biases = [(take(G), take(G)) for _ in range(L * D)]
    assert offset == w.shape[0], (offset, w.shape)
    return [m + b for m, b in zip(mats, biases)]


def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def numpy_lstm(x, h0, c0, W_ih, W_hh, b_ih, b_hh, lengths, num_layers, bidirectional):
    """PyTorch nn.LSTM(batch_first=True) semantics, one step at a time, in float64.

    W_ih etc. are per-pseudo-layer lists ((4H, in), gates i, f, g, o). Returns (y, h_n, c_n).
    """
    x = np.asarray(x, np.float64)
    B, T, _ = x.shape
    D = 2 if bidirectional else 1
    H = np.asarray(W_hh[0]).shape[1]
    h_n = np.array(h0, np.float64)
    c_n = np.array(c0, np.float64)
    inp = x
    for layer in range(num_layers):
        out = np.zeros((B, T, D * H))
        for d in range(D):
            p = layer * D + d
            w_ih, w_hh = np.asarray(W_ih[p], np.float64), np.asarray(W_hh[p], np.float64)
            bias = np.asarray(b_ih[p], np.float64) + np.asarray(b_hh[p], np.float64)
            for b in range(B):
                h, c = h_n[p, b].copy(), c_n[p, b].copy()
                steps = range(int(lengths[b]))
                for t in (reversed(steps) if d else steps):
                    z = w_ih @ inp[b, t] + w_hh @ h + bias
                    i, f, g, o = np.split(z, 4)
                    c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
                    h = _sigmoid(o) * np.tanh(c)
                    out[b, t, d * H:(d + 1) * H] = h
                h_n[p, b], c_n[p, b] = h, c
        inp = out
    return inp, h_n, c_n



def round_to(a, dtype, xp=np):
    """`a` rounded to `dtype` (to nearest, ties to even) and back to `a`'s dtype. With
    ``xp=jax.numpy`` the rounding passes gradients straight through (its derivative is taken as
    1), so autodiff of a rounded loop gives the gradient of the rounded computation."""
    if xp is np:
        a = np.asarray(a)
        return a.astype(dtype).astype(a.dtype)
    from jax import lax
    return a + lax.stop_gradient(a.astype(dtype).astype(a.dtype) - a)


def round_gradient(a, dtype):
    """`a` unchanged; its gradient rounded to `dtype` (to nearest, ties to even) on the way back.
    Around a product's output: the backward that rounds the product's output gradient before
    multiplying it with the operands (a 16-bit backward: bfloat16 on a CPU, as on a GPU)."""
    import jax

    @jax.custom_vjp
    def f(a):
        return a

    f.defvjp(lambda a: (a, None), lambda _, g: (g.astype(dtype).astype(g.dtype),))
    return f(a)


class _Rounding:
    """Where a loop rounds (docs/semantics.md, "Dtypes"): with a 16-bit compute `dtype`, weight
    matrices and every matmul operand to `dtype` (`op`), biases and the float32 states (the
    LSTM's cell state, the GRU's and simple RNN's hidden state) to float32 (`keep`), the LSTM's
    hidden state and every output to `dtype` (`out`). Without one: nowhere. Differentiated
    (`xp` jax.numpy), the backward rounds the gradient of each layer's 16-bit output and of the
    next layer's input after dropout to `dtype` (`cotangent`: a 16-bit array's gradient is
    16-bit, float16's too), and with a `gradient_dtype` each product's output gradient to it
    (`product`)."""

    def __init__(self, dtype, xp, gradient_dtype=None):
        self.product = (lambda a: a) if gradient_dtype is None else (
            lambda a: round_gradient(a, gradient_dtype))
        self.cotangent = (lambda a: a) if dtype is None or xp is np else (
            lambda a: round_gradient(a, dtype))
        if dtype is None:
            self.op = self.keep = self.out = lambda a: a
            return
        self.op = self.out = lambda a: round_to(a, dtype, xp)
        self.keep = lambda a: round_to(a, np.float32, xp)


_EXACT = _Rounding(None, np)


def _family_step(family, nonlinearity, xp, w, x_t, state, rm=None, rnd=_EXACT):
    """One step for a batch: x_t (B, in), states (B, size) each; `rm` (K, B, size): recurrent
    dropout, gate block g of ``W_hh h`` computed from ``h * rm[g]`` (``rm[0]`` if K = 1).
    Returns the new states, rounded to their dtypes by `rnd`."""
    sigmoid = (lambda v: 1.0 / (1.0 + xp.exp(-v)))
    h = state[0]
    if rm is None:
        hw = rnd.product(rnd.op(h) @ w["W_hh"].T)
    else:
        blocks = xp.split(w["W_hh"], rm.shape[0], axis=0)
        hw = rnd.product(xp.concatenate([rnd.op(h * rm[g]) @ wg.T
                                         for g, wg in enumerate(blocks)], axis=-1))
    if family == "lstm":
        h, c = state
        z = rnd.product(x_t @ w["W_ih"].T) + hw + w["b_ih"] + w["b_hh"]
        i, f, g, o = xp.split(z, 4, axis=-1)
        c = rnd.keep(sigmoid(f) * c + sigmoid(i) * xp.tanh(g))
        h = sigmoid(o) * xp.tanh(c)
        return (rnd.out(rnd.product(rnd.op(h) @ w["W_hr"].T) if "W_hr" in w else h), c)
    (h,) = state
    if family == "gru":  # PyTorch nn.GRU: the reset gate multiplies W_hn h + b_hn
        i_r, i_z, i_n = xp.split(rnd.product(x_t @ w["W_ih"].T) + w["b_ih"], 3, axis=-1)
        h_r, h_z, h_n = xp.split(hw + w["b_hh"], 3, axis=-1)
        r, z = sigmoid(i_r + h_r), sigmoid(i_z + h_z)
        n = xp.tanh(i_n + r * h_n)
        return (rnd.keep((1 - z) * n + z * h),)
    pre = rnd.product(x_t @ w["W_ih"].T) + hw + w["b_ih"] + w["b_hh"]
    return (rnd.keep(xp.tanh(pre) if nonlinearity == "tanh" else xp.maximum(pre, 0)),)


def loop_rnn(family, x, state0, groups, lengths, num_layers, bidirectional, *,
             nonlinearity="tanh", xp=np, recurrent_mask=None, dtype=None, dropout=None,
             gradient_dtype=None):
    """PyTorch nn.LSTM / nn.GRU / nn.RNN (batch_first=True) semantics, one step at a time in
    plain Python, every sequence of the batch together: a step at or past a sequence's length
    leaves its state unchanged (so the reverse direction starts at its last valid step).

    `xp` is NumPy (pass float64 arrays for a float64 reference) or `jax.numpy` (differentiable:
    a reference for gradients; its time loop is a `lax.scan` of the same step). `state0` is a
    tuple of (L*D, B, size) arrays ((h,) or (h, c)); `groups` maps W_ih, W_hh, b_ih, b_hh (and
    W_hr) to per-pseudo-layer lists. Returns (y, final states): y zero past each length, states
    at the last valid step. `recurrent_mask` (L*D, K, B, size): recurrent dropout (see
    `_family_step`). `dropout` ``(keep, rate)``: layer ``l < L - 1``'s output is multiplied by
    ``keep[l] / (1 - rate)`` (``keep[l]`` a (B, T, D*size) bool array) before the next layer.

    `dtype`: a 16-bit compute dtype. The loop then rounds exactly where portable_rnn's
    documented semantics round (docs/semantics.md, "Dtypes"), and computes everything else
    exactly (in float64 for float64 arrays): weight matrices and every matmul operand (the
    inputs, each layer's output, the recurrent state, the LSTM's projection input) to `dtype`;
    biases, the LSTM's cell state and the GRU's and simple RNN's hidden state to float32 after
    every step; the LSTM's hidden state and every output to `dtype`. The final states come back
    unrounded to their callers' dtypes (rounding them is the caller's).

    `gradient_dtype` (with ``xp=jax.numpy``): the backward rounds the gradient of every product's
    output (the gate pre-activations' parts, the projection's output) to it before multiplying
    it with the operands, as a bfloat16 backward does (`round_gradient`).
    """
    rnd = _Rounding(dtype, xp, gradient_dtype)
    T = x.shape[1]
    D = 2 if bidirectional else 1
    lengths = np.asarray(lengths)
    groups = {n: {p: (rnd.keep if n.startswith("b_") else rnd.op)(a) for p, a in g.items()}
              for n, g in groups.items()}
    if family == "lstm":
        state0 = (rnd.out(state0[0]), rnd.keep(state0[1]))
    else:
        state0 = (rnd.keep(state0[0]),)
    inp, finals = rnd.op(x), []
    for layer in range(num_layers):
        outs = []
        for d in range(D):
            p = layer * D + d
            w = {n: g[p] for n, g in groups.items()}
            state = tuple(s[p] for s in state0)
            rm = None if recurrent_mask is None else recurrent_mask[p]

            def step(state, inputs, w=w, rm=rm):
                x_t, valid = inputs
                new = _family_step(family, nonlinearity, xp, w, x_t, state, rm, rnd)
                state = tuple(xp.where(valid, n, o) for n, o in zip(new, state))
                return state, xp.where(valid, rnd.out(state[0]), 0 * state[0])

            valid = (np.arange(T)[:, None] < lengths[None, :])[..., None]  # (T, B, 1)
            if xp is np:
                out = [None] * T
                for t in (reversed(range(T)) if d else range(T)):
                    state, out[t] = step(state, (inp[:, t], valid[t]))
                out = np.stack(out, axis=1)
            else:  # one traced step: a loop of T Python steps compiles slowly
                from jax import lax
                state, out = lax.scan(step, state, (xp.swapaxes(inp, 0, 1), valid),
                                      reverse=bool(d))
                out = xp.swapaxes(out, 0, 1)
            outs.append(out)
            finals.append(state)
        inp = next_input(outs, layer, num_layers, dropout, rnd.out, rnd.cotangent, xp)
    return inp, tuple(xp.stack([f[k] for f in finals]) for k in range(len(state0)))


def next_input(outs, layer, num_layers, dropout, out, cotangent, xp):
    """What layer ``layer + 1`` of a stack reads (the stack's output after the last): the
    directions' outputs `outs` side by side, and after every layer but the last, dropout
    ``(keep, rate)``: ``keep[layer] / (1 - rate)``, the scale a 16-bit number in a 16-bit
    product (`out` rounds to the compute dtype). `cotangent` rounds the gradient of the
    layer's output and of the next layer's input (a 16-bit array's gradient is 16-bit)."""
    inp = cotangent(xp.concatenate(outs, axis=-1))
    if dropout is None or layer == num_layers - 1:
        return inp
    keep, rate = dropout
    return cotangent(out(xp.where(keep[layer], inp * out(np.float64(1 / (1 - rate))), 0.0)))


def attention_visibility(B, N, T, S, *, mask=None, is_causal=False, window=None, q_len=None,
                         kv_len=None):
    """(B, N, T, S) bool: which (query, key) pairs attend, from a plain NumPy comparison of
    positions; `mask` broadcastable to (B, N, T, S), `window` (left, right), lengths (B,)."""
    vis = np.ones((B, N, T, S), bool)
    if mask is not None:
        vis &= np.broadcast_to(np.asarray(mask), vis.shape)
    t, s = np.arange(T)[:, None], np.arange(S)[None, :]
    if is_causal:
        vis &= s <= t
    if window is not None:
        vis &= (s >= t - window[0]) & (s <= t + window[1])
    for b in range(B):
        if q_len is not None:
            vis[b, :, int(q_len[b]):, :] = False
        if kv_len is not None:
            vis[b, :, :, int(kv_len[b]):] = False
    return vis


def attention(q, k, v, bias=None, *, scale, visibility, xp=np):
    """``softmax(q k^T * scale + bias) v`` per head over the visible keys, computed exactly in
    the arrays' dtype (float64 arrays: a float64 reference); a query that sees no key gives 0.

    q (B, T, N, H); k, v (B, S, K, H), each key/value head serving N / K query heads (GQA);
    `bias` broadcastable to (B, N, T, S); `visibility` (B, N, T, S) bool, from
    `attention_visibility`. With ``xp=jax.numpy`` it is differentiable (finite gradients for
    queries that see no key).
    """
    N, K = q.shape[2], k.shape[2]
    p = attention_weights(q, k, bias, scale=scale, visibility=visibility, xp=xp)
    return xp.einsum("bnts,bsnh->btnh", p, xp.repeat(v, N // K, axis=2))


def attention_weights(q, k, bias=None, *, scale, visibility, xp=np):
    """`attention`'s softmax weights, (B, N, T, S): 0 for a hidden key, and a query that sees
    no key has none."""
    N, K = q.shape[2], k.shape[2]
    logits = xp.einsum("btnh,bsnh->bnts", q, xp.repeat(k, N // K, axis=2)) * scale
    if bias is not None:
        logits = logits + bias
    logits = xp.where(visibility, logits, 0 * logits)  # hidden logits reach nothing
    top = xp.max(xp.where(visibility, logits, -np.inf), axis=-1, keepdims=True)
    top = xp.where(visibility.any(-1, keepdims=True), top, 0.0)
    if xp is not np:
        from jax import lax
        top = lax.stop_gradient(top)
    e = xp.where(visibility, xp.exp(xp.where(visibility, logits - top, 0.0)), 0.0)
    total = xp.sum(e, axis=-1, keepdims=True)
    return e / xp.where(total > 0, total, 1 + 0 * total)


# --- comparing 16-bit results with a reference, in units in the last place --------------------

# Bounds for 16-bit results against an exact reference rounded where the semantics round,
# in ulps of the 16-bit dtype (tests/test_low_precision.py says how they were measured):
# recurrent outputs and gradients at the array's largest magnitude; float32 states (the LSTM's
# cell state, a float32 GRU or RNN carry) likewise, 3/8 ulp; attention elementwise, with
# magnitudes below 1/8 of the array's largest taken as 1/8 of it.
RECURRENT_ULPS = 2.0
FLOAT32_STATE_ULPS = 0.375
ATTENTION_ULPS = 2.0
ATTENTION_FLOOR = 1 / 8


def state_ulps(dtype) -> float:
    """The bound of a float32 state of a `dtype` call: `FLOAT32_STATE_ULPS`, or the outputs'
    bound where the platform drops the roundings of `dtype` (`keeps_excess_precision`)."""
    return RECURRENT_ULPS if keeps_excess_precision(dtype) else FLOAT32_STATE_ULPS


def attention_ulps() -> float:
    """The bound of 16-bit attention: `ATTENTION_ULPS`, two more on a TPU, whose compiler keeps
    16-bit intermediates in float32 where it drops a round trip (a TPU v5e has no 16-bit vector
    arithmetic): measured there, a bfloat16 dk 2.5 ulps from the rounded reference, and float16
    dq and dk of the xla path 3 and 3.5 ulps from jax.nn's rounded float32 result."""
    return ATTENTION_ULPS + (2.0 if platform() == "tpu" else 0.0)


def spacing(dtype, magnitude):
    """The distance between neighbouring numbers of `dtype` at `magnitude` (> 0): its ulp."""
    info = ml_dtypes.finfo(dtype)
    exponent = np.floor(np.log2(np.maximum(magnitude, float(info.tiny))))
    return 2.0 ** (exponent - info.nmant)


def ulp_error(got, want, dtype, floor=1.0, scale=None, terms=None):
    """max |got - want| in ulps of `dtype` at max(|want|, floor * scale, terms), elementwise;
    `scale` defaults to max |want|; `terms` (broadcastable to `want`), where given, is the
    magnitude of the terms each element sums (`attention_gradient_terms`)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if not want.size:
        return 0.0
    scale = float(np.max(np.abs(want))) if scale is None else scale
    if scale == 0:
        return float(np.max(np.abs(got))) and np.inf
    at = np.maximum(np.abs(want), floor * scale)
    if terms is not None:
        at = np.maximum(at, np.asarray(terms, np.float64))
    return float(np.max(np.abs(got - want) / spacing(dtype, at)))


def assert_ulps(got, want, dtype, ulps, what, floor=1.0, scale=None, terms=None):
    assert np.shape(got) == np.shape(want), what
    assert np.isfinite(np.asarray(got, np.float32)).all(), what
    err = ulp_error(got, want, dtype, floor, scale, terms)
    assert err <= ulps, f"{what}: {err:.3g} ulps of {np.dtype(dtype).name} (bound {ulps})"


def attention_gradient_terms(q, k, v, bias=None, *, cot, scale, visibility, of_dp=False):
    """The magnitude of the terms each element of `attention`'s gradients sums, in float64:
    ``sum_s |ds| |k| * scale`` for dq (ds = p (dp - sum_s p dp), dp = cot v^T), ``sum_t |ds| |q|
    * scale`` for dk, ``sum_t p |cot|`` for dv, ``sum |ds|`` over the broadcast axes for dbias;
    (dq, dk, dv, dbias or None). A kernel that rounds ds or p to 16 bits before its products
    (JAX's Pallas attention kernels do) errs by up to an ulp of these, which is many ulps of a
    gradient whose terms cancel.

    With `of_dp`, |ds| is replaced by the magnitude of the terms ds itself sums, ``p |dp| + p
    sum_s p |dp|``: a program that rounds dp to 16 bits in one of its two uses and not in the
    other errs by up to an ulp of those (they cancel to 0 where a query sees one key)."""
    N, K = q.shape[2], k.shape[2]
    kr, vr = np.repeat(k, N // K, axis=2), np.repeat(v, N // K, axis=2)
    p = attention_weights(q, k, bias, scale=scale, visibility=visibility)
    dp = np.einsum("btnh,bsnh->bnts", cot, vr)
    if of_dp:
        ds = p * (np.abs(dp) + np.sum(p * np.abs(dp), axis=-1, keepdims=True))
    else:
        ds = np.abs(p * (dp - np.sum(p * dp, axis=-1, keepdims=True)))
    B, S = k.shape[:2]
    per_group = lambda a: a.reshape(B, S, K, N // K, -1).sum(3)  # noqa: E731
    dq = np.einsum("bnts,bsnh->btnh", ds, np.abs(kr)) * scale
    dk = per_group(np.einsum("bnts,btnh->bsnh", ds, np.abs(q)) * scale)
    dv = per_group(np.einsum("bnts,btnh->bsnh", p, np.abs(cot)))
    if bias is None:
        return dq, dk, dv, None
    shape = np.shape(bias)
    axes = tuple(i for i, n in enumerate((1,) * (4 - len(shape)) + shape) if n == 1)
    return dq, dk, dv, ds.sum(axis=axes, keepdims=True).reshape(shape)


def assert_within_terms(want, terms, what):
    """The exact gradient `want` is at most the magnitude of the terms it sums (`terms`, from
    `attention_gradient_terms`): the triangle inequality, which a terms function that comes
    out too small breaks."""
    assert (np.abs(want) <= terms * (1 + 1e-9)).all(), f"{what}: a sum exceeds its terms' magnitude"


def gradient_scale(want, largest):
    """The magnitude an attention gradient's errors are measured at (`ulp_error`'s `scale`):
    its own largest, or, if more, the call's largest gradient (`largest`, over dq, dk, dv).
    A gradient that is 0 or small in exact arithmetic (dq of a query that sees one key) is still
    a sum of terms of the call's magnitude, computed in float32: its rounding is measured
    against them, not against itself."""
    return max(float(np.max(np.abs(np.asarray(want, np.float64)), initial=0)), largest)


def kernel_dots(fn, *args):
    """(operand dtypes, precision) of every dot inside a ``pallas_call`` of `fn`'s program:
    what Mosaic is asked to contract on a TPU."""
    found = []

    def walk(jaxpr, inside):
        for eqn in jaxpr.eqns:
            here = inside or eqn.primitive.name == "pallas_call"
            if here and eqn.primitive.name == "dot_general":
                found.append((tuple(str(v.aval.dtype) for v in eqn.invars),
                              eqn.params.get("precision")))
            for value in eqn.params.values():
                for sub in value if isinstance(value, (tuple, list)) else (value,):
                    sub = getattr(sub, "jaxpr", sub)
                    if hasattr(sub, "eqns"):
                        walk(sub, here)

    walk(jax.make_jaxpr(fn)(*args).jaxpr, False)
    return found


def assert_bfloat16_kernel_dots_at_default(fn, *args):
    """Mosaic contracts bfloat16 operands at DEFAULT precision only ("Bad lhs type" at
    HIGHEST, on a TPU v5e): every such dot in `fn`'s kernels must ask for no other."""
    dots = kernel_dots(fn, *args)
    assert dots, "no dot inside a pallas_call"
    bf16 = [(d, p) for d, p in dots if "bfloat16" in d]
    assert bf16, f"no bfloat16 dot inside a pallas_call: {dots}"
    default = (None, (jax.lax.Precision.DEFAULT, jax.lax.Precision.DEFAULT))
    assert all(p in default for _, p in bf16), f"bfloat16 kernel dots at {set(bf16)}"
