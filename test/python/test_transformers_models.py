"""HuggingFace transformers models, built from small configs with random
weights (nothing is downloaded), each captured as one graph (fullgraph=True)
through the library's machinery: decorators with try/finally, kwargs
shims, config properties, ModelOutput dataclasses, DynamicCache objects,
attention-mask helpers. Compared with eager on the whole output."""
import pytest
import torch

import dynafuse
from conftest import assert_close, assert_compiled

transformers = pytest.importorskip("transformers", minversion="5.0")
transformers.logging.set_verbosity_error()


def small(name):
    t = transformers
    if name == "gpt2":
        return t.GPT2Model(t.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100,
                                        n_positions=64, bos_token_id=0, eos_token_id=0))
    if name == "bert":
        return t.BertModel(t.BertConfig(num_hidden_layers=2, hidden_size=64,
                                        num_attention_heads=4, intermediate_size=128,
                                        vocab_size=100))
    if name == "llama":
        return t.LlamaModel(t.LlamaConfig(num_hidden_layers=2, hidden_size=64,
                                          num_attention_heads=4, num_key_value_heads=2,
                                          intermediate_size=128, vocab_size=100))
    if name == "t5":
        return t.T5EncoderModel(t.T5Config(num_layers=2, d_model=64, num_heads=4, d_ff=128,
                                           d_kv=16, vocab_size=100))
    if name == "vit":
        return t.ViTModel(t.ViTConfig(num_hidden_layers=2, hidden_size=64,
                                      num_attention_heads=4, intermediate_size=128,
                                      image_size=32, patch_size=8))
    raise ValueError(name)


def inputs_for(name, batch, length):
    if name == "vit":
        return {"pixel_values": torch.randn(batch, 3, 32, 32)}
    return {"input_ids": torch.randint(0, 100, (batch, length))}


def assert_same_output(actual, expected):
    assert type(actual) is type(expected)
    assert list(actual.keys()) == list(expected.keys())
    for key, value in expected.items():
        if isinstance(value, torch.Tensor):
            assert_close(actual[key], value, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["gpt2", "bert", "llama", "t5", "vit"])
@pytest.mark.parametrize("batch,length", [(1, 16), (2, 7)])
def test_a_transformers_model_is_one_graph(name, batch, length):
    torch.manual_seed(0)
    model = small(name).eval()
    compiled = dynafuse.compile(model, fullgraph=True)
    with torch.no_grad():
        for _ in range(2):  # new values, same shapes: the cached entry runs
            kwargs = inputs_for(name, batch, length)
            assert_same_output(compiled(**kwargs), model(**kwargs))
    assert_compiled()


def test_bert_with_a_padding_mask():
    torch.manual_seed(0)
    model = small("bert").eval()
    ids = torch.randint(0, 100, (2, 12))
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, 8:] = 0
    with torch.no_grad():
        actual = dynafuse.compile(model, fullgraph=True)(input_ids=ids, attention_mask=mask)
        expected = model(input_ids=ids, attention_mask=mask)
    assert_same_output(actual, expected)
    assert_compiled()


def test_gpt2_returns_its_filled_cache():
    torch.manual_seed(0)
    model = small("gpt2").eval()
    ids = torch.randint(0, 100, (1, 10))
    with torch.no_grad():
        actual = dynafuse.compile(model, fullgraph=True)(ids, use_cache=True)
        expected = model(ids, use_cache=True)
    assert_same_output(actual, expected)
    cache, want = actual.cache, expected.cache
    assert type(cache) is type(want) and len(cache.layers) == len(want.layers)
    for layer, reference in zip(cache.layers, want.layers):
        assert type(layer) is type(reference)
        assert_close(layer.keys, reference.keys)
        assert_close(layer.values, reference.values)
    assert cache.get_seq_length() == 10
    assert_compiled()


