"""pto.chip: kernel packages on one simulated chip over numpy arrays.
Goldens are computed here, in numpy."""
import pathlib
import sys

import numpy as np
import pytest

import pto


def vector_golden(a, b):
    s = a + b
    return (s + 1) * (s + 2)


def paged_attention_inputs(seed, block_table):
    """The paged attention examples' inputs: one query of 16 heads x 16, a
    three-block cache, 40 valid positions."""
    rng = np.random.default_rng(seed)
    return {
        "query": rng.uniform(-1, 1, (1, 16, 16)).astype(np.float32),
        "key_cache": rng.uniform(-1, 1, (3, 16, 16)).astype(np.float32),
        "value_cache": rng.uniform(-1, 1, (3, 16, 16)).astype(np.float32),
        "block_table": np.array([block_table], np.int32),
        "context_lens": np.array([40], np.int32),
    }


def test_the_interpreter_is_debians():
    assert sys.executable == "/usr/bin/python3"


def test_vector_matches_numpy(example):
    rng = np.random.default_rng(7)
    a = rng.uniform(-1, 1, 16384).astype(np.float32)
    b = rng.uniform(-1, 1, 16384).astype(np.float32)
    r = pto.chip.run(example("vector"), inputs={"a": a, "b": b})
    np.testing.assert_allclose(r["f"], vector_golden(a, b), rtol=1e-5)
    assert r.stats["tasks_completed"] == r.stats["tasks_submitted"] > 0
    assert r.stats["wall_ms"] > 0


def test_a_runtime_runs_again_on_new_inputs_and_writes_given_outputs_in_place(example):
    rt = pto.chip.Runtime(example("vector"), block_dim=2)
    out = np.zeros(16384, np.float32)
    for seed in range(3):
        rng = np.random.default_rng(seed)
        a = rng.uniform(-1, 1, 16384).astype(np.float32)
        b = rng.uniform(-1, 1, 16384).astype(np.float32)
        r = rt.run({"a": a, "b": b}, outputs={"f": out})
        assert r["f"] is out
        np.testing.assert_allclose(out, vector_golden(a, b), rtol=1e-5)
    assert r.stats["block_dim"] == 2


def test_a_scalar_can_be_overridden(example):
    a = np.ones(16384, np.float32)
    b = np.ones(16384, np.float32)
    r = pto.chip.run(example("vector"), inputs={"a": a, "b": b, "n": 8192})
    np.testing.assert_allclose(r["f"][:8192], 12.0)
    # What no task wrote reads as NaN, never as a plausible value.
    assert np.isnan(r["f"][8192:]).all()


