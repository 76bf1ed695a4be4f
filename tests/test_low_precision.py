"""16-bit results against a float64 reference that rounds where the documented semantics round.

docs/semantics.md ("Dtypes") says what a 16-bit call computes: weight matrices and every matmul
operand rounded to the compute dtype, float32 accumulation, the state (the LSTM's cell state,
the GRU's and simple RNN's hidden state) kept in float32 between steps, outputs in the compute
dtype. `references.loop_rnn(..., dtype=...)` rounds exactly there and computes everything else
in float64; `references.attention` is exact float64 softmax attention of the 16-bit operands.
With gradients, the reference is JAX's autodiff of the same float64 loop, its roundings taken
as the identity (straight-through): the gradient of the rounded computation.

Bounds, in units of the compute dtype's last place (`ulps`), measured before they were chosen
(every cell, bfloat16 and float16, T = 8, 64, 256, B = 4, H = 32, L = 2, bidirectional,
ragged with a length 0; attention up to T = S = 256, GQA, masks, lengths) and then run with the
`thorough` profile (100 draws per property) under several seeds:

- recurrent outputs and gradients: at most 1.0 ulp of the array's largest magnitude
  (`scale`); the bound is 2. A bfloat16 backward rounds the gradients of the products' outputs
  (the gate pre-activations, the projection) to bfloat16 before multiplying them with the
  operands, as on a GPU; the gradient of each layer's 16-bit output and of the next layer's
  16-bit input (after dropout) is 16-bit in either dtype: the reference's backward rounds
  there too. (Without the first, a gradient that is a sum which cancels, dh_0 of one sequence
  with P = 1 at 1/150 of dx, was 3 ulps of itself off; without the second, an sLSTM's dh_0
  behind dropout was 3 ulps of its array's largest, and float16 gradients of two layers
  behind dropout a median 0.75 ulps off over 16 draws, 0.25 with it.)
  Elementwise, small values differ by more of their own ulps (up to 5.5 for a float16 tanh RNN
  at T = 256): each side rounds every step, and a last-bit
  difference between float32 and float64 arithmetic flips a rounding now and then, whose
  effect the recurrence carries on. A uniform 2% error is 2.6-5.1 bfloat16 ulps (20 float16
  ulps) at the largest magnitude: caught.
- float32 states (the cell state, a float32 GRU or RNN carry): at most 0.11 ulps of the
  compute dtype in the first measurements, up to 0.31 in a later draw (a float16 tanh RNN,
  L = 2, bidirectional: 0.20 in the first layer, 0.31 in the second, which reads the first's
  16-bit outputs: last-bit flips of the 16-bit roundings pass on); the bound is 3/8 (1/2
  missed the GRU's state rounded to 16 bits). A state rounded to 16 bits at any step is off by
  up to 1/2 ulp there. Their gradients flow through every step's 16-bit matmul operands:
  measured up to 0.29 ulps, held to the bound of the other gradients.
- attention outputs and gradients: at most 1.0 ulp elementwise, with magnitudes below 1/8 of
  the array's largest taken as 1/8 of it (`floor`); the bound is 2. On a CPU every 16-bit
  product is exact in float32 and only the result is rounded (docs/mixed-precision.md). A
  gradient is measured at least at the call's largest gradient (`references.gradient_scale`: a
  dq that is 0 in exact arithmetic is float32 noise of terms that size). A bias
  gradient summed over broadcast copies is measured at the largest copy's gradient; on the
  cuDNN route with a mask each copy's gradient is rounded to 16 bits by cuDNN before the
  (float32) sum, which adds 1/2 ulp per copy to its bound. (Before the route widened the bias
  itself, JAX summed those copies in 16 bits: 5 bfloat16 ulps for 4 heads.)
"""

import draws
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import family_helpers as fam
import portable_rnn
import references
from cudnn_emulation import emulated_cudnn_attention
from jaxpr_helpers import binds, trace
from references import assert_ulps

GPU = portable_rnn.Capabilities("gpu", 90800, (9, 0), "NVIDIA H100")
RECURRENT_ULPS = references.RECURRENT_ULPS
FLOAT32_STATE_ULPS = references.FLOAT32_STATE_ULPS
ATTENTION_ULPS = references.attention_ulps()
ATTENTION_FLOOR = references.ATTENTION_FLOOR
DTYPES = {"bfloat16": jnp.bfloat16, "float16": jnp.float16}


