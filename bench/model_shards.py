"""A Llama-3.1-70B-shaped checkpoint in 30 safetensors shards, bf16, data left as sparse holes
(132 GB apparent, a few hundred KB on disk): `iteragpu estimate --model` must read the headers
only. Usage: python3 bench/model_shards.py FOLDER"""
import json, os, struct, sys
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
H, I, V, L, KV, HD, NH = 8192, 28672, 128256, 80, 8, 128, 64
tensors = [("model.embed_tokens.weight", [V, H])]
for l in range(L):
    p = f"model.layers.{l}."
    tensors += [
        (p + "self_attn.q_proj.weight", [NH * HD, H]),
        (p + "self_attn.k_proj.weight", [KV * HD, H]),
        (p + "self_attn.v_proj.weight", [KV * HD, H]),
        (p + "self_attn.o_proj.weight", [H, NH * HD]),
        (p + "mlp.gate_proj.weight", [I, H]),
        (p + "mlp.up_proj.weight", [I, H]),
        (p + "mlp.down_proj.weight", [H, I]),
        (p + "input_layernorm.weight", [H]),
        (p + "post_attention_layernorm.weight", [H]),
    ]
tensors += [("model.norm.weight", [H]), ("lm_head.weight", [V, H])]
n = 30
per = -(-len(tensors) // n)
weight_map = {}
for s in range(n):
    part = tensors[s * per:(s + 1) * per]
    name = f"model-{s+1:05d}-of-{n:05d}.safetensors"
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for t, shape in part:
        size = 2
        for d in shape:
            size *= d
        header[t] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + size]}
        off += size
        weight_map[t] = name
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(out, name), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        f.truncate(8 + len(h) + off)
total = sum(2 * __import__("math").prod(s) for _, s in tensors)
json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, open(os.path.join(out, "model.safetensors.index.json"), "w"))
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H,
           "intermediate_size": I, "num_hidden_layers": L, "num_attention_heads": NH,
           "num_key_value_heads": KV, "vocab_size": V, "tie_word_embeddings": False,
           "torch_dtype": "bfloat16", "max_position_embeddings": 131072, "rms_norm_eps": 1e-5},
          open(os.path.join(out, "config.json"), "w"))
print(sum(1 for _ in tensors), "tensors in", n, "shards")
