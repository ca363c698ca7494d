#!/usr/bin/env python3
"""Reference fixtures from Hugging Face transformers' GptOssForCausalLM (oracle two).

Run on a machine with PyTorch + transformers (the GPU machines have both; CPU is used
for the math so results are deterministic):  python3 make_fixtures.py OUT_DIR

For each tiny model it writes OUT_DIR/<name>/{config.json, model.safetensors,
reference.json, reference_logits.f32}: random weights from a fixed seed, and float32 logits of every
position of a fixed random token sequence computed by transformers (eager attention,
float32 math on bf16-exact weights). tests/oracle converts each checkpoint with
`brass convert` and requires brass's logits to match.

Models:
  bf16        experts as bf16 module parameters (gate_up_proj / down_proj).
  mxfp4vals   the same layout, but every expert weight rounded to an MXFP4 value
              (blocks of 32 along the input dim; each block's largest element is
              exactly +-6*2^e so every quantizer picks the same scale): converting to
              MXFP4 must be lossless.
  mxfp4       the mxfp4vals model stored in the OpenAI/HF MXFP4 checkpoint layout
              (*_blocks / *_scales, gate/up interleaved by row): repacking must be exact.
"""
import json
import math
import os
import sys

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import GptOssConfig, GptOssForCausalLM

N_LAYER = 4
CONFIG = {
    "architectures": ["GptOssForCausalLM"],
    "model_type": "gpt_oss",
    "attention_bias": True,
    "attention_dropout": 0.0,
    "eos_token_id": 1023,
    "pad_token_id": None,
    "experts_per_token": 4,
    "num_experts_per_tok": 4,
    "head_dim": 32,
    "hidden_act": "silu",
    "hidden_size": 64,
    "initial_context_length": 4096,
    "intermediate_size": 64,
    "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(N_LAYER)],
    "max_position_embeddings": 131072,
    "num_attention_heads": 4,
    "num_hidden_layers": N_LAYER,
    "num_key_value_heads": 2,
    "num_local_experts": 8,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                     "original_max_position_embeddings": 4096, "rope_type": "yarn",
                     "truncate": False},
    "rope_theta": 150000,
    "sliding_window": 8,
    "swiglu_limit": 7.0,
    "tie_word_embeddings": False,
    "vocab_size": 1024,
    "torch_dtype": "bfloat16",
}
N_TOKENS = 40  # > several windows of 8

E2M1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0.0, -.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32)


