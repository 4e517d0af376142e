"""Decoding and serving end to end (issue 42; docs/generation.md): Hugging
Face `generate` with the dynamic and the static KV cache, compiled as a user
would (`model.forward = compile(model.forward)`), gives eager's tokens for
prompts of several lengths with at most 4 captures in all (a new cache per
generate meets the entries compiled before: plain objects from arguments
are guarded by type); a BERT-like encoder over requests of varying batch
and length with padding masks captures a handful of times and nothing once
warm."""
import pytest
import torch

import dynafuse
from conftest import assert_close

transformers = pytest.importorskip("transformers")


def tiny_llama():
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, vocab_size=500,
                                      max_position_embeddings=256)
    config.pad_token_id = config.eos_token_id = None
    return transformers.LlamaForCausalLM(config).eval()


def generate(model, prompt, cache, tokens=6):
    options = dict(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False,
                   pad_token_id=0)
    if cache == "static":
        options["cache_implementation"] = "static"
    with torch.no_grad():
        return model.generate(prompt, **options)


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_generate_matches_eager_with_a_handful_of_captures(cache):
    model = tiny_llama()
    # the 15 and the 30 outgrow the static cache made before: a new one, of
    # a longer max_cache_len (an int that becomes a symbol)
    prompts = [torch.randint(3, 500, (1, n)) for n in (9, 15, 5, 9, 30)]
    expected = [generate(model, prompt, cache) for prompt in prompts]
    model.forward = dynafuse.compile(model.forward)
    for prompt, tokens in zip(prompts, expected):
        assert torch.equal(generate(model, prompt, cache), tokens)
    stats = dynafuse.stats()
    assert 2 <= stats["captures"] <= 4, stats
    assert stats["symbolic_captures"] >= 1, stats
    assert stats["graph_breaks"] == 0 and stats["settled_frames"] == 0, stats
    # every decode step after the first few ran a compiled entry
    assert stats["cache_hits"] >= len(prompts) * 6 - stats["captures"], stats
    if cache == "static":
        # keys and values of both layers written in place, not copied back,
        # in every decode step (a prefill allocates the cache in its graph)
        decode_hits = stats["cache_hits"] - len(prompts)
        assert stats["in_place_updates"] >= 4 * decode_hits, stats
    captures = stats["captures"]
    for prompt, tokens in zip(prompts, expected):
        assert torch.equal(generate(model, prompt, cache), tokens)
    assert dynafuse.stats()["captures"] == captures


def test_padded_requests_of_varying_sizes_settle_on_a_symbolic_graph():
    config = transformers.BertConfig(hidden_size=64, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=128,
                                     vocab_size=500, max_position_embeddings=128)
    model = transformers.BertModel(config).eval()
    compiled = dynafuse.compile(model)
    requests = []
    for batch, length in [(3, 17), (5, 40), (2, 9), (1, 30), (4, 23), (6, 12)]:
        ids = torch.randint(3, 500, (batch, length))
        lengths = torch.randint(length // 2, length + 1, (batch,))
        lengths[0] = length
        mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
        requests.append((ids, mask))
    with torch.no_grad():
        for _ in range(2):
            for ids, mask in requests:
                actual = compiled(input_ids=ids, attention_mask=mask).last_hidden_state
                expected = model(input_ids=ids, attention_mask=mask).last_hidden_state
                assert_close(actual * mask[..., None], expected * mask[..., None],
                             rtol=1e-4, atol=1e-4)
            if _ == 0:
                captures = dynafuse.stats()["captures"]
    stats = dynafuse.stats()
    # static, symbolic, batch 1 (size 1 is specialized); nothing on the
    # second pass
    assert stats["captures"] == captures <= 4, stats
    assert stats["symbolic_captures"] >= 1 and stats["graph_breaks"] == 0, stats
