"""When a preset's answer rests on a measured kernel that contradicts the datasheets' order: this GPU priced slower
than one its datasheet beats on both bandwidth and FLOP/s (a B200 against an H200, say, where vLLM 0.24's
block-scaled fp8 GEMM on the B200 is a 156 us fallback against 55.5 us on the H200). The measurement may be right
for that engine's version; the user should know the answer rests on it, which kernel it is, and how to choose
otherwise (another engine's kernels, another GPU). Said on stderr and in --json (`Setup.meta`'s
``datasheet_order``); docs/kernels.md has the grid (benchmarks/routes_check.py)."""

from __future__ import annotations

from simulator.cost import CostModel
from simulator.specs import HardwareSpec, ModelSpec

ENGINES = ("vllm", "sglang", "tensorrt-llm")
SLOWER = 1.05  # priced more than 5 % slower than a GPU the datasheet beats: beyond the presets' own fit error
CONTEXT = 1024  # the step priced: batch 1 (where fixed kernel times weigh most), 1,024 cached tokens


def dominated_by(hw: HardwareSpec, other: HardwareSpec, dtype: str) -> bool:
    """`other` has no more bandwidth and no more FLOP/s at `dtype` than `hw`, and less of one."""
    a = (hw.mem_bw_bytes_per_s, dict(hw.peak_flops_per_s).get(dtype, 0.0))
    b = (other.mem_bw_bytes_per_s, dict(other.peak_flops_per_s).get(dtype, 0.0))
    return b[0] <= a[0] and b[1] <= a[1] and b != a and b[1] > 0


def step_s(hw: HardwareSpec, target: ModelSpec) -> float:
    return CostModel.from_hardware(hw, target.dtype).plain_step_s(target, 1, CONTEXT)


def kernel_said(hw: HardwareSpec, other: HardwareSpec) -> str:
    """The measured kernel term of `hw` that is slower than `other`'s by the most, in words."""
    def floor_us(h: HardwareSpec) -> float:
        return 1e6 * h.kernels.fp8_block_floor[0][1] if h.kernels.fp8_block_floor else 0.0

    terms = [(floor_us(hw) - floor_us(other), f"block-scaled fp8 GEMM floor {floor_us(hw):.1f} us against "
              f"{floor_us(other):.1f} us"),
             (1e6 * (hw.kernels.mla_layer_s - other.kernels.mla_layer_s), f"MLA generation module "
              f"{1e6 * hw.kernels.mla_layer_s:.1f} us a layer against {1e6 * other.kernels.mla_layer_s:.1f} us")]
    gap, said = max(terms)
    return said if gap > 0 else "its measured kernel times (scenarios/hardware.toml)"


def datasheet_order_notes(hw_name: str, engine: str, target: ModelSpec) -> list[str]:
    """One note per GPU the datasheet says `hw_name` beats but the preset prices faster for `target` (plain decoding
    at batch 1): naming the kernel and the engines whose kernels keep the datasheet's order."""
    from scenarios import hardware_names, load_hardware

    hw = load_hardware(hw_name, engine)
    mine = step_s(hw, target)
    notes = []
    for name in hardware_names():
        if name == hw_name:
            continue
        try:
            other = load_hardware(name, engine)
        except Exception:  # a preset this engine has no costs for
            continue
        if not dominated_by(hw, other, target.dtype) or not other.kernels.source:
            continue  # only against another GPU priced from measured kernels too: the roofline alone is no order
        theirs = step_s(other, target)
        if mine <= theirs * SLOWER:
            continue
        ok = []
        for e in ENGINES:
            if e == engine:
                continue
            try:
                if step_s(load_hardware(hw_name, e), target) <= step_s(load_hardware(name, e), target) * SLOWER:
                    ok.append(e)
            except Exception:
                continue
        choose = (f"--engine {' or '.join(ok)} price{'s' if len(ok) == 1 else ''} {hw_name} with "
                  f"{'its' if len(ok) == 1 else 'their'} kernels, which keep the datasheet's order; "
                  if ok else "")
        notes.append(f"{hw_name} is priced slower than {name} for {target.name} at batch 1 ({1e3 * mine:.2f} against "
                     f"{1e3 * theirs:.2f} ms a step) though its datasheet is faster (bandwidth "
                     f"{hw.mem_bw_bytes_per_s / 1e12:.1f} against {other.mem_bw_bytes_per_s / 1e12:.1f} TB/s): the "
                     f"answer rests on {engine}'s measured {kernel_said(hw, other)} on {name}; {choose}"
                     f"or --hardware {name}, or calibrate this GPU (docs/kernels.md, Routes that disagree)")
    return notes


# What benchmarks/routes_check.py measured (docs/kernels.md, Routes that disagree): where a preset and the kernel
# tables of the same GPU (`calibrate --from aiconfigurator:SYSTEM/vllm`) differ by more than 15 % at some batch of
# 1..256, context 1,024, by target: (the range over the GPUs, the batches, why, whether the tables' routing closes it)
ROUTES_DIFFER = {
    "qwen3-30b-a3b": ("25-33 % on the plain step", "16", "the fused-MoE layers: this preset routes tokens uniformly, "
                      "the tables were measured under a power law (--power-law-routing 1.2 prices that: the MoE layers "
                      "then within 7 % at batch 16)", True),
    "deepseek-v3": ("18-38 % on the plain step, 20-52 % on the speed-up with MTP", "4-256",
                    "the fused-MoE layers (the preset's fitted kernel against the measured one) and the MTP module, "
                    "which a profile prices by its formula: no fused-MoE kernel, no all-reduce", False),
}


def route_notes(hw_name: str, target: ModelSpec, routed: bool = False) -> list[str]:
    """One note where this preset's GPU has AIConfigurator kernel tables and the two routes were found to differ by
    more than 15 % for `target` (benchmarks/routes_check.py): which way to look, and why. `routed`: the user gave
    the MoE routing (--power-law-routing, --routing-skew), which closes a difference due to routing alone."""
    from scenarios.kernel_systems import PRESET_OF

    found = ROUTES_DIFFER.get(target.name.split("@")[0])
    system = next((s for s, p in PRESET_OF.items() if p == hw_name), None)
    if found is None or system is None:
        return []
    how, batches, why, routing = found
    if routed and routing:
        return []
    name = target.name.split("@")[0]
    return [f"{hw_name}'s kernel tables (calibrate --from aiconfigurator:{system}/vllm) price {name} {how} apart "
            f"from this preset at batch {batches}: {why} (docs/kernels.md, Routes that disagree)"]