def _as(dtype):
    return lambda a: np.asarray(np.asarray(a, np.float64).astype(dtype), np.float64)


# --- the recurrent family ----------------------------------------------------------------------

@st.composite
def low_precision_cases(draw):
    """Every cell in bfloat16 and float16; half the draws long (T 48-96) and wide (H 32-40),
    the rest small; ragged lengths from 0; float32 or 16-bit carries and weights; dropout
    between layers."""
    kind = draw(st.sampled_from(fam.ALL_KINDS))
    dtype = draw(st.sampled_from(sorted(DTYPES)))
    large = draw(st.booleans())
    B = draw(st.integers(1, 3))
    T = draw(st.integers(48, 96) if large else st.integers(1, 8))
    I = draw(st.integers(1, 24))
    H = draw(st.integers(32, 40) if large else st.integers(2, 8))
    P = draw(st.integers(1, H - 1)) if kind == "lstm_proj" else 0
    L = draw(st.integers(1, 2))
    bidir = draw(st.booleans())
    lengths = draw(st.lists(st.integers(0, T), min_size=B, max_size=B))
    return dict(kind=kind, dtype=dtype, B=B, T=T, I=I, H=H, P=P, L=L, bidir=bidir,
                lengths=lengths, float32_carry=draw(st.booleans()),
                float32_weights=draw(st.booleans()),
                dropout=draw(st.sampled_from([0.0, 0.25])), seed=draw(st.integers(0, 2**16)))


def _case(kind, dtype, B, T, I, H, L, bidir, lengths, P=0, dropout=0.0, f32=True, seed=0):
    return dict(kind=kind, dtype=dtype, B=B, T=T, I=I, H=H, P=P, L=L, bidir=bidir,
                lengths=lengths, float32_carry=f32, float32_weights=f32, dropout=dropout,
                seed=seed)


def _inputs(c):
    dt = DTYPES[c["dtype"]]
    x, states, w = fam.make_inputs(c["kind"], c["B"], c["T"], c["I"], c["H"], c["P"], c["L"],
                                   c["bidir"], c["seed"])
    carry = jnp.float32 if c["float32_carry"] else dt
    # h in the compute dtype, the float32 state (the LSTM's c, the GRU's and RNN's h) in `carry`
    if fam.FAMILY[c["kind"]] == "lstm":
        states = (states[0].astype(dt), states[1].astype(carry))
    else:
        states = (states[0].astype(carry),)
    return x.astype(dt), states, (w if c["float32_weights"] else w.astype(dt))


def _ours(c, key):
    lengths = np.asarray(c["lengths"], np.int32)
    rng = key if c["dropout"] else None

    def f(x, states, w):
        y, finals = fam.call(c["kind"], x, states, w, lengths, c["I"], c["H"], c["P"], c["L"],
                             c["bidir"], dropout=c["dropout"], dropout_rng=rng)
        return (y, *finals)
    return f


def _masks(c, key):
    """The documented dropout masks (drawn outside x64, which would change the draws)."""
    if not (c["dropout"] and c["L"] > 1):
        return None
    width = (2 if c["bidir"] else 1) * (c["P"] or c["H"])
    return fam.dropout_masks(key, c["dropout"], c["L"], c["B"], c["T"], width), c["dropout"]


def _reference(c, dropout, xp):
    """The rounded float64 loop; with xp=jnp under x64, differentiable."""
    dt = DTYPES[c["dtype"]]
    lengths = np.asarray(c["lengths"], np.int32)

    def f(x, states, w):
        if xp is jnp:
            x, w = x.astype(jnp.float64), w.astype(jnp.float64)
            states = tuple(s.astype(jnp.float64) for s in states)
        y, finals = fam.reference(c["kind"], x, states, w, lengths, c["I"], c["H"], c["P"],
                                  c["L"], c["bidir"], xp=xp, dtype=dt, dropout=dropout,
                                  gradient_dtype=_gradient_dtype(c) if xp is jnp else None)
        return (y, *finals)
    return f


