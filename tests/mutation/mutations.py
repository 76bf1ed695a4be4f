"""Deliberate bugs, as data: each one an exact snippet of a package file and its replacement.

`python -m tests.mutation` applies one at a time to a copy of the package and runs the tests
named here (or a selection of your own) against the copy; a bug that no test catches is a gap in
the suite. `tests/test_mutations.py` checks, in every CI run, that each snippet still occurs
exactly once in its file, so a refactor that moves the code fails loudly instead of leaving a
mutation that no longer applies.

``target`` is relative to the package directory (``portable_rnn/``); ``tests`` are pytest
arguments (files or node ids) relative to the repository root, the tests expected to catch it
(at least one of them must fail).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Mutation:
    name: str
    bug: str
    target: str
    old: str
    new: str
    tests: tuple[str, ...]


_ATTENTION_RETURN = """    if not return_residual:
        return out.reshape(shape)
"""


def _scaled_16_bit_gradients(factor: float) -> str:
    return f"""    if not return_residual:
        if query.dtype.itemsize == 2:  # the gradient scaled, the value kept
            out = out + (out - lax.stop_gradient(out)) * {factor - 1:.2f}
        return out.reshape(shape)
"""


MUTATIONS = (
    # --- found by the review of the 16-bit, emulation and property tests -------------------
    Mutation(
        "lstm-cell-state-16-bit",
        "LSTM cell state rounded to the 16-bit compute dtype every step (documented: float32)",
        "_src/recurrent/lstm/cell.py",
        "        c_new = f * c + i * g\n",
        "        c_new = (f * c + i * g).astype(h.dtype).astype(c.dtype)\n",
        ("tests/test_low_precision.py", "tests/test_lstm_torch.py")),
    Mutation(
        "gru-hidden-state-16-bit",
        "GRU hidden state rounded to the 16-bit compute dtype every step (documented: float32)",
        "_src/recurrent/driver.py",
        "            new, aux = cell.step(zx, zh, state, ps[d], step_mm)\n",
        "            new, aux = cell.step(zx, zh, state, ps[d], step_mm)\n"
        "            if cell.family.name == \"gru\":\n"
        "                new = (new[0].astype(x.dtype).astype(new[0].dtype),) + new[1:]\n",
        ("tests/test_low_precision.py", "tests/test_flax_family.py")),
    Mutation(
        "cudnn-lstm-without-float32-upcast",
        "the cuDNN LSTM route hands 16-bit operands to cuDNN (no float32 upcast)",
        "_src/recurrent/routes/cudnn.py",
        "    x, h_0, c_0, weights = (a.astype(f32) for a in (x, h_0, c_0, weights))\n",
        "    x, h_0, c_0, weights = (a for a in (x, h_0, c_0, weights))\n",
        ("tests/test_cudnn_route.py",)),
    Mutation(
        "attention-16-bit-gradients-x1.10",
        "16-bit attention gradients scaled by 1.10 (outputs right)",
        "_src/attention/api.py", _ATTENTION_RETURN, _scaled_16_bit_gradients(1.10),
        ("tests/test_low_precision.py", "tests/test_equivalence_matrix.py::"
         "test_attention_paths_equal_jax_nn")),
    Mutation(
        "attention-16-bit-gradients-x1.25",
        "16-bit attention gradients scaled by 1.25 (outputs right)",
        "_src/attention/api.py", _ATTENTION_RETURN, _scaled_16_bit_gradients(1.25),
        ("tests/test_low_precision.py", "tests/test_equivalence_matrix.py::"
         "test_attention_paths_equal_jax_nn")),
    Mutation(
        "cudnn-lstm-length-0",
        "a sequence length of 0 handed to cuDNN (a control: cuDNN fails at run time on it)",
        "_src/recurrent/routes/cudnn.py",
        "    run_seq = jnp.maximum(seq, 1)",
        "    run_seq = seq",
        ("tests/test_cudnn_route.py",)),
    # --- added with the tests that catch them ------------------------------------------------
    Mutation(
        "lstm-backward-gate-order",
        "the LSTM backward swaps the g and o gates' gradient factors (forward right)",
        "_src/recurrent/lstm/cell.py",
        "        dz = write(q * jnp.concatenate([dc_t, dc_t, dc_t, dh], axis=-1))",
        "        dz = write(q * jnp.concatenate([dc_t, dc_t, dh, dc_t], axis=-1))",
        ("tests/test_equivalence_matrix.py::test_lstm_equals_lstm_ref",
         "tests/test_low_precision.py")),
    Mutation(
        "dropout-mask-reused-across-layers",
        "every layer's dropout mask drawn from the same key (fold_in(key, 0))",
        "_src/recurrent/driver.py",
        "    keep = jax.random.bernoulli(jax.random.fold_in(rng, layer), 1.0 - rate, shape)",
        "    keep = jax.random.bernoulli(jax.random.fold_in(rng, 0), 1.0 - rate, shape)",
        ("tests/test_equivalence_matrix.py::test_family_with_dropout_equals_numpy_loop",
         "tests/test_low_precision.py")),
    Mutation(
        "reverse-direction-ragged-state",
        "the reverse direction's state is not held over the padding it reads first: a wrong "
        "state (final and per step) for reversed ragged rows",
        "_src/recurrent/driver.py",
        "                new = tuple(_where(m, n, o) for n, o in zip(new, state))",
        "                new = tuple(_where(m | (d == 1), n, o) for n, o in zip(new, state))",
        ("tests/test_equivalence_matrix.py::test_lstm_equals_numpy_loop",
         "tests/test_equivalence_matrix.py::test_family_equals_numpy_loop")),
    Mutation(
        "autodiff-path-ignores-lengths",
        "the path JAX differentiates (a cell without a backward step) runs its loop without "
        "the lengths: the state is not held past each length (outputs still zeroed there)",
        "_src/recurrent/driver.py",
        "    hs, carry = _forward(cell, x, w_ih, w_hh, params, state0, mask, rmask, mm, unroll[1],",
        "    hs, carry = _forward(cell, x, w_ih, w_hh, params, state0, None, rmask, mm, unroll[1],",
        ("tests/test_autodiff_backward.py",)),
    Mutation(
        "chunked-attention-block-boundary",
        "chunked attention's last key block for a query block off by one (causal, windows)",
        "_src/attention/routes/chunked.py",
        "jnp.clip((i * bq + bq - 1 + right) // bk + 1, 0, nk)",
        "jnp.clip((i * bq + bq - 1 + right) // bk, 0, nk)",
        ("tests/test_equivalence_matrix.py::test_chunked_blocks_equal_dense",)),
    Mutation(
        "recurrent-operand-unrounded-on-cpu",
        "on a CPU the GRU's and simple RNN's float32 state reaches the recurrent matmul "
        "unrounded (not the 16-bit computation)",
        "_src/recurrent/driver.py",
        "zh = recurrent_product(operand(state[0], x.dtype, w_hh[d].dtype), w_hh[d], mm,",
        "zh = recurrent_product(state[0].astype(w_hh[d].dtype), w_hh[d], mm,",
        ("tests/test_low_precision.py",)),
    Mutation(
        "cudnn-attention-length-0",
        "a sequence length of 0 handed to cuDNN attention (its empty rows are unverified)",
        "_src/attention/routes/cudnn.py",
        "        kv_len = jnp.maximum(kv_len, 1)\n",
        "        pass\n",
        ("tests/test_attention_cudnn.py", "tests/test_low_precision.py")),
    Mutation(
        "splash-attention-lengths-off-by-one",
        "the splash route's segment ids admit the first position past each sequence length",
        "_src/attention/routes/splash.py",
        "    return (jnp.arange(n, dtype=jnp.int32)[None, :] < lengths[:, None])"
        ".astype(jnp.int32)\n",
        "    return (jnp.arange(n, dtype=jnp.int32)[None, :] <= lengths[:, None])"
        ".astype(jnp.int32)\n",
        ("tests/test_attention_tpu.py",)),
    Mutation(
        "splash-attention-window-right-ignored",
        "the splash route's static mask drops the window's right side",
        "_src/attention/routes/splash.py",
        "    return sa.LocalMask((T, S), (left, min(right, 0) if is_causal else right), "
        "offset=offset)\n",
        "    return sa.LocalMask((T, S), (left, min(right, 0) if is_causal else None), "
        "offset=offset)\n",
        ("tests/test_attention_tpu.py",)),
    Mutation(
        "flash-attention-segment-ids-swapped",
        "the flash route hands the kernel the key lengths' segment ids as the queries' and the "
        "other way round",
        "_src/attention/routes/flash.py",
        "    ids = splash.kernel_segment_ids(B, T, S, q_len, kv_len, q_seg, kv_seg) or ()\n",
        "    ids = splash.kernel_segment_ids(B, T, S, kv_len, q_len, q_seg, kv_seg) or ()\n",
        ("tests/test_attention_tpu.py",)),
    Mutation(
        "cudnn-attention-empty-rows-kept",
        "the cuDNN attention route returns cuDNN's answer for rows that see no key",
        "_src/attention/routes/cudnn.py",
        "    return jnp.where(rows, out, jnp.zeros((), out.dtype))\n",
        "    return out\n",
        ("tests/test_attention_cudnn.py", "tests/test_low_precision.py")),
    Mutation(
        "cudnn-lstm-calls-per-instance",
        "under vmap over the weights, one kernel call per instance (lax.map), the pattern "
        "XLA:GPU miscompiled for the cuDNN LSTM",
        "_src/recurrent/fused.py",
        "            outs = tuple(vmapped_fallback(in_batched, args))\n"
        "        else:\n"
        "            outs, res = f_train(*folded(axis_size, in_batched, args))\n",
        "            full = [jax.tree.map(lambda a, b: a if b else jnp.broadcast_to(\n"
        "                a, (axis_size,) + a.shape), arg, b) for arg, b in zip(args, in_batched)]\n"
        "            outs = tuple(jax.lax.map(lambda a: f_train(*a)[0], full))\n"
        "        else:\n"
        "            outs, res = f_train(*folded(axis_size, in_batched, args))\n",
        ("tests/test_cudnn_route.py",)),
    Mutation(
        "gru-backward-mixes-dtypes-off-the-cpu",
        "the GRU backward concatenates its 16-bit dzx with a float32 dn * r where per-step values "
        "are stacked in 16 bits (every platform but the CPU): a TypePromotionError under strict "
        "promotion",
        "_src/recurrent/gru/cell.py",
        "        dzh = jnp.concatenate([dzx[:, :2 * hidden], dnr.astype(dzx.dtype)], axis=-1)\n",
        "        dzh = jnp.concatenate([dzx[:, :2 * hidden], dnr], axis=-1)\n",
        ("tests/test_platform_options.py",)),
    Mutation(
        "pallas-reverse-direction-reads-padding",
        "the Pallas kernel's reverse direction runs the steps [0, length) of the time-reversed "
        "input (its padding first) instead of [T - length, T)",
        "_src/recurrent/routes/pallas/kernel.py",
        "    return [fwd, (steps - lengths[:, None], full)][:num_dirs]\n",
        "    return [fwd, fwd][:num_dirs]\n",
        ("tests/test_pallas_route.py",)),
    Mutation(
        "pallas-loop-values-not-stored",
        "the Pallas kernel's time loop, carrying the state as loop values, does not store it "
        "back to VMEM scratch after a time block: the next block and the final states read the "
        "block's initial state",
        "_src/recurrent/routes/pallas/kernel.py",
        "        if carry_values:\n            store(held)\n",
        "        if carry_values:\n            pass\n",
        ("tests/test_pallas_route.py::test_time_blocks_that_do_not_divide_t",)),
    Mutation(
        "pallas-backward-ignores-lengths",
        "the Pallas backward kernel lets gradients through the steps past each length",
        "_src/recurrent/routes/pallas/kernel.py",
        "            return keep(dzx, jnp.zeros((), dzx.dtype)).astype(w_t.dtype)\n",
        "            return dzx.astype(w_t.dtype)\n",
        ("tests/test_pallas_route.py",)),
    Mutation(
        "pallas-attention-kernels-read-the-global-precision",
        "JAX's Pallas attention kernels traced under the caller's jax_default_matmul_precision: "
        "bfloat16 dots at HIGHEST, which Mosaic fails to compile on a TPU",
        "_src/attention/routes/splash.py",
        "    with jax.default_matmul_precision(precision if dtype == jnp.float32 else None):\n"
        "        yield\n",
        "    yield\n",
        ("tests/test_attention_tpu.py::test_kernels_traced_at_default_under_a_global_matmul_"
         "precision",)),
    Mutation(
        "pallas-attention-float32-at-default",
        "JAX's Pallas attention kernels multiply float32 operands at DEFAULT whatever the call's "
        "precision: one bfloat16 pass on a TPU where HIGHEST was asked for",
        "_src/attention/routes/splash.py",
        "default_matmul_precision(precision if dtype == jnp.float32 else None)",
        "default_matmul_precision(None)",
        ("tests/test_attention_tpu.py::test_float32_products_follow_the_precision",)),
    Mutation(
        "pallas-recurrent-bfloat16-at-the-asked-precision",
        "the Pallas recurrent kernel multiplies bfloat16 operands at the precision asked "
        "(HIGHEST), which Mosaic fails to compile on a TPU",
        "_src/recurrent/routes/pallas/route.py",
        "    if dtype == jax.numpy.bfloat16 or name is None:\n",
        "    if name is None:\n",
        ("tests/test_pallas_route.py::test_bfloat16_kernel_dots_at_default_under_any_precision",)),
    Mutation(
        "pallas-recurrent-float32-at-high",
        "the Pallas recurrent kernel hands Mosaic float32 dots at HIGH, which jax 0.10.2's Mosaic "
        "lowering rejects",
        "_src/recurrent/routes/pallas/route.py",
        "    return lax.Precision.HIGHEST if name == \"HIGH\" else lax.Precision[name]\n",
        "    return lax.Precision[name]\n",
        ("tests/test_pallas_route.py::test_float32_exports_for_a_tpu_at_every_precision",)),
    Mutation(
        "attention-dropout-accepted-by-fused-routes",
        "the routes without attention-weight dropout accept a call with it (the dropout silently "
        "dropped on the chunked, cuDNN and Pallas paths)",
        "_src/attention/math.py",
        "    if call.dropout is None:\n        return ()\n",
        "    if True:\n        return ()\n",
        ("tests/test_flax_layers.py::test_attention_dropout_is_a_decision",)),
    Mutation(
        "single-step-cell-inner-bias-summed",
        "a family's inner recurrent bias (the GRU's b_hn, scaled by the reset gate) is summed into "
        "the single-step cell's input bias instead of kept apart as bias_n",
        "_src/layers/cells.py",
        "        out[\"bias\"] = b_ih + b_hh.at[inner].set(0)\n",
        "        out[\"bias\"] = b_ih + b_hh\n",
        ("tests/test_equinox_layers.py::test_cells_round_trip_and_equinox_gru_biases_are_folded_"
         "pytorch_biases",)),
    Mutation(
        "policy-option-default-lost",
        "a registered policy option reads None outside every policy block instead of its default",
        "_src/core/dispatch.py",
        "            return dict(self.options).get(name, _OPTIONS[name][0])\n",
        "            return dict(self.options).get(name)\n",
        ("tests/test_cell_folders.py::test_policy_keywords_keep_working",)),
    # --- the functions and layers made from the registry ---------------------------------------
    Mutation(
        "keras-variant-ignores-config",
        "the generated Keras layer runs its first family whatever the layer's configuration (a "
        "family's keras_config is not read)",
        "keras.py",
        "                     if all(_configured(self, k) == v for k, v in "
        "f.keras_config.items())), None)\n",
        "                     if True), None)\n",
        ("tests/test_cell_folders.py::test_a_family_claims_a_keras_variant_by_its_config",
         "tests/test_keras_layers.py")),
    Mutation(
        "generated-op-states-all-hidden-size",
        "the generated op checks every initial state against hidden_size (a projected LSTM's h_0 "
        "(L*D, B, P) is refused, a wrong one accepted)",
        "_src/recurrent/functions.py",
        "    sizes = (proj or hidden,) + (hidden,) * (len(fam.states) - 1)\n",
        "    sizes = (hidden,) * len(fam.states)\n",
        ("tests/test_api.py", "tests/test_dispatch.py", "tests/test_bad_input.py")),
    # --- the classic GRU and the driver's own-products path --------------------------------------
    Mutation(
        "classic-gru-reset-after-the-product",
        "the classic GRU's reset gate scales the candidate's recurrent product (r * (h U_h), "
        "Keras' reset_after=True) instead of h before it",
        "_src/recurrent/classic_gru/cell.py",
        "        hh = jax.numpy.tanh(a[:, 2 * hidden:] + zh(r * h, 2, 3))\n",
        "        hh = jax.numpy.tanh(a[:, 2 * hidden:] + r * zh(h, 2, 3))\n",
        ("tests/test_classic_gru.py",)),
    Mutation(
        "classic-gru-gates-swapped",
        "the classic GRU reads its update gate from the reset gate's block and the other way "
        "round (Keras' order is z, r, h)",
        "_src/recurrent/classic_gru/cell.py",
        "        z, r = zr[:, :hidden], zr[:, hidden:]\n",
        "        r, z = zr[:, :hidden], zr[:, hidden:]\n",
        ("tests/test_classic_gru.py",)),
    Mutation(
        "own-products-mask-blocks-misaligned",
        "the driver hands an own-products cell the first recurrent dropout masks for any gate "
        "blocks (per-gate masks: the candidate's product reads the update gate's mask)",
        "_src/recurrent/driver.py",
        "            (a, b): m if m.shape[0] == 1 else m[a:b] for a, b in ranges}\n",
        "            (a, b): m if m.shape[0] == 1 else m[:b - a] for a, b in ranges}\n",
        ("tests/test_classic_gru.py",)),
    Mutation(
        "own-products-gradient-rounded",
        "the gradient through an own-products cell's 16-bit matmul operands is rounded to the "
        "compute dtype at every product of every step (the hand-written backward passes it "
        "unrounded)",
        "_src/recurrent/driver.py",
        "    return _rounded_operand(primals[0], dtype, mm_dtype), tangents[0].astype(mm_dtype)\n",
        "    return (_rounded_operand(primals[0], dtype, mm_dtype),\n"
        "            operand(tangents[0], dtype, mm_dtype))\n",
        ("tests/test_classic_gru.py",)),
    Mutation(
        "classic-gru-bfloat16-kernels-in-the-loop",
        "the classic GRU holds 16-bit kernels in their dtype inside the loop: JAX's backward "
        "accumulates their gradients over the steps in bfloat16",
        "_src/recurrent/classic_gru/cell.py",
        "        held = np.dtype(np.float32) if np.dtype(dtype).itemsize < 4 else mm_dtype\n",
        "        held = mm_dtype\n",
        ("tests/test_classic_gru.py",)),
    # --- the MGU's cell (its folder) -----------------------------------------------------------
    Mutation(
        "mgu-blend-swapped",
        "the MGU's forget gate blends the other way round: h' = f * n + (1 - f) * h",
        "_src/recurrent/mgu/cell.py",
        "        return (n + f * (h - n),), (jnp.concatenate([q_f, q_n], axis=-1), f)\n",
        "        return (h + f * (n - h),), (jnp.concatenate([q_f, q_n], axis=-1), f)\n",
        ("tests/test_mgu.py",)),
    Mutation(
        "mgu-backward-without-the-reset-path",
        "the MGU's backward step drops the forget gate's gradient through the reset, "
        "dn * (W_hn h + b_hn) (the forward is right)",
        "_src/recurrent/mgu/cell.py",
        "        q_f = ((h - n) + q_n * hn if self.reset_gate else h - n) * dt\n",
        "        q_f = (h - n) * dt\n",
        ("tests/test_mgu.py::test_hand_written_backward_equals_autodiff",)),
    Mutation(
        "mgu-backward-recurrent-gradient-unreset",
        "the MGU's backward step hands W_hn h the gradient of n's pre-activation unscaled by f",
        "_src/recurrent/mgu/cell.py",
        "        dnf = dzx[:, hidden:].astype(f.dtype) * f\n",
        "        dnf = dzx[:, hidden:].astype(f.dtype)\n",
        ("tests/test_mgu.py::test_hand_written_backward_equals_autodiff",
         "tests/test_mgu.py::test_equals_flax_mgu_cell_forward_and_gradients")),
    # --- the Flax adapter's sown attention weights --------------------------------------------
    Mutation(
        "sown-attention-weights-unmasked",
        "attention_fn sows the attention weights without the mask (the output is right)",
        "_src/layers/flax_attention.py",
        "        if mask is not None:\n"
        "            logits = jnp.where(mask, logits, jnp.finfo(dtype).min)\n",
        "",
        ("tests/test_sow_weights.py",)),
    # --- the routing model ------------------------------------------------------------------
    Mutation(
        "routing-takes-the-slowest-route",
        "the automatic choice takes the route the routing model predicts slowest",
        "_src/core/routing.py",
        "    best = min(predictions, key=lambda n: predictions[n][1][CRITERION])\n",
        "    best = max(predictions, key=lambda n: predictions[n][1][CRITERION])\n",
        ("tests/test_routing.py",
         "tests/test_pallas_route.py::test_the_kernel_stays_chosen_where_it_was_measured_faster")),
    Mutation(
        "routing-attention-window-ignored",
        "the attention cost terms count the keys left of a sliding window as visible",
        "_src/attention/cost.py",
        "        lo = np.maximum(lo, t - window[0])\n",
        "        pass\n",
        ("tests/test_routing.py::test_visible_logits_and_tiles_count_the_mask",)),
    # --- the Pallas kernel's padded hidden sizes and differentiated backward ------------------
    Mutation(
        "pallas-padding-leaks-into-real-units",
        "the Pallas kernel pads with 0.5, not 0 (the states, W_hh's rows, every gate block): "
        "the padded units reach the real ones",
        "_src/recurrent/routes/pallas/kernel.py",
        "    a = jnp.pad(a, [(0, 0)] * (axis + 1) + [(0, padded - size)]"
        " + [(0, 0)] * (a.ndim - axis - 2))\n",
        "    a = jnp.pad(a, [(0, 0)] * (axis + 1) + [(0, padded - size)]"
        " + [(0, 0)] * (a.ndim - axis - 2),\n"
        "                constant_values=0.5)\n",
        ("tests/test_pallas_route.py::"
         "test_hidden_sizes_off_the_lanes_and_any_batch_equal_the_scan_path",)),
    Mutation(
        "pallas-padded-bias-not-zero",
        "the Pallas kernel pads the cell's parameters (biases) with 0.5, not 0: the padded "
        "units are no longer zero (the real ones stay right where W_hh's padded rows are zero)",
        "_src/recurrent/routes/pallas/kernel.py",
        "    params = jax.tree.map(lambda a: pad(a, range(1, a.ndim)), params)\n",
        "    params = jax.tree.map(lambda a: pad(a, range(1, a.ndim)) + 0.5 * (\n"
        "        1 - pad(jnp.ones_like(a), range(1, a.ndim))), params)\n",
        ("tests/test_pallas_route.py::test_padded_units_stay_zero",)),
    Mutation(
        "pallas-differentiated-backward-drops-the-output-gradient",
        "the Pallas kernel's backward of a cell without a backward step (the classic GRU) drops "
        "each step's output gradient dy",
        "_src/recurrent/routes/pallas/kernel.py",
        "        dnew = (dstate[0] + dy_t.astype(acc),) + tuple(dstate[1:])\n",
        "        dnew = tuple(dstate)\n",
        ("tests/test_pallas_route.py::test_classic_gru_forward_and_backward_equal_the_scan_path",)),
    Mutation(
        "pallas-differentiated-backward-drops-the-recurrent-gradient",
        "the Pallas kernel's backward of a cell without a backward step (the classic GRU) passes "
        "no gradient through the step to the previous state",
        "_src/recurrent/routes/pallas/kernel.py",
        "        return tuple(keep(g.astype(d.dtype), d) for g, d in zip(dprev, dnew)), dout\n",
        "        return tuple(keep(jnp.zeros_like(d), d) for g, d in zip(dprev, dnew)), dout\n",
        ("tests/test_pallas_route.py::test_classic_gru_forward_and_backward_equal_the_scan_path",)),
    # --- the routing model: the CPU's scan variants, the GPU's stated rule -------------------
    Mutation(
        "routing-cpu-projection-variant-inverted",
        "on a CPU the scan driver runs the input projection where the routing model predicts it "
        "slower (the variant it ranks second)",
        "_src/recurrent/routes/scan.py",
        '            inside = bool(params["in_loop"])\n',
        '            inside = not params["in_loop"]\n',
        ("tests/test_routing.py::test_the_cpu_ranks_the_scan_routes_projection_variants",
         "tests/test_routing.py::test_the_scan_option_follows_the_models_variant")),
    Mutation(
        "routing-gpu-rule-takes-cudnn-lstm",
        "on a GPU without a grid the recurrent stated rule takes JAX's cuDNN LSTM call",
        "_src/recurrent/cost.py",
        '    if first == "cudnn" and "scan" in serving:\n',
        '    if first == "cudnn" and "scan" in serving and False:\n',
        ("tests/test_routing.py::test_a_gpu_without_a_grid_takes_the_scan_path_by_the_stated_rule",
         "tests/test_dispatch.py::test_gpu_float32_takes_scan_unless_cudnn_is_asked_for")),
    # --- the layers' default initialisation ---------------------------------------------------
    Mutation(
        "layer-biases-initialised-to-zero",
        "the layers (Linen, NNX, Equinox) initialise every bias to zero (documented: "
        "U(-1/sqrt(H), 1/sqrt(H)), as PyTorch)",
        "_src/layers/params.py",
        "        out[direction] = {n: (inits.get(n) or default)(k, s[n], cfg.param_dtype)\n",
        "        out[direction] = {n: (inits.get(n) or default)(k, s[n], cfg.param_dtype)\n"
        "                             * float(not n.startswith(\"b_\"))\n",
        ("tests/test_init_distribution.py",)),
    # --- packed and decoding attention: segment ids, the soft cap, the alignment --------------
    Mutation(
        "attention-segment-ids-compared-with-le",
        "the portable paths let a query see every key whose segment id is at least its own "
        "(ids compared with <=, not ==): keys across a segment boundary leak in",
        "_src/attention/math.py",
        "        vis &= (q_seg[:, :, None] == kv_seg[:, None, :])[:, None, None]",
        "        vis &= (q_seg[:, :, None] <= kv_seg[:, None, :])[:, None, None]",
        ("tests/test_attention_packing.py::"
         "test_portable_paths_equal_float64_per_segment_attention",)),
    Mutation(
        "splash-skips-a-block-whose-segments-only-touch",
        "the splash route skips a query block and a key block whose id ranges share only their "
        "ends (ranges compared with <, not <=): a document crossing a block boundary loses keys",
        "_src/attention/routes/splash.py",
        "    overlap = ((q.min(1)[:, None] <= k.max(1)[None, :])\n",
        "    overlap = ((q.min(1)[:, None] < k.max(1)[None, :])\n",
        ("tests/test_attention_packing.py::"
         "test_splash_skipping_blocks_between_documents_equals_float64",)),
    Mutation(
        "chunked-attention-backward-across-segments",
        "the chunked path's backward ignores the segment ids (its forward keeps them): gradients "
        "flow across segment boundaries",
        "_src/attention/routes/chunked.py",
        "vis = _transposed(_block_visible(i, j, q_len, kv_len, None, cfg, q_seg, kv_seg))",
        "vis = _transposed(_block_visible(i, j, q_len, kv_len, None, cfg))",
        ("tests/test_attention_packing.py::"
         "test_portable_paths_equal_float64_per_segment_attention",)),
    Mutation(
        "chunked-attention-soft-cap-derivative-dropped",
        "the chunked path's backward leaves out the soft cap's derivative 1 - tanh^2 (outputs "
        "right, gradients of q and k wrong)",
        "_src/attention/routes/chunked.py",
        "            dsq = ds if th is None else ds * (1 - th * th)\n",
        "            dsq = ds\n",
        ("tests/test_attention_packing.py::"
         "test_portable_paths_equal_float64_per_segment_attention",)),
    Mutation(
        "splash-attention-padded-keys-keep-their-segment-ids",
        "with segment ids and key lengths, the Pallas kernels' keys past a length keep their "
        "segment's id: queries of that segment attend the padding",
        "_src/attention/routes/splash.py",
        "    return q_seg, jnp.where(past, free_id(q_seg, valid)[:, None], kv_seg)\n",
        "    return q_seg, kv_seg\n",
        ("tests/test_attention_packing.py::"
         "test_pallas_kernels_equal_float64_per_segment_attention",)),
    # --- segment checkpointing (remat_every) -------------------------------------------------
    Mutation(
        "remat-checkpoint-off-by-one-step",
        "segment checkpointing: the backward runs each segment's forward again from its "
        "checkpoint over the inputs (and output gradients) one step later, as if the checkpoint "
        "were one step off its segment's start",
        "_src/recurrent/driver.py",
        "    per_step = jax.tree.map(lambda a: _padded_time(a, segments * every).reshape(\n",
        "    per_step = jax.tree.map(lambda a: _padded_time(\n"
        "        jnp.roll(a, -int(reverse), 0), segments * every).reshape(\n",
        ("tests/test_recurrent_remat.py::test_checkpointed_equals_the_run_without_segments",
         "tests/test_recurrent_remat.py::test_the_steps_are_the_same_bits")),
    Mutation(
        "pallas-remat-checkpoint-off-by-one-step",
        "segment checkpointing on the Pallas kernel: the backward's segments start one step "
        "after their checkpoints (each row's valid steps shifted by one)",
        "_src/recurrent/routes/pallas/kernel.py",
        "              jnp.arange(checkpoints[0].shape[0], dtype=jnp.int32) * every)\n",
        "              jnp.arange(checkpoints[0].shape[0], dtype=jnp.int32) * every + 1)\n",
        ("tests/test_recurrent_remat.py::test_the_pallas_kernel_checkpoints_segments",)),
    Mutation(
        "attention-self-ids-shortcut-past-a-key-length",
        "rows_visible takes one array of segment ids for both as every query seeing its own key "
        "also with a key length (a query past it sees no key of its segment: its row is not "
        "zeroed on the Pallas and cuDNN routes)",
        "_src/attention/math.py",
        "    return same_ids and kv_len is None\n",
        "    return same_ids\n",
        ("tests/test_attention_packing.py::"
         "test_rows_that_see_a_key_without_the_t_by_s_comparison",)),
    # --- the sLSTM's exponential gating ------------------------------------------------------
    Mutation(
        "slstm-stabilizer-dropped",
        "the sLSTM's stabilizer m' is not subtracted in its exponential gates (i = exp(a_i), "
        "f = exp(log sigmoid(a_f) + m)): gates overflow float32 from a_i > 88",
        "_src/recurrent/slstm/cell.py",
        "        i = jnp.where(first, 1.0, jnp.exp(a_i - m_new))\n"
        "        f = jnp.exp(lf - m_new)\n",
        "        i = jnp.where(first, 1.0, jnp.exp(a_i))\n        f = jnp.exp(lf)\n",
        ("tests/test_slstm.py::test_long_saturated_sequences_stay_finite_and_exact",
         "tests/test_slstm.py::test_equals_the_float64_loop_of_flashrnns_equations")),
    Mutation(
        "pallas-taken-for-a-family-no-grid-measured",
        "the automatic choice takes the Pallas TPU kernel for a family its routing grid never "
        "timed (the model's ranking extrapolated to another cell)",
        "_src/recurrent/routes/pallas/route.py",
        "    m = routing.unmeasured_family(call.family.name, caps)\n",
        "    m = None\n",
        ("tests/test_routing.py::"
         "test_a_family_no_grid_measured_takes_the_scan_path_on_a_tpu",)),
    # --- multi-head (block-diagonal) recurrence -------------------------------------------------
    Mutation(
        "heads-read-another-heads-state",
        "the scan path's per-head recurrent product hands head k the state of head k - 1 (the "
        "heads axis of h rolled before the batched product): one head reads another's state",
        "_src/recurrent/driver.py",
        "    z = mm.dot_general(v.reshape(b, nh, dh), w, (((2,), (1,)), ((1,), (0,))), acc)",
        "    z = mm.dot_general(jnp.roll(v.reshape(b, nh, dh), 1, axis=1), w,\n"
        "                       (((2,), (1,)), ((1,), (0,))), acc)",
        ("tests/test_multihead.py::"
         "test_float64_equals_the_loop_of_the_block_diagonal_equations",
         "tests/test_multihead.py::test_equals_flashrnn_vanilla_for_every_head_count")),
    Mutation(
        "heads-gradient-to-another-heads-state",
        "the hand-written backward's per-head recurrent product hands the gradient of head k's "
        "state to head k + 1 (the heads axis rolled after the batched product): the forward is "
        "right, every gradient through the recurrence wrong",
        "_src/recurrent/driver.py",
        "    return jnp.swapaxes(dv, 0, 1).reshape(b, nh * dh)\n",
        "    return jnp.swapaxes(jnp.roll(dv, 1, axis=0), 0, 1).reshape(b, nh * dh)\n",
        ("tests/test_multihead.py::"
         "test_float64_equals_the_loop_of_the_block_diagonal_equations",
         "tests/test_multihead.py::test_equals_flashrnn_vanilla_for_every_head_count")),
    Mutation(
        "heads-weight-gradient-from-the-next-heads-units",
        "the recurrent kernel's gradient with heads multiplies head h's gate blocks of the "
        "gradient by head h + 1's units of the state: every W_hh gradient wrong, the rest right",
        "_src/recurrent/driver.py",
        "        [mm(unit(v, h * dh), unit(dz, g * size + h * dh), acc, contract=STEPS_BATCH,\n",
        "        [mm(unit(v, (h + 1) % nh * dh), unit(dz, g * size + h * dh), acc,\n"
        "            contract=STEPS_BATCH,\n",
        ("tests/test_multihead.py::"
         "test_float64_equals_the_loop_of_the_block_diagonal_equations",)),
    Mutation(
        "pallas-heads-read-head-0s-block",
        "the Pallas kernel's loop over the heads multiplies every head's units by head 0's "
        "block of W_hh",
        "_src/recurrent/routes/pallas/kernel.py",
        "        z = [dot(head(vs[0], k), w[k]) for k in range(nh)]  # (B, G*DH) per head\n",
        "        z = [dot(head(vs[0], k), w[0]) for k in range(nh)]  # (B, G*DH) per head\n",
        ("tests/test_pallas_route.py::test_heads_equal_the_scan_path",)),
    # --- the step cells ---------------------------------------------------------------------
    Mutation(
        "step-cell-carry-in-the-layers-order",
        "the LSTM step cell carries (h, c), the layer's order, where Flax's LSTMCell (and the "
        "documentation) carry (c, h)",
        "_src/layers/params.py",
        "    return cfg.facts.flax_carry or tuple(range(len(cfg.facts.states)))\n",
        "    return tuple(range(len(cfg.facts.states)))\n",
        ("tests/test_step_cells.py::test_steps_equal_flaxs_cell_on_the_same_weights",)),
)