def test_bgemm_accumulates_into_its_inout(example):
    rng = np.random.default_rng(3)
    A = rng.uniform(-1, 1, (512, 16)).astype(np.float32)
    B = rng.uniform(-1, 1, (128, 16)).astype(np.float32)
    C = rng.uniform(-1, 1, (64, 16)).astype(np.float32)
    C0 = C.copy()
    r = pto.chip.run(example("bgemm"), inputs={"A": A, "B": B, "C": C})
    # 4 groups x 8 k-steps of 16x16 tiles: C[g] += sum_k A[g][k] @ B[k].
    want = C.reshape(4, 16, 16) + np.einsum("gkij,kjl->gil", A.reshape(4, 8, 16, 16), B.reshape(8, 16, 16))
    np.testing.assert_allclose(r["C"], want.reshape(64, 16), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(C, C0)  # the input array itself is untouched: the chip wrote its own copy


def test_args_describe_the_package(example):
    args = pto.chip.Runtime(example("vector")).args
    assert [a["name"] for a in args] == ["a", "b", "f", "n"]
    assert args[2]["role"] == "output" and args[2]["dtype"] == np.float32 and args[2]["shape"] == (16384,)
    assert args[3] == {"name": "n", "role": "scalar", "default": 16384}


def test_a_deadlock_raises_with_its_code_name_and_whole_advice(example):
    a = np.ones(16384, np.float32)
    with pytest.raises(pto.Error) as e:
        pto.chip.run(example("vector"), inputs={"a": a, "b": a}, task_window=4)
    assert e.value.name == "SCOPE_EXCEEDS_WINDOW"
    assert e.value.code == 10
    assert "PTO2_RING_TASK_WINDOW >= 8" in e.value.message
    assert "Solution" in str(e.value)


def test_arguments_that_do_not_fit_are_refused_naming_them(example):
    a = np.ones(16384, np.float32)
    with pytest.raises(ValueError, match=r"input 'a' is <f8 \(16384\); the package wants <f4 \(16384\)"):
        pto.chip.run(example("vector"), inputs={"a": a.astype(np.float64), "b": a})
    with pytest.raises(ValueError, match=r"input 'b' is <f4 \(2, 8192\)"):
        pto.chip.run(example("vector"), inputs={"a": a, "b": a.reshape(2, 8192)})
    with pytest.raises(ValueError, match=r"'b' \(input <f4 \(16384\)\) is missing"):
        pto.chip.run(example("vector"), inputs={"a": a})
    with pytest.raises(ValueError, match="no input, inout or scalar named 'c'"):
        pto.chip.run(example("vector"), inputs={"a": a, "b": a, "c": a})
    with pytest.raises(ValueError, match="no output or inout named 'a'"):
        pto.chip.run(example("vector"), inputs={"a": a, "b": a}, outputs={"a": a})
    with pytest.raises(TypeError, match="unknown runtime option 'blockdim'"):
        pto.chip.run(example("vector"), inputs={"a": a, "b": a}, blockdim=2)
    with pytest.raises(TypeError, match="must be a numpy array"):
        pto.chip.run(example("vector"), inputs={"a": [1.0] * 16384, "b": a})
    with pytest.raises(ValueError, match="writable C-contiguous"):
        pto.chip.run(example("vector"), inputs={"a": a, "b": a}, outputs={"f": np.zeros(32768, np.float32)[::2]})


def test_a_missing_package_raises_naming_the_file():
    with pytest.raises(pto.Error) as e:
        pto.chip.Runtime("/nonexistent/kernels.toml")
    assert "/nonexistent/kernels.toml" in e.value.message


def test_help_shows_docstrings():
    assert "kernel package" in pto.chip.run.__doc__ or "Loads the package" in pto.chip.run.__doc__
    assert "code name" in pto.chip.Runtime.run.__doc__
    assert pto.Error.__doc__


def gelu(x):
    return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))


def test_the_fused_matmul_feeds_vector_cores_through_cluster_pipes(example):
    # Function groups pinned to clusters, their cube kernels pushing rows of
    # A @ B into the clusters' pipes and their vector kernels applying GELU.
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, (256, 64)).astype(np.float32)
    b = rng.uniform(-0.25, 0.25, (64, 64)).astype(np.float32)
    r = pto.chip.run(example("fused_matmul"), inputs={"A": a, "B": b})
    want = gelu(a.astype(np.float64) @ b.astype(np.float64))
    np.testing.assert_allclose(r["C"], want, rtol=1e-4, atol=1e-5)
    assert r.stats["tasks_completed"] == 64


def test_spmd_stages_give_the_same_outputs_batched_and_expanded(example):
    config = pathlib.Path(example("paged_attention")).with_name("kernels_spmd.toml")
    inputs = paged_attention_inputs(11, [2, 0, 1])
    outs = {}
    for mode in ("batch", "expand"):
        r = pto.chip.run(str(config), inputs=inputs, block_mode=mode)
        outs[mode] = (r["out"], r.stats["tasks_submitted"])
    np.testing.assert_array_equal(outs["batch"][0], outs["expand"][0])
    # Attention over the 40 positions the block table gathers.
    k = np.concatenate([inputs["key_cache"][i] for i in (2, 0, 1)])[:40].astype(np.float64)
    v = np.concatenate([inputs["value_cache"][i] for i in (2, 0, 1)])[:40].astype(np.float64)
    s = inputs["query"][0].astype(np.float64) @ k.T / 4.0
    p = np.exp(s - s.max(axis=1, keepdims=True))
    np.testing.assert_allclose(outs["batch"][0][0], (p / p.sum(axis=1, keepdims=True)) @ v, rtol=1e-4, atol=1e-5)
    assert outs["batch"][1] == 7 and outs["expand"][1] == 16  # 3 block tasks vs 3 x (3 blocks + a join)
    with pytest.raises(ValueError, match="block_mode 'spmd'"):
        pto.chip.run(str(config), inputs=inputs, block_mode="spmd")


