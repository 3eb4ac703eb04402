"""torchvision and timm models: the vision code users bring, random weights, small inputs.

Not run by the test suite: neither library imports beside this machine's CPU build of torch
2.13.0 (FINDINGS.md U4). ``benchmarks/zoo_gpu.py --zoo vision`` runs it on the H200 (the
device has torchvision; timm travels in ``.gpu/vision.tar.xz``, see
``benchmarks/gpu_setup.sh``) and ``benchmarks/models_cpu.py --zoo vision`` in a venv with
``torch==2.14.1 torchvision==0.29.1 timm``. Each model is built the way its library's users
build it (``torchvision.models.<name>(num_classes=...)``, ``timm.create_model(name, ...)``),
at full width where that is cheap and shrunk through the constructor's own arguments where it
is not; inputs are 2 x 3 x 64 x 64, or the size a model's fixed grid needs.
"""

from __future__ import annotations

from typing import Any, Callable, List

from .zoo import Built, ModelSpec, _pixels


def _torchvision(name: str, make: Callable[[Any], Any], size: int = 64) -> ModelSpec:
    def build() -> Built:
        import torch
        import torchvision
        torch.manual_seed(0)
        model = make(torchvision.models).eval()
        args, kwargs = _pixels((2, 3, size, size))(torch)
        return model, args, kwargs
    return ModelSpec(f"tv_{name}", "torch", build, heavy=True)


#: timm's eval-mode attention-bias cache (LeViT, EfficientFormer, TinyViT) keeps the first
#: call's autograd graph in a dict: a second eager ``backward`` fails ("backward through the
#: graph a second time"), so a compiled run after the eager reference fails the same way.
_BIAS_CACHE = "timm caches attention biases with their autograd graph in eval mode"


def _timm(name: str, size: int = 64, skip_grad: str = "", **kwargs: Any) -> ModelSpec:
    """``size``: the input's height and width (models with a fixed grid need their own)."""
    def build() -> Built:
        import timm
        import torch
        torch.manual_seed(0)
        model = timm.create_model(name, pretrained=False, num_classes=10, **kwargs).eval()
        args, kw = _pixels((2, 3, size, size))(torch)
        return model, args, kw
    return ModelSpec(f"timm_{name}", "torch", build, heavy=True, skip_grad=skip_grad)


_TV_VIT = dict(image_size=64, patch_size=16, num_layers=2, num_heads=2, hidden_dim=32,
               mlp_dim=64, num_classes=10)
_SMALL_VIT = dict(img_size=64, depth=2)

VISION: List[ModelSpec] = [
    _torchvision("resnet18", lambda m: m.resnet18(num_classes=10)),
    _torchvision("resnet50", lambda m: m.resnet50(num_classes=10)),
    _torchvision("resnext50", lambda m: m.resnext50_32x4d(num_classes=10)),
    _torchvision("wide_resnet50", lambda m: m.wide_resnet50_2(num_classes=10)),
    _torchvision("mobilenet_v2", lambda m: m.mobilenet_v2(num_classes=10)),
    _torchvision("mobilenet_v3_small", lambda m: m.mobilenet_v3_small(num_classes=10)),
    _torchvision("efficientnet_b0", lambda m: m.efficientnet_b0(num_classes=10)),
    _torchvision("efficientnet_v2_s", lambda m: m.efficientnet_v2_s(num_classes=10)),
    _torchvision("convnext_tiny", lambda m: m.convnext_tiny(num_classes=10)),
    _torchvision("regnet_y_400mf", lambda m: m.regnet_y_400mf(num_classes=10)),
    _torchvision("shufflenet_v2", lambda m: m.shufflenet_v2_x0_5(num_classes=10)),
    _torchvision("squeezenet", lambda m: m.squeezenet1_1(num_classes=10)),
    _torchvision("densenet121", lambda m: m.densenet121(num_classes=10)),
    _torchvision("mnasnet", lambda m: m.mnasnet0_5(num_classes=10)),
    _torchvision("googlenet", lambda m: m.googlenet(num_classes=10, aux_logits=False,
                                                    init_weights=True)),
    _torchvision("alexnet", lambda m: m.alexnet(num_classes=10)),
    _torchvision("vgg11_bn", lambda m: m.vgg11_bn(num_classes=10)),
    _torchvision("vit", lambda m: m.VisionTransformer(**_TV_VIT)),
    _torchvision("swin_t", lambda m: m.swin_t(num_classes=10)),
    _torchvision("maxvit_t", lambda m: m.maxvit_t(num_classes=10), size=224),
    _timm("resnet18"),
    _timm("resnet50d"),
    _timm("efficientnet_b0"),
    _timm("mobilenetv3_small_050"),
    _timm("convnext_atto"),
    _timm("regnetx_002"),
    _timm("rexnet_100"),
    _timm("ghostnet_100"),
    _timm("dla34"),
    _timm("cspresnet50"),
    _timm("res2net50_14w_8s"),
    _timm("resnest14d"),
    _timm("repvgg_a0"),
    _timm("mobilevit_xxs"),
    _timm("edgenext_xx_small"),
    _timm("poolformer_s12"),
    _timm("fastvit_t8"),
    _timm("efficientformer_l1", size=224, skip_grad=_BIAS_CACHE),
    _timm("levit_128s", img_size=64, skip_grad=_BIAS_CACHE),
    _timm("vit_tiny_patch16_224", **_SMALL_VIT),
    _timm("deit_tiny_distilled_patch16_224", **_SMALL_VIT),
    _timm("eva02_tiny_patch14_224", size=56, img_size=56, depth=2),
    _timm("beit_base_patch16_224", img_size=64, depth=2, embed_dim=64, num_heads=2),
    _timm("cait_xxs24_224", img_size=64, depth=2),
    _timm("xcit_nano_12_p16_224", img_size=64, depth=2),
    _timm("mixer_s16_224", img_size=64),
    _timm("swin_tiny_patch4_window7_224", size=224, depths=(1, 1, 1, 1)),
    _timm("maxvit_nano_rw_256", img_size=64),
    _timm("coatnet_nano_rw_224", img_size=64),
    _timm("tiny_vit_5m_224", size=224, skip_grad=_BIAS_CACHE),
    _timm("efficientvit_b0"),
    _timm("hgnetv2_b0"),
]