@pytest.mark.parametrize("name", ["gpt2", "bert", "llama", "t5"])
def test_every_sequence_length_runs_one_symbolic_graph(name):
    """Automatic dynamic shapes: the first length compiles statically, the
    second symbolically (the attention's call_torch included), and the
    rest, a prime among them, reuse that graph."""
    torch.manual_seed(0)
    model = small(name).eval()
    compiled = dynafuse.compile(model, fullgraph=True)
    with torch.no_grad():
        for length in [9, 16, 23, 5, 31, 9]:
            inputs = inputs_for(name, 2, length)
            assert_same_output(compiled(**inputs), model(**inputs))
    stats = dynafuse.stats()
    assert stats["captures"] == 2 and stats["symbolic_captures"] == 1, stats
    assert stats["backend_compiles"] == 2 and stats["eager_frames"] == 0, stats


def without_dropout(model):
    """Dropout off everywhere (modules, and the attention's own rates), so
    a train-mode model is deterministic and comparable with eager."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        if isinstance(getattr(module, "dropout", None), float):
            module.dropout = 0.0
    for name in ("attention_dropout", "attn_pdrop", "attention_probs_dropout_prob",
                 "dropout_rate"):
        if hasattr(model.config, name):
            setattr(model.config, name, 0.0)
    return model.train()


@pytest.mark.parametrize("name", ["gpt2", "bert", "llama", "t5", "vit"])
def test_a_transformers_model_trains_as_one_graph(name):
    """Training through the library's SDPA attention: flash attention with
    its backward (gpt2, bert, vit), grouped key/value heads (llama), a
    learned position bias as the mask (t5, attention in graph ops)."""
    import copy
    torch.manual_seed(0)
    model = without_dropout(small(name))
    twin = copy.deepcopy(model)
    kwargs = inputs_for(name, 2, 9)
    out = dynafuse.compile(model, fullgraph=True)(**kwargs).last_hidden_state
    assert out.grad_fn.name() == "DynafuseBackward"
    expected = twin(**kwargs).last_hidden_state
    assert_close(out.detach(), expected.detach(), rtol=1e-4, atol=1e-4)
    cotangent = torch.randn(out.shape)
    out.backward(cotangent)
    expected.backward(cotangent)
    # Parameters the output does not depend on (the pooler) keep no
    # gradient, as in eager. Some gradients are zero up to rounding (a key
    # bias: softmax ignores a per-row constant): compared against the
    # largest gradient.
    scale = max(p.grad.abs().max().item() for p in twin.parameters() if p.grad is not None)
    for (parameter, mine), theirs in zip(model.named_parameters(), twin.parameters()):
        assert (mine.grad is None) == (theirs.grad is None), parameter
        if theirs.grad is not None:
            assert_close(mine.grad, theirs.grad, rtol=1e-3, atol=1e-6 * scale)
    assert_compiled()
    assert dynafuse.compiled_graphs()[0]["training"]


@pytest.mark.parametrize("name", ["bart", "t5"])
def test_a_seq2seq_model_that_copies_its_config_is_one_graph(name):
    """The legacy encoder-decoder configs: the forward makes its own cache
    from config.get_text_config(decoder=True), which deep-copies the config
    and renames its decoder_* entries through the strict dataclass's
    validating __setattr__ (traced, not a break)."""
    t = transformers
    if name == "bart":
        config = t.BartConfig(encoder_layers=2, decoder_layers=2, d_model=64,
                              encoder_attention_heads=4, decoder_attention_heads=4,
                              encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=100)
        model = t.BartModel(config).eval()
    else:
        config = t.T5Config(num_layers=2, num_decoder_layers=2, d_model=64, num_heads=4,
                            d_ff=128, d_kv=16, vocab_size=100, decoder_start_token_id=0)
        model = t.T5Model(config).eval()
    compiled = dynafuse.compile(model, fullgraph=True)
    with torch.no_grad():
        for _ in range(2):
            kwargs = {"input_ids": torch.randint(0, 100, (2, 9)),
                      "decoder_input_ids": torch.randint(0, 100, (2, 5))}
            assert_same_output(compiled(**kwargs), model(**kwargs))
    assert_compiled()
