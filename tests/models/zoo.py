"""The model zoo: real model code users run, tiny configs, random weights, no downloads.

Each :class:`ModelSpec` builds a fresh ``(model, args, kwargs)`` in eval mode with a fixed
seed. Used by the tests in this folder, the Triton-interpreter tests and
``benchmarks/models_cpu.py``.

Library coverage (see FINDINGS.md): transformers (GPT-2, Llama, BERT, T5, ViT, Whisper,
Mixtral (mixture of experts), Mamba (a selective scan), and its ResNet / MobileNetV2 /
ConvNeXt vision models), TensorPlay's ``nn`` (MLP, a transformer
encoder layer, a conv net, an MLP around a registered custom op) and TensorPlay's own
model zoo (``tensorplay.vision.models``, ``tensorplay.audio.models``). torchvision and timm
are in :mod:`.zoo_vision`, outside the test suite: no torchvision release imports beside the
CPU build of torch 2.13.0, and timm imports torchvision.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Tuple

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # random weights only: never reach a hub

Built = Tuple[Any, tuple, Dict[str, Any]]


@dataclass(frozen=True)
class ModelSpec:
    """One zoo entry. ``heavy``: a compile costs seconds, so tests run a subset of its cells.
    ``skip_grad``: why the model's eager ``grad`` cell cannot be repeated (its runs are skipped,
    the reason shown), or empty."""

    name: str
    framework: str  # "torch" or "tensorplay"
    build: Callable[[], Built]
    heavy: bool = False
    skip_grad: str = ""


# -- transformers ----------------------------------------------------------------------
def _hf(model_cls: str, config_cls: str, inputs: Callable[[Any], Built], **config: Any) -> Built:
    import torch
    import transformers
    torch.manual_seed(0)
    cfg = getattr(transformers, config_cls)(**config)
    model = getattr(transformers, model_cls)(cfg).eval()
    args, kwargs = inputs(torch)
    return model, args, kwargs


def _ids(shape=(2, 8), vocab=100):
    def inputs(torch):
        generator = torch.Generator().manual_seed(1)
        return (torch.randint(0, vocab, shape, generator=generator),), {}
    return inputs


def _pixels(shape):
    return lambda torch: ((torch.randn(*shape, generator=torch.Generator().manual_seed(1)),), {})


def gpt2() -> Built:
    return _hf("GPT2LMHeadModel", "GPT2Config", _ids(), n_layer=2, n_embd=32, n_head=2,
               vocab_size=100, n_positions=32, bos_token_id=0, eos_token_id=0,
               use_cache=False)


def llama() -> Built:
    return _hf("LlamaForCausalLM", "LlamaConfig", _ids(), num_hidden_layers=2, hidden_size=32,
               intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
               vocab_size=100, max_position_embeddings=32, use_cache=False)


def bert() -> Built:
    def inputs(torch):
        ids = torch.randint(0, 100, (2, 8), generator=torch.Generator().manual_seed(1))
        mask = torch.ones(2, 8, dtype=torch.long)
        mask[1, 6:] = 0  # one padded sequence: the mask is live
        return (ids,), {"attention_mask": mask}
    return _hf("BertModel", "BertConfig", inputs, num_hidden_layers=2, hidden_size=32,
               intermediate_size=64, num_attention_heads=2, vocab_size=100,
               max_position_embeddings=32)


def t5() -> Built:
    def inputs(torch):
        g = torch.Generator().manual_seed(1)
        return (), {"input_ids": torch.randint(0, 100, (2, 8), generator=g),
                    "decoder_input_ids": torch.randint(0, 100, (2, 5), generator=g)}
    return _hf("T5ForConditionalGeneration", "T5Config", inputs, num_layers=1,
               num_decoder_layers=1, d_model=32, d_kv=8, d_ff=64, num_heads=4, vocab_size=100,
               use_cache=False)


def vit() -> Built:
    return _hf("ViTForImageClassification", "ViTConfig", _pixels((2, 3, 32, 32)), image_size=32,
               patch_size=8, num_hidden_layers=2, hidden_size=32, intermediate_size=64,
               num_attention_heads=2, num_labels=10)


def whisper() -> Built:
    def inputs(torch):
        g = torch.Generator().manual_seed(1)
        return (torch.randn(1, 16, 32, generator=g),), {
            "decoder_input_ids": torch.randint(0, 100, (1, 4), generator=g)}
    return _hf("WhisperModel", "WhisperConfig", inputs, d_model=32, encoder_layers=1,
               decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
               encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=16, max_source_positions=16,
               max_target_positions=16, vocab_size=100, use_cache=False,
               pad_token_id=0, bos_token_id=0, eos_token_id=0, decoder_start_token_id=0)


def mixtral() -> Built:
    # a mixture of experts: top-2 routing over 4 experts
    return _hf("MixtralForCausalLM", "MixtralConfig", _ids(), num_hidden_layers=2, hidden_size=32,
               intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
               num_local_experts=4, num_experts_per_tok=2, vocab_size=100,
               max_position_embeddings=32, use_cache=False)


def mamba() -> Built:
    # Under a compiler, transformers runs Mamba's selective scan as torch's associative_scan
    # (a higher-order op): tensorplay_graph.compile hands the program to Dynamo (a graph break)
    return _hf("MambaForCausalLM", "MambaConfig", _ids(), num_hidden_layers=2, hidden_size=32,
               state_size=4, vocab_size=100, use_cache=False)


def hf_resnet() -> Built:
    return _hf("ResNetForImageClassification", "ResNetConfig", _pixels((2, 3, 32, 32)),
               embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], num_labels=10)


def hf_mobilenet_v2() -> Built:
    return _hf("MobileNetV2ForImageClassification", "MobileNetV2Config", _pixels((2, 3, 32, 32)),
               image_size=32, depth_multiplier=0.35, num_labels=10)


def hf_convnext() -> Built:
    return _hf("ConvNextForImageClassification", "ConvNextConfig", _pixels((2, 3, 32, 32)),
               hidden_sizes=[16, 32], depths=[1, 1], num_stages=2, num_labels=10)


# -- TensorPlay nn ---------------------------------------------------------------------
def _tp_inputs(*shape: int):
    import tensorplay as tp
    tp.manual_seed(1)
    return (tp.randn(*shape),), {}


def tp_mlp() -> Built:
    import tensorplay as tp
    nn = tp.nn
    tp.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 64), nn.LayerNorm(64),
                          nn.Tanh(), nn.Linear(64, 8)).eval()
    return (model,) + _tp_inputs(4, 16)


def tp_transformer_block() -> Built:
    import tensorplay as tp
    tp.manual_seed(0)
    layer = tp.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0,
                                          batch_first=True).eval()
    return (layer,) + _tp_inputs(2, 8, 32)


def tp_convnet() -> Built:
    import tensorplay as tp
    nn = tp.nn
    tp.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)).eval()
    return (model,) + _tp_inputs(2, 3, 16, 16)


_SOFT_CLIP = None


def soft_clip_op():
    """``zoo::soft_clip``: a registered custom op (fake kernel and backward) for the MLP."""
    global _SOFT_CLIP
    if _SOFT_CLIP is None:
        import tensorplay as tp
        from tensorplay_graph.library import custom_op

        @custom_op("zoo::soft_clip", mutates_args=())
        def soft_clip(x: tp.Tensor, limit: float) -> tp.Tensor:
            return tp.tanh(x / limit) * limit

        @soft_clip.register_fake
        def _(x, limit):
            return tp.empty_like(x)

        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])
            ctx.limit = inputs[1]

        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            t = tp.tanh(x / ctx.limit)
            return grad * (1 - t * t), None

        soft_clip.register_autograd(backward, setup_context=setup_context)
        _SOFT_CLIP = soft_clip
    return _SOFT_CLIP


def tp_mlp_custom_op() -> Built:
    import tensorplay as tp
    nn = tp.nn
    op = soft_clip_op()

    class ClippedMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(16, 64), nn.Linear(64, 8)

        def forward(self, x):
            return self.fc2(op(tp.relu(self.fc1(x)), 2.0) * 1.5)

    tp.manual_seed(0)
    return (ClippedMLP().eval(),) + _tp_inputs(4, 16)


# -- TensorPlay's own model zoo --------------------------------------------------------
def _tp_zoo(factory: Callable[[Any], Any], *shape: int) -> Built:
    import tensorplay as tp
    tp.manual_seed(0)
    return (factory(tp).eval(),) + _tp_inputs(*shape)


def tpv_mobilenet_v3_small() -> Built:
    return _tp_zoo(lambda tp: tp.vision.models.mobilenet_v3_small(num_classes=10), 1, 3, 32, 32)


def tpv_resnet18() -> Built:
    return _tp_zoo(lambda tp: tp.vision.models.resnet18(num_classes=10), 1, 3, 32, 32)


def tpv_squeezenet() -> Built:
    return _tp_zoo(lambda tp: tp.vision.models.squeezenet1_1(num_classes=10), 1, 3, 32, 32)


def tpa_deepspeech() -> Built:
    return _tp_zoo(lambda tp: tp.audio.models.DeepSpeech(n_feature=16, n_hidden=32, n_class=10),
                   1, 1, 20, 16)


def tpa_conv_tasnet() -> Built:
    return _tp_zoo(lambda tp: tp.audio.models.ConvTasNet(
        num_sources=2, enc_kernel_size=8, enc_num_feats=16, msk_kernel_size=3, msk_num_feats=8,
        msk_num_hidden_feats=16, msk_num_layers=2, msk_num_stacks=1), 1, 1, 400)


ZOO: List[ModelSpec] = [
    ModelSpec("gpt2", "torch", gpt2, heavy=True),
    ModelSpec("llama", "torch", llama, heavy=True),
    ModelSpec("bert", "torch", bert, heavy=True),
    ModelSpec("t5", "torch", t5, heavy=True),
    ModelSpec("vit", "torch", vit, heavy=True),
    ModelSpec("whisper", "torch", whisper, heavy=True),
    ModelSpec("mixtral", "torch", mixtral, heavy=True),
    ModelSpec("mamba", "torch", mamba, heavy=True),
    ModelSpec("hf_resnet", "torch", hf_resnet, heavy=True),
    ModelSpec("hf_mobilenet_v2", "torch", hf_mobilenet_v2, heavy=True),
    ModelSpec("hf_convnext", "torch", hf_convnext, heavy=True),
    ModelSpec("tp_mlp", "tensorplay", tp_mlp),
    ModelSpec("tp_transformer_block", "tensorplay", tp_transformer_block),
    ModelSpec("tp_convnet", "tensorplay", tp_convnet),
    ModelSpec("tp_mlp_custom_op", "tensorplay", tp_mlp_custom_op),
    ModelSpec("tpv_mobilenet_v3_small", "tensorplay", tpv_mobilenet_v3_small, heavy=True),
    ModelSpec("tpv_resnet18", "tensorplay", tpv_resnet18, heavy=True),
    ModelSpec("tpv_squeezenet", "tensorplay", tpv_squeezenet, heavy=True),
    ModelSpec("tpa_deepspeech", "tensorplay", tpa_deepspeech),
    ModelSpec("tpa_conv_tasnet", "tensorplay", tpa_conv_tasnet),
]
BY_NAME: Dict[str, ModelSpec] = {spec.name: spec for spec in ZOO}

#: Entry points per framework: "dynamo" = torch.compile(backend="tensorplay_graph"),
#: "tpg" = tensorplay_graph.compile, "tp" = tensorplay.compile(backend="tensorplay_graph").
ENTRY_POINTS = {"torch": ("dynamo", "tpg"), "tensorplay": ("tp", "tpg")}
CPU_BACKENDS = ("auto", "reference", "tilelang")
MODES = ("no_grad", "grad")

#: Heavy models whose every (mode, backend) cell runs; other heavy models run only
#: no_grad / reference and grad / auto per entry point (a Dynamo cell costs seconds).
REPRESENTATIVE = ("gpt2", "bert", "hf_resnet", "tpv_mobilenet_v3_small")


def cells(spec: ModelSpec) -> List[Tuple[str, str, str]]:
    """(entry, mode, backend) cells the tests run for ``spec``; the benchmark runs all."""
    if not spec.heavy or spec.name in REPRESENTATIVE:
        pairs = [(m, b) for m in MODES for b in CPU_BACKENDS]
    else:
        pairs = [("no_grad", "reference"), ("grad", "auto")]
    return [(entry, mode, backend) for entry in ENTRY_POINTS[spec.framework]
            for mode, backend in pairs]


#: The zoos the benchmarks can run: this module's, and the two that need heavy imports.
ZOOS = ("main", "wide", "vision")


def zoo_named(name: str) -> List[ModelSpec]:
    """The specs of zoo ``name`` (one of :data:`ZOOS`)."""
    if name == "wide":
        from .zoo_wide import WIDE
        return WIDE
    if name == "vision":
        from .zoo_vision import VISION
        return VISION
    if name != "main":
        raise ValueError(f"unknown zoo {name!r}; one of {ZOOS}")
    return ZOO
