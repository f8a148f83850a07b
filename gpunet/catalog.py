"""The code tables behind NodeSpec.gpu_model and .region (the program stores only u16 codes;
0 means "any" in lease terms and is never a node's value).

Codes are append-only: a code once published keeps its meaning on chain forever.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpunet.errors import GpunetError
from gpunet.limits import ANY


@dataclass(frozen=True)
class GpuModel:
    code: int
    name: str  # the CLI name, e.g. "H100"
    vram_gb: int  # the usual memory per GPU, a default for the CLI
    nvml_pattern: str  # a regex matched against nvmlDeviceGetName()
    # Peak dense FP16 tensor throughput with FP32 accumulation, in TFLOP/s (no sparsity): what GPU
    # verification's deadline is derived from (gpunet.verification). From NVIDIA's datasheets and
    # architecture whitepapers: H100/H200 SXM 989; A100 312; L40S 362; B200 2,250 (HGX B200 per GPU);
    # the GeForce cards' "FP16 Tensor TFLOPS with FP32 accumulate" (Ampere, Ada and Blackwell
    # whitepapers): RTX 3090 71, RTX 4090 165, RTX 5090 210; A10 125 (A10G: the A10's datasheet);
    # T4 65; L4 121.
    fp16_tflops: float
    # Peak memory bandwidth in TB/s: what the memory check's fill deadline is derived from
    # (gpunet.vram). From NVIDIA's datasheets: H100 SXM 3.35; H200 4.8; A100 80GB SXM 2.039; L40S
    # 0.864; RTX 4090 1.008; RTX 3090 0.936; A10G 0.6 (the A10's); T4 0.32; B200 7.7 (HGX B200 per
    # GPU); RTX 5090 1.792; L4 0.3.
    memory_tbps: float
    # Peak dense TF32 tensor throughput in TFLOP/s (no sparsity: the datasheets' figures marked with
    # sparsity, halved): what a real GPU's compute check is expected at (gpunet.verification
    # multiplies in float32 with TF32 tensor cores). From NVIDIA's datasheets and whitepapers:
    # H100/H200 SXM 494.7 (989 with sparsity); A100 156 (312); L40S 183 (366); A10 62.5 (125; A10G:
    # the A10's, NVIDIA publishes none for it); L4 60 (120); B200 1,100 (the HGX B200 per-GPU table's
    # 2.2 PFLOPS with sparsity); the GeForce whitepapers: RTX 3090 35.6, RTX 4090 82.6. RTX 5090
    # 104.8 is derived, not published: half its FP16 rate with FP32 accumulation, as on the 4090. T4
    # (Turing) has no TF32 tensor cores: its FP32 peak, 8.1.
    tf32_tflops: float


GPU_MODELS: tuple[GpuModel, ...] = (
    GpuModel(1, "H100", 80, r"\bH100\b", 989, 3.35, 494.7),
    GpuModel(2, "H200", 141, r"\bH200\b", 989, 4.8, 494.7),
    GpuModel(3, "A100", 80, r"\bA100\b", 312, 2.039, 156),
    GpuModel(4, "L40S", 48, r"\bL40S\b", 362, 0.864, 183),
    GpuModel(5, "RTX4090", 24, r"RTX 4090\b", 165, 1.008, 82.6),
    GpuModel(6, "RTX3090", 24, r"RTX 3090\b", 71, 0.936, 35.6),
    GpuModel(7, "A10G", 24, r"\bA10G\b", 125, 0.6, 62.5),
    GpuModel(8, "T4", 16, r"\bT4\b", 65, 0.32, 8.1),
    GpuModel(9, "B200", 180, r"\bB200\b", 2250, 7.7, 1100),
    GpuModel(10, "RTX5090", 32, r"RTX 5090\b", 210, 1.792, 104.8),
    GpuModel(11, "L4", 24, r"\bL4\b", 121, 0.3, 60),
)

REGIONS: dict[int, str] = {
    1: "us-east",
    2: "us-west",
    3: "eu-west",
    4: "eu-central",
    5: "asia-east",
    6: "asia-south",
    7: "south-america",
    8: "oceania",
    9: "africa",
}


class CatalogError(GpunetError, ValueError):
    """An unknown GPU model or region name/code; the message lists the known ones."""


def gpu_model(name_or_code: str | int) -> GpuModel:
    """Looks a model up by CLI name (case-insensitive) or code."""
    for model in GPU_MODELS:
        if str(name_or_code).upper() in (model.name, str(model.code)):
            return model
    known = ", ".join(m.name for m in GPU_MODELS)
    raise CatalogError(f"unknown GPU model {name_or_code!r}; known models: {known}")


def gpu_model_name(code: int) -> str:
    """The model's name; codes the chain holds but this table lacks still get a name."""
    if code == ANY:
        return "any"
    return next((m.name for m in GPU_MODELS if m.code == code), f"model-{code}")


def gpu_model_from_nvml(device_name: str) -> GpuModel:
    """The model of an NVML device name such as 'NVIDIA H100 80GB HBM3'."""
    for model in GPU_MODELS:
        if re.search(model.nvml_pattern, device_name):
            return model
    raise CatalogError(
        f"GPU {device_name!r} is not a model gpunet lists; known models: " + ", ".join(m.name for m in GPU_MODELS)
    )


def region(name_or_code: str | int) -> int:
    """A region code from its name (case-insensitive) or code."""
    for code, name in REGIONS.items():
        if str(name_or_code).lower() in (name, str(code)):
            return code
    raise CatalogError(f"unknown region {name_or_code!r}; known regions: {', '.join(REGIONS.values())}")


def region_name(code: int) -> str:
    return "any" if code == ANY else REGIONS.get(code, f"region-{code}")