def test_a_pipe_too_small_for_a_push_fails_the_run_naming_it(example):
    rng = np.random.default_rng(5)
    a = rng.uniform(-1, 1, (256, 64)).astype(np.float32)
    b = rng.uniform(-0.25, 0.25, (64, 64)).astype(np.float32)
    # One row (256 bytes) at a time through a 64-byte pipe cannot go.
    with pytest.raises(pto.Error, match="holds 64 bytes"):
        pto.chip.run(example("fused_matmul"), inputs={"A": a, "B": b}, pipe_bytes=64)
    # Through a pipe of exactly one row, every push waits for the pop before it.
    r = pto.chip.run(example("fused_matmul"), inputs={"A": a, "B": b}, pipe_bytes=256)
    np.testing.assert_allclose(r["C"], gelu(a.astype(np.float64) @ b.astype(np.float64)), rtol=1e-4, atol=1e-5)


def test_a_runtime_replays_paged_attention_bit_identical_on_new_arrays(example):
    """The paged attention example is a captured region: the first run of a
    Runtime records it, later runs replay it over other arrays (other
    addresses) and write the same bytes as a Runtime with capture off; a
    new block table is another graph, recorded anew."""
    inputs = paged_attention_inputs(3, [0, 1, 2])
    plain = pto.chip.Runtime(example("paged_attention"), capture_mode="off")
    rt = pto.chip.Runtime(example("paged_attention"))
    want = plain.run(inputs)
    assert want.stats["regions_recorded"] == want.stats["regions_replayed"] == 0
    for i in range(3):
        fresh = {k: v.copy() for k, v in inputs.items()}  # other addresses every run
        got = rt.run(fresh)
        assert got.stats["regions_recorded"] == (1 if i == 0 else 0)
        assert got.stats["regions_replayed"] == (0 if i == 0 else 1)
        assert got.stats["tasks_replayed"] == (0 if i == 0 else got.stats["tasks_submitted"] - 2)
        assert got["out"].tobytes() == want["out"].tobytes()
    other = dict(inputs, block_table=np.array([[2, 0, 1]], np.int32))
    got = rt.run(other)
    assert got.stats["regions_recorded"] == 1
    assert got["out"].tobytes() == plain.run(other)["out"].tobytes()
    with pytest.raises(ValueError, match="capture_mode 'sometimes'"):
        pto.chip.Runtime(example("paged_attention"), capture_mode="sometimes")


def test_the_same_package_runs_on_tx8sim_with_simulated_time(example):
    rng = np.random.default_rng(11)
    a = rng.uniform(-1, 1, 16384).astype(np.float32)
    b = rng.uniform(-1, 1, 16384).astype(np.float32)
    r = pto.chip.run(example("vector"), inputs={"a": a, "b": b}, platform="tx8sim")
    np.testing.assert_allclose(r["f"], vector_golden(a, b), rtol=1e-5)
    assert r.stats["platform"] == "tx8sim"
    assert r.stats["sim_us"] > 0
    assert r.stats["ddr_bytes"] == 10 * 16384 * 4  # four kernels' implicit loads and stores
    assert "block_dim" not in r.stats


def test_batch_norm_on_tx8sim_matches_numpy(example):
    rng = np.random.default_rng(5)
    x = rng.uniform(-3, 3, (2, 14, 14, 256)).astype(np.float32)
    scale, shift, mean = (rng.uniform(lo, hi, 256).astype(np.float32) for lo, hi in ((0.5, 1.5), (-1, 1), (-1, 1)))
    var = rng.uniform(0.1, 2.0, 256).astype(np.float32)
    r = pto.chip.run(example("batch_norm"), inputs={"x": x, "scale": scale, "shift": shift, "mean": mean, "var": var})
    want = (x.astype(np.float64) - mean) / np.sqrt(var.astype(np.float64) + 1e-5) * scale + shift
    np.testing.assert_allclose(r["y"], want, rtol=1e-5, atol=1e-5)
    assert r.stats["platform"] == "tx8sim"  # the package names it
    assert 0 < r.stats["tile_utilisation"] <= 100


def test_a2a3sim_options_are_refused_on_tx8sim(example):
    with pytest.raises(ValueError, match="block_dim is an a2a3sim setting"):
        pto.chip.Runtime(example("vector"), platform="tx8sim", block_dim=4)
    with pytest.raises(pto.Error, match="platform 'tx9' is unknown"):
        pto.chip.Runtime(example("vector"), platform="tx9")
