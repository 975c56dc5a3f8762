"""Number formats of weights and KV caches: bytes per element with their scales, which tensor-core rate a format's
matmuls run at, and the cache a 4-bit weight format keeps."""

from __future__ import annotations

# Weight formats with their scales: mxfp4 (OCP microscaling, gpt-oss experts) stores 4-bit E2M1 values plus one
# 8-bit E8M0 scale per 32 = 4.25 bits; nvfp4 (NVIDIA, Blackwell) one FP8 E4M3 scale per 16 = 4.5 bits (its one FP32
# scale per tensor is negligible); fp8 per tensor or per channel is 1 byte (DeepSeek-V3's 128 x 128 block scales add
# 4 bytes per 16,384, 0.02 %).
# Weight-only formats, activations in bf16/fp16: w4a16 (AWQ/GPTQ, 4-bit integers with a 16-bit scale and zero point
# per group of 128: 4 + 32/128 = 4.25 bits); llama.cpp's GGUF types by their bits per weight over a whole model
# (ggml-org/llama.cpp tools/quantize README: Q4_K_M 4.85, Q5_K_M 5.69 on Llama-3-8B; Q8_0 8.5 = 8-bit values plus an
# fp16 scale per block of 32).
DTYPE_BYTES: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5,
                                 "mxfp4": 4.25 / 8, "nvfp4": 4.5 / 8, "w4a16": 4.25 / 8, "q4_k_m": 4.85 / 8,
                                 "q5_k_m": 5.69 / 8, "q8_0": 8.5 / 8}
# Which tensor-core rate a weight format's matmuls run at, in order of preference: fp4 formats on fp4 tensor cores
# (Blackwell: activations quantised to fp4/fp8 as TensorRT-LLM's and vLLM's NVFP4/MXFP4 kernels do), else
# dequantised in the kernel to bf16 (Marlin-style weight-only kernels on Hopper and Ampere); int4 is weight-only.
COMPUTE_RATES: dict[str, tuple[str, ...]] = {
    "fp16": ("fp16", "bf16"), "bf16": ("bf16", "fp16"), "int4": ("int4", "bf16"),
    "nvfp4": ("fp4", "bf16"), "mxfp4": ("fp4", "bf16"),
    # A weight-only kernel dequantises every weight tile again for each tile of rows (Marlin, Frantar et al. 2024,
    # arXiv 2408.11743: 16-row tiles; TensorRT's INT4-AWQ GEMM), so its matmuls run below the tensor cores' bf16
    # rate as the rows grow: a preset gives that measured rate as w4a16 where a source measured it, else bf16.
    "w4a16": ("w4a16", "bf16", "fp16"),
    # llama.cpp's MMQ kernels quantise the activations to q8_1 and multiply on int8 tensor cores where the GPU has
    # them (ggml-cuda mmq.cuh), dequantising the K-quants' sub-block scales per tile; fp16 otherwise
    "q4_k_m": ("int8", "fp16", "bf16"), "q5_k_m": ("int8", "fp16", "bf16"), "q8_0": ("int8", "fp16", "bf16")}
# A quantised weight format's KV cache, where the model does not name one: fp8 for the 4-bit float formats (engines
# do not keep a cache in fp4 by default: TensorRT-LLM's and vLLM's NVFP4 checkpoints ship an fp8 cache); a
# weight-only format keeps its activations' 16-bit cache (llama.cpp's default cache is f16)
KV_OF_WEIGHTS: dict[str, str] = {"nvfp4": "fp8", "mxfp4": "fp8", "w4a16": "bf16", "q4_k_m": "fp16", "q5_k_m": "fp16",
                                 "q8_0": "fp16"}


def dtype_bytes(dtype: str) -> float:
    """Bytes per element of `dtype`; raises ValueError naming the known dtypes."""
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPE_BYTES)}") from None