def _gradient_dtype(c):
    """Where the backward rounds the products' output gradients (`references.round_gradient`):
    bfloat16's, to bfloat16, as on a GPU; float16's stay in float32 on a CPU
    (docs/mixed-precision.md)."""
    return jnp.bfloat16 if c["dtype"] == "bfloat16" else None


def _float32_state(c, name, dtype):
    """Whether output `name` is a float32 state: the LSTM's cell state, the GRU's and simple
    RNN's hidden state, passed (and so returned) in float32. (Their gradients pass through the
    16-bit operands of every step's matmuls: they are held to RECURRENT_ULPS.)"""
    lstm = fam.FAMILY[c["kind"]] == "lstm"
    return dtype == jnp.float32 and name == ("c_n" if lstm else "h_n")


@settings(max_examples=max(1, settings.default.max_examples // 3))
@given(low_precision_cases())
@example(_case("lstm", "bfloat16", 4, 256, 16, 32, 1, False, [256, 255, 0, 128]))
@example(_case("gru", "float16", 3, 256, 8, 32, 1, True, [256, 0, 97]))
@example(_case("rnn_tanh", "float16", 2, 64, 8, 32, 2, True, [0, 64], dropout=0.25, f32=False))
@example(_case("rnn_relu", "bfloat16", 3, 32, 5, 32, 2, False, [32, 1, 17], f32=False))
@example(_case("lstm_proj", "bfloat16", 2, 48, 12, 36, 2, True, [48, 20], P=9, dropout=0.25))
@example(_case("lstm_proj", "bfloat16", 1, 48, 6, 32, 1, False, [4], P=1, f32=False))
@example(_case("lstm_proj", "bfloat16", 1, 48, 3, 32, 2, False, [5], P=3, f32=False, seed=1))
@example({**_case("rnn_tanh", "float16", 2, 48, 7, 40, 2, True, [1, 9], seed=1),
          "float32_weights": False})
def test_family_16_bit_equals_the_rounded_float64_loop(c):
    """Outputs, final states and the gradients of inputs, initial states and weights."""
    dt = DTYPES[c["dtype"]]
    key = jax.random.key(c["seed"] + 1)
    x, states, w = _inputs(c)
    ours = _ours(c, key)
    got = jax.jit(ours)(x, states, w)
    masks = _masks(c, key)
    want = _reference(c, masks, np)(x, states, w)
    for g, r, name, dtype in zip(got, want, ["y", "h_n", "c_n"], [dt, *(s.dtype for s in states)]):
        assert g.dtype == dtype, name
        ulps = (references.state_ulps(dt) if _float32_state(c, name, g.dtype)
                else RECURRENT_ULPS)
        assert_ulps(g, _as(g.dtype)(r), dt, ulps, f"{c['kind']} {name}")

    # Gradients: cotangents in each output's dtype, as JAX hands them to a 16-bit output.
    cot = [np.asarray(draws.normal(jax.random.key(c["seed"] + 2 + i), g.shape), np.float32)
           for i, g in enumerate(got)]
    cot = [np.asarray(ct.astype(g.dtype), np.float32) for ct, g in zip(cot, got)]

    def loss(f, rounded):
        def weighted(x, states, w):
            outs = f(x, states, w)
            if rounded:  # the reference's outputs rounded to their dtypes, straight through
                outs = [references.round_to(o, g.dtype, jnp) for o, g in zip(outs, got)]
            dtype = jnp.float64 if rounded else jnp.float32
            return sum(jnp.sum(o.astype(dtype) * jnp.asarray(ct, dtype))
                       for o, ct in zip(outs, cot))
        return weighted

    grads = jax.jit(jax.grad(loss(ours, False), (0, 1, 2)))(x, states, w)
    with references.float64():
        ref = jax.jit(jax.grad(loss(_reference(c, masks, jnp), True), (0, 1, 2)))(x, states, w)
        ref = jax.tree.map(np.asarray, ref)
    names = ["dx", *("d" + n + "_0" for n in ("h", "c")[:len(states)]), "dweights"]
    for g, r, name in zip(jax.tree.leaves(grads), jax.tree.leaves(ref), names):
        ulps = (references.state_ulps(dt) if _float32_state(c, name, g.dtype)
                else RECURRENT_ULPS)
        assert_ulps(g, _as(g.dtype)(r), dt, ulps, f"{c['kind']} {name}")


def _scan_carries(jaxpr):
    """The dtypes of what every `scan` of a traced program carries from step to step: its
    outputs but the stacked ones (which have its `length` in front). Read from the outputs:
    the parameters that count the carries differ between JAX releases."""
    out = []
    for eqn in binds(jaxpr, "scan"):
        steps = eqn.params["length"]
        out.append(sorted(str(v.aval.dtype) for v in eqn.outvars if v.aval.shape[:1] != (steps,)))
    return out


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("kind", fam.ALL_KINDS)
def test_the_traced_loop_carries_the_documented_state_dtypes(kind, dtype):
    """In the program itself: the LSTM carries h in the compute dtype and c in float32; the GRU
    and the simple RNN carry their hidden state in float32, whatever dtype h_0 has."""
    c = _case(kind, dtype, 2, 5, 3, 4, 1, False, [5, 2], P=2 if kind == "lstm_proj" else 0,
              f32=False)
    x, states, w = _inputs(c)
    carries = _scan_carries(trace(_ours(c, None), x, states, w))
    want = sorted([dtype, "float32"] if fam.FAMILY[kind] == "lstm" else ["float32"])
    assert carries == [want], carries  # one loop: one layer, one direction


# --- attention ---------------------------------------------------------------------------------

@st.composite
def attention_16_bit_cases(draw):
    """bfloat16 and float16; GQA; bias, boolean mask, causal, windows and lengths (0 included);
    half the draws long (T, S 64-160)."""
    large = draw(st.booleans())
    length = st.integers(64, 160) if large else st.integers(1, 12)
    B, T, S = draw(st.integers(1, 2)), draw(length), draw(length)
    K = draw(st.integers(1, 2))
    N = K * draw(st.integers(1, 3))
    dims = lambda: tuple(draw(st.sampled_from([1, n])) for n in (B, N, T, S))  # noqa: E731
    optional = lambda s: draw(st.one_of(st.none(), s))  # noqa: E731
    return dict(dtype=draw(st.sampled_from(sorted(DTYPES))), B=B, T=T, S=S, N=N, K=K,
                H=draw(st.sampled_from([8, 16, 32])), is_causal=draw(st.booleans()),
                window=optional(st.tuples(st.integers(0, 8), st.integers(0, 8))),
                bias=optional(st.builds(dims)), mask=optional(st.builds(dims)),
                q_len=optional(st.lists(st.integers(0, T), min_size=B, max_size=B)),
                kv_len=optional(st.lists(st.integers(0, S), min_size=B, max_size=B)),
                seed=draw(st.integers(0, 2**16)))


def _attention_case(dtype, B, T, S, N, K, H, **kw):
    c = dict(dtype=dtype, B=B, T=T, S=S, N=N, K=K, H=H, is_causal=False, window=None,
             bias=None, mask=None, q_len=None, kv_len=None, seed=0)
    c.update(kw)
    return c


def _attention_inputs(c):
    dt = DTYPES[c["dtype"]]
    ks = jax.random.split(jax.random.key(c["seed"]), 5)
    B, T, S, N, K, H = (c[n] for n in "BTSNKH")
    q = draws.normal(ks[0], (B, T, N, H), dt)
    k = draws.normal(ks[1], (B, S, K, H), dt)
    v = draws.normal(ks[2], (B, S, K, H), dt)
    bias = None if c["bias"] is None else draws.normal(ks[3], c["bias"], dt)
    mask = None if c["mask"] is None else np.asarray(draws.bernoulli(ks[4], 0.75,
                                                                     c["mask"]))
    lengths = {n: None if c[n] is None else np.asarray(c[n], np.int32)
               for n in ("q_len", "kv_len")}
    vis = references.attention_visibility(B, N, T, S, mask=mask, is_causal=c["is_causal"],
                                          window=c["window"], **lengths)
    return (q, k, v, bias), mask, lengths, vis


def _attention_check(c, impl, capabilities=None):
    dt = DTYPES[c["dtype"]]
    (q, k, v, bias), mask, lengths, vis = _attention_inputs(c)
    scale = 1 / np.sqrt(c["H"])

    def ours(q, k, v, bias):
        return portable_rnn.dot_product_attention(
            q, k, v, bias, mask, is_causal=c["is_causal"], local_window_size=c["window"],
            query_seq_lengths=lengths["q_len"], key_value_seq_lengths=lengths["kv_len"],
            implementation=impl, capabilities=capabilities)

    def reference(q, k, v, bias, xp):
        return references.attention(q, k, v, bias, scale=scale, visibility=vis, xp=xp)

    args = (q, k, v, bias)
    argnums = (0, 1, 2, 3) if bias is not None else (0, 1, 2)
    out = jax.jit(ours)(*args)
    assert out.dtype == dt
    as64 = [None if a is None else np.asarray(a, np.float64) for a in args]
    want = reference(*as64, np)
    assert_ulps(out, _as(dt)(want), dt, ATTENTION_ULPS, f"{impl} output", ATTENTION_FLOOR)
    rows = vis.any(-1).transpose(0, 2, 1)  # (B, T, N)
    assert not np.asarray(out, np.float32)[~rows].any(), "a query that sees no key gives 0"

    cot = np.asarray(draws.normal(jax.random.key(c["seed"] + 1), out.shape).astype(dt),
                     np.float32)
    grads = jax.jit(jax.grad(lambda *a: jnp.sum(ours(*a).astype(jnp.float32) * cot),
                             argnums))(*args)
    # A bias broadcast over some of (B, N, T, S) gets the sum of the gradients of its copies,
    # which can cancel (one constant over the keys has gradient 0: softmax ignores it). Its
    # error is measured against the largest copy's gradient: `terms`, the reference gradient
    # of the bias broadcast to `wide`, the shape the summed gradients have.
    B, T, S, N = (c[n] for n in "BTSN")
    wide = (B, N, T, S)
    ulps = {name: ATTENTION_ULPS for name in ("dq", "dk", "dv", "dbias")}
    if impl == "cudnn" and mask is not None and bias is not None:
        # The route widens the bias to the mask's batch and heads (JAX would add the mask to it
        # in 16 bits), and cuDNN returns the widened bias's gradient in 16 bits: each copy
        # summed back (in float32) is rounded, 1/2 ulp each.
        wide = tuple(max(a, b) for a, b in zip(bias.shape[:2], mask.shape[:2])) + (T, S)
        ulps["dbias"] += np.prod(wide[:2]) / np.prod(bias.shape[:2]) / 2
    with references.float64():
        loss = lambda *a: jnp.sum(references.round_to(reference(*a, jnp), dt, jnp)  # noqa: E731
                                  * cot.astype(np.float64))
        f64 = [None if a is None else jnp.asarray(a) for a in as64]
        ref = [np.asarray(r) for r in jax.jit(jax.grad(loss, argnums))(*f64)]
        terms = {}
        if bias is not None:
            widened = jnp.broadcast_to(f64[3], wide)
            terms["dbias"] = float(jnp.max(jnp.abs(jax.jit(jax.grad(loss, 3))(
                *f64[:3], widened))))
    largest = max(float(np.max(np.abs(r), initial=0)) for r in ref[:3])
    of_dp = [None] * 4
    if impl == "xla" and references.platform() == "tpu":
        # XLA:TPU keeps dp = cot v^T (the gradient of the probabilities, cast to 16 bits for
        # their product with v) unrounded in some fusions and rounds it in others (its
        # `xla_allow_excess_precision`): ds = p (dp - sum p dp) then errs by up to an ulp of the
        # terms it sums, which cancel where a query sees one key (measured on a TPU v5e: dq
        # 7.06 ulps of the call's largest gradient where each query sees only its own key;
        # within the bound with that flag off).
        dq, dk, _, dbias = references.attention_gradient_terms(
            *as64, cot=cot.astype(np.float64), scale=scale, visibility=vis, of_dp=True)
        of_dp = [dq, dk, None, dbias]  # dv = p^T cot reads no dp
        for name, r, m in zip(["dq", "dk", "dv", "dbias"], ref, of_dp):
            if m is not None:
                references.assert_within_terms(r, m, name)
    for g, r, m, name in zip(grads, ref, of_dp, ["dq", "dk", "dv", "dbias"]):
        assert g.dtype == dt, name
        at = terms[name] if name in terms else references.gradient_scale(r, largest)
        assert_ulps(g, _as(dt)(r), dt, ulps[name], f"{impl} {name}", ATTENTION_FLOOR, at, m)


@settings(max_examples=max(2, settings.default.max_examples // 2))
@given(attention_16_bit_cases(), st.sampled_from(["xla", "chunked"]))
@example(_attention_case("bfloat16", 2, 256, 200, 4, 2, 32, bias=(1, 4, 256, 200),
                         mask=(2, 1, 256, 200), q_len=[256, 100], kv_len=[200, 0]), "chunked")
@example(_attention_case("float16", 1, 256, 256, 2, 2, 64, is_causal=True, window=(32, 0)),
         "xla")
@example(_attention_case("bfloat16", 2, 9, 7, 6, 2, 8, kv_len=[0, 7], q_len=[9, 3],
                         is_causal=True), "xla")
@example(_attention_case("bfloat16", 1, 64, 64, 1, 1, 8, window=(0, 0)), "xla")
def test_attention_16_bit_equals_float64_softmax_attention(c, impl):
    _attention_check(c, impl)


@settings(max_examples=max(2, settings.default.max_examples // 3))
@given(attention_16_bit_cases())
@example(_attention_case("bfloat16", 2, 128, 128, 4, 2, 64, is_causal=True,
                         q_len=[128, 50], kv_len=[128, 0]))
def test_cudnn_attention_route_16_bit_equals_float64_softmax_attention(c):
    """The cuDNN route (emulated: JAX's own cuDNN functions over a float32 lowering) is held to
    the same reference; only calls it serves (head dim a multiple of 8, a left window with
    causal masking, even lengths with a bias)."""
    c = dict(c, T=c["T"] + c["T"] % 2, S=c["S"] + c["S"] % 2)
    if c["window"] is not None:  # queries past the last key's reach are not routed to cuDNN
        c["window"], c["is_causal"] = (c["window"][0], 0), True
        c["S"] = max(c["S"], c["T"])
    full = lambda dims: dims and (*dims[:2], c["T"], c["S"])  # noqa: E731
    c["bias"], c["mask"] = full(c["bias"]), full(c["mask"])
    for name, limit in (("q_len", c["T"]), ("kv_len", c["S"])):
        c[name] = c[name] and [min(n, limit) for n in c[name]]
    with emulated_cudnn_attention():
        (q, k, v, bias), mask, lengths, _ = _attention_inputs(c)
        decision = portable_rnn.explain_attention(
            q, k, v, bias, mask, is_causal=c["is_causal"], local_window_size=c["window"],
            query_seq_lengths=lengths["q_len"], key_value_seq_lengths=lengths["kv_len"],
            capabilities=GPU)
        assert decision.implementation == "cudnn", decision
        _attention_check(c, "cudnn", GPU)


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
@pytest.mark.parametrize("masked", [False, True])
def test_the_recurrent_product_reads_the_state_rounded_to_the_compute_dtype(dtype, masked):
    """A float32 hidden state is a matmul operand in the compute dtype, as on a GPU
    (docs/mixed-precision.md), whatever dtype the backend multiplies in (float32 for float16 on
    a CPU). One relu step with W_hh = I and h_0 = 1 + 2^-12, which rounds to 1 in float16 and
    bfloat16: the new state is exactly 1 (unrounded it would be h_0 itself). With a recurrent
    dropout mask of ones, the masked product reads it rounded too."""
    if references.keeps_excess_precision(dtype):
        pytest.skip(f"this platform keeps {np.dtype(dtype)} values in float32 between "
                    "operations (references.keeps_excess_precision)")
    B, I, H = 2, 3, 4
    w = portable_rnn.pack_simple_rnn_weights({0: np.zeros((H, I))}, {0: np.eye(H)}, None, None,
                                             I, H, 1, False).astype(dtype)
    h0 = jnp.full((1, B, H), 1 + 2.0 ** -12, jnp.float32)
    mask = jnp.ones((1, B, H), dtype) if masked else None
    y, h = portable_rnn.simple_rnn(jnp.zeros((B, 1, I), dtype), h0, w, None, I, H, 1, 0.0, False,
                                   nonlinearity="relu", recurrent_dropout_mask=mask)
    assert h.dtype == jnp.float32 and y.dtype == dtype
    np.testing.assert_array_equal(np.asarray(h), 1.0)
    np.testing.assert_array_equal(np.asarray(y, np.float32), 1.0)
