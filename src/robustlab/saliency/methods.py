"""The saliency methods robustlab offers, as data: a module of its own with no heavy import,
so the CLI's ``--help`` can list them without loading numpy, torch or the libraries."""

from __future__ import annotations

# method -> (library, class name, needs a layer)
METHODS: dict[str, tuple[str, str, bool]] = {
    "gradcam": ("grad-cam", "GradCAM", True),
    "gradcam++": ("grad-cam", "GradCAMPlusPlus", True),
    "hirescam": ("grad-cam", "HiResCAM", True),
    "layercam": ("grad-cam", "LayerCAM", True),
    "xgradcam": ("grad-cam", "XGradCAM", True),
    "input_x_gradient": ("captum", "InputXGradient", False),
    "integrated_gradients": ("captum", "IntegratedGradients", False),
}
DEFAULT_METHOD = "gradcam"
# What a map explains: the model's top-1 class or the true label.
TARGETS = ("predicted", "label")

__all__ = ["DEFAULT_METHOD", "METHODS", "TARGETS"]