def init_weights(model, seed):
    """Weights large enough that every layer matters (the default 0.02 init makes the
    logits nearly flat and the comparison weak)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            shape = p.shape
            if "norm" in name:
                v = 1.0 + 0.1 * torch.randn(shape, generator=g)
            elif name.endswith("sinks"):
                v = torch.randn(shape, generator=g)
            elif "bias" in name:
                v = 0.1 * torch.randn(shape, generator=g)
            elif "embed_tokens" in name:
                v = torch.randn(shape, generator=g)
            elif "experts.gate_up_proj" in name or "experts.down_proj" in name:
                # (E, n_in, n_out), used as x @ W
                v = torch.randn(shape, generator=g) / math.sqrt(shape[1])
            else:  # nn.Linear (out, in)
                v = torch.randn(shape, generator=g) / math.sqrt(shape[-1])
            # bf16-exact values, math stays in float32
            p.copy_(v.to(torch.bfloat16).to(torch.float32))


def round_block_mxfp4(w, rng):
    """w: (..., 32) float32 -> (values exactly representable, nibbles, scale bytes)."""
    amax = np.abs(w).max(axis=-1, keepdims=True)
    e = np.floor(np.log2(np.maximum(amax, 1e-30) / 6.0))
    e = np.clip(e, -20, 20)
    scaled = w / np.exp2(e)
    # nearest E2M1 magnitude, sign kept
    mags = E2M1[:8]
    idx = np.abs(np.abs(scaled)[..., None] - mags).argmin(-1)
    # pin the largest element to +-6 so the block's scale is unambiguous
    imax = np.abs(w).argmax(-1)
    np.put_along_axis(idx, imax[..., None], 7, axis=-1)
    neg = np.signbit(scaled)
    nib = idx + 8 * neg
    vals = E2M1[nib] * np.exp2(e)
    return vals.astype(np.float32), nib.astype(np.uint8), (e[..., 0] + 127).astype(np.uint8)


def mxfp4ify(model, rng):
    """Round expert weights to MXFP4 values in place; return HF-layout blocks/scales."""
    packed = {}
    with torch.no_grad():
        for il, layer in enumerate(model.model.layers):
            ex = layer.mlp.experts
            for pname in ("gate_up_proj", "down_proj"):
                p = getattr(ex, pname)
                w = p.detach().numpy()                    # (E, n_in, n_out), x @ W
                wt = np.ascontiguousarray(np.swapaxes(w, 1, 2))  # (E, n_out, n_in)
                E, n_out, n_in = wt.shape
                blk = wt.reshape(E, n_out, n_in // 32, 32)
                vals, nib, scales = round_block_mxfp4(blk, rng)
                p.copy_(torch.from_numpy(np.swapaxes(vals.reshape(E, n_out, n_in), 1, 2).copy()))
                # HF layout: byte j = element 2j (low nibble) | element 2j+1 (high nibble)
                bytes_ = (nib[..., 0::2] | (nib[..., 1::2] << 4)).astype(np.uint8)
                key = f"model.layers.{il}.mlp.experts.{pname}"
                packed[key + "_blocks"] = torch.from_numpy(bytes_)        # (E, n_out, n_in/32, 16)
                packed[key + "_scales"] = torch.from_numpy(scales)        # (E, n_out, n_in/32)
    return packed


def save(model, out_dir, name, config, tokens, blocks=None):
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    sd = {}
    for k, v in model.state_dict().items():
        if blocks is not None and (k.endswith("experts.gate_up_proj") or k.endswith("experts.down_proj")):
            continue
        sd[k] = v.detach().to(torch.bfloat16).contiguous()
    if blocks is not None:
        sd.update(blocks)
    save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    cfg = dict(config)
    if blocks is not None:
        cfg["quantization_config"] = {"quant_method": "mxfp4",
                                      "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with torch.no_grad():
        logits = model(torch.tensor([tokens])).logits[0].float().numpy()  # (n_tokens, n_vocab)
    rot = model.model.rotary_emb
    logits.astype("<f4").tofile(os.path.join(d, "reference_logits.f32"))  # (n_tokens, n_vocab)
    ref = {
        "model": name,
        "tokens": tokens,
        "n_vocab": int(logits.shape[1]),
        "transformers_inv_freq": [float(x) for x in rot.inv_freq.float().numpy()],
        "transformers_attention_scaling": float(getattr(rot, "attention_scaling", 1.0)),
        "logits_file": "reference_logits.f32",
        "logits_shape": [int(logits.shape[0]), int(logits.shape[1])],
    }
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    print(f"{name}: logits {logits.shape}, |logit| max {np.abs(logits).max():.3f}, "
          f"argmax {logits.argmax(-1)[:12].tolist()} ...")


# The original context is the real model's 4096: with a small one the correction
# range's low end goes negative, where transformers (and llama.cpp) clamp it to 0 and
# the openai reference does not -- a difference the real checkpoints never reach.
def yarn_inv_freq(cfg, rounded):
    """openai/gpt-oss torch/model.py's YaRN (rounded=False) and the floor/ceil variant."""
    rs, hd, base = cfg["rope_scaling"], cfg["head_dim"], float(cfg["rope_theta"])
    freq = base ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    d_half = hd / 2
    ctx = rs["original_max_position_embeddings"]
    low = d_half * math.log(ctx / (rs["beta_fast"] * 2 * math.pi)) / math.log(base)
    high = d_half * math.log(ctx / (rs["beta_slow"] * 2 * math.pi)) / math.log(base)
    if rounded:
        low, high = math.floor(low), math.ceil(high)
    ramp = np.clip((np.arange(d_half) - low) / (high - low), 0, 1)
    mask = 1 - ramp
    return (1 / (rs["factor"] * freq)) * (1 - mask) + (1 / freq) * mask


def report_yarn(model, cfg):
    got = model.model.rotary_emb.inv_freq.double().numpy()
    for rounded in (False, True):
        diff = np.abs(got - yarn_inv_freq(cfg, rounded)).max()
        print(f"yarn rounded={rounded}: max |inv_freq diff| vs transformers = {diff:.3e}")
    print("attention_scaling", getattr(model.model.rotary_emb, "attention_scaling", None),
          "expected", 0.1 * math.log(cfg["rope_scaling"]["factor"]) + 1)


def main():
    out_dir = sys.argv[1]
    torch.set_grad_enabled(False)
    import transformers
    print("transformers", transformers.__version__, "torch", torch.__version__)
    config = GptOssConfig(**CONFIG)
    config._attn_implementation = "eager"
    model = GptOssForCausalLM(config).float().eval()
    report_yarn(model, CONFIG)
    print("config rope:", getattr(config, "rope_scaling", None), getattr(config, "rope_parameters", None))
    rng = np.random.default_rng(20251121)
    tokens = [int(t) for t in rng.integers(0, CONFIG["vocab_size"], size=N_TOKENS)]

    init_weights(model, seed=1)
    save(model, out_dir, "bf16", CONFIG, tokens)

    init_weights(model, seed=2)
    blocks = mxfp4ify(model, rng)
    save(model, out_dir, "mxfp4vals", CONFIG, tokens)
    save(model, out_dir, "mxfp4", CONFIG, tokens, blocks=blocks)


if __name__ == "__main__":
    main()
