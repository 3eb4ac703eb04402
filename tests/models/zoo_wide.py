"""A wider zoo: 26 more transformers architectures, tiny configs, random weights.

Not run by the test suite (each compile costs seconds); ``benchmarks/models_cpu.py --zoo wide``
and ``benchmarks/zoo_gpu.py --zoo wide`` run it. It found the higher-order-op crash of
FINDINGS.md F6 (Mamba, now in :mod:`.zoo`, with Mixtral). Architectures whose config
arguments changed between transformers releases fail eagerly there (an ``EagerError`` cell),
not in tensorplay_graph.
"""

from __future__ import annotations

from typing import List

from .zoo import ModelSpec, _hf, _ids, _pixels

_LM = dict(num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4,
           num_key_value_heads=2, vocab_size=100, max_position_embeddings=64, use_cache=False)
_ENCODER = dict(num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4,
                vocab_size=100)
_VISION = dict(num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4,
               image_size=32, patch_size=8)


def _spec(name: str, model_cls: str, config_cls: str, inputs, **config) -> ModelSpec:
    return ModelSpec(name, "torch", lambda: _hf(model_cls, config_cls, inputs, **config),
                     heavy=True)


def _lm(name: str, model_cls: str, config_cls: str, **over) -> ModelSpec:
    return _spec(name, model_cls, config_cls, _ids(), **{**_LM, **over})


_AUDIO = lambda torch: ((torch.randn(2, 800, generator=torch.Generator().manual_seed(1)),), {})  # noqa: E731

WIDE: List[ModelSpec] = [
    _lm("mistral", "MistralForCausalLM", "MistralConfig", sliding_window=4),
    _lm("qwen2", "Qwen2ForCausalLM", "Qwen2Config"),
    _lm("qwen3", "Qwen3ForCausalLM", "Qwen3Config", head_dim=8),
    _lm("phi", "PhiForCausalLM", "PhiConfig", num_key_value_heads=4),
    _lm("phi3", "Phi3ForCausalLM", "Phi3Config", pad_token_id=0),
    _lm("gemma", "GemmaForCausalLM", "GemmaConfig", head_dim=8),
    _lm("gemma2", "Gemma2ForCausalLM", "Gemma2Config", head_dim=8, sliding_window=4),
    _lm("qwen2_moe", "Qwen2MoeForCausalLM", "Qwen2MoeConfig", num_experts=4,
        num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32),
    _spec("gpt_neox", "GPTNeoXForCausalLM", "GPTNeoXConfig", _ids(), num_hidden_layers=2,
          hidden_size=32, intermediate_size=64, num_attention_heads=4, vocab_size=100,
          max_position_embeddings=64, use_cache=False),
    _spec("opt", "OPTForCausalLM", "OPTConfig", _ids(), num_hidden_layers=2, hidden_size=32,
          ffn_dim=64, num_attention_heads=4, vocab_size=100, max_position_embeddings=64,
          word_embed_proj_dim=32, use_cache=False),
    _spec("bloom", "BloomForCausalLM", "BloomConfig", _ids(), n_layer=2, hidden_size=32,
          n_head=4, vocab_size=100, use_cache=False),
    _spec("falcon", "FalconForCausalLM", "FalconConfig", _ids(), num_hidden_layers=2,
          hidden_size=32, num_attention_heads=4, vocab_size=100, use_cache=False),
    _spec("gptj", "GPTJForCausalLM", "GPTJConfig", _ids(), n_layer=2, n_embd=32, n_head=4,
          vocab_size=100, n_positions=64, rotary_dim=4, use_cache=False),
    _spec("bart", "BartModel", "BartConfig", _ids(), encoder_layers=1, decoder_layers=1,
          d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64, encoder_attention_heads=4,
          decoder_attention_heads=4, vocab_size=100, max_position_embeddings=64,
          use_cache=False),
    _spec("distilbert", "DistilBertModel", "DistilBertConfig", _ids(), n_layers=2, dim=32,
          hidden_dim=64, n_heads=4, vocab_size=100),
    _spec("roberta", "RobertaModel", "RobertaConfig", _ids(), **_ENCODER),
    _spec("albert", "AlbertModel", "AlbertConfig", _ids(), embedding_size=16, **_ENCODER),
    _spec("deberta_v2", "DebertaV2Model", "DebertaV2Config", _ids(), **_ENCODER),
    _spec("electra", "ElectraModel", "ElectraConfig", _ids(), embedding_size=16, **_ENCODER),
    _spec("deit", "DeiTModel", "DeiTConfig", _pixels((2, 3, 32, 32)), **_VISION),
    _spec("beit", "BeitModel", "BeitConfig", _pixels((2, 3, 32, 32)), **_VISION),
    _spec("dinov2", "Dinov2Model", "Dinov2Config", _pixels((2, 3, 32, 32)), **_VISION),
    _spec("swin", "SwinModel", "SwinConfig", _pixels((2, 3, 32, 32)), image_size=32,
          patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4),
    _spec("regnet", "RegNetModel", "RegNetConfig", _pixels((2, 3, 32, 32)),
          hidden_sizes=[8, 16], depths=[1, 1], embedding_size=8, groups_width=8),
    _spec("segformer", "SegformerModel", "SegformerConfig", _pixels((2, 3, 32, 32)),
          num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16],
          num_attention_heads=[1, 2], patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2]),
    _spec("wav2vec2", "Wav2Vec2Model", "Wav2Vec2Config", _AUDIO, num_hidden_layers=2,
          hidden_size=32, intermediate_size=64, num_attention_heads=4, conv_dim=[16, 16],
          conv_stride=[5, 2], conv_kernel=[10, 3], num_conv_pos_embeddings=16,
          num_conv_pos_embedding_groups=4),
]
