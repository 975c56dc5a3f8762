"""What expert parallelism waits on: each MoE layer's all-to-all dispatch (every token to the GPUs of its top-k
experts) and combine (their outputs back), per GPU.

Two prices, the first that applies:

- `A2aTable`: DeepEP's kernels as AIConfigurator measured them (aiconfigurator-core 0.12,
  ``systems/data/SYSTEM/comm/sglang/VERSION/wideep_deepep_{ll,normal}_perf.parquet``: dispatch and combine latency by
  tokens per GPU and nodes, for one hidden size, top-k and expert count), log-log in tokens and linear in log2 nodes
  between the measured points, held at the largest node count beyond it (DeepEP's own README table flattens from
  EP 64 on).
- `ExpertLinks.a2a_s`: a latency plus the bytes leaving each GPU over its links: the share bound for GPUs of its
  NVLink domain at the NVLink bandwidth, the rest over the scale-out NIC (the slower of the two decides, they run
  at once). Dispatch sends FP8 with a scale per 128 elements (DeepEP's low-latency dispatch), combine BF16.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DISPATCH_BYTES = 1.0 + 4.0 / 128  # fp8 element + an fp32 scale per 128 (DeepEP low-latency dispatch)
COMBINE_BYTES = 2.0  # bf16


@dataclass(frozen=True)
class A2aTable:
    """Measured dispatch and combine times (s) on a grid of nodes x tokens per GPU, one DeepEP mode."""

    mode: str  # "ll" (low latency, decode) or "normal" (prefill)
    nodes: tuple[int, ...]  # increasing
    tokens: tuple[int, ...]  # tokens per GPU, increasing
    dispatch_s: tuple[tuple[float, ...], ...]  # [node][token]; nan where not measured
    combine_s: tuple[tuple[float, ...], ...]
    source: str = ""

    def _at(self, table: tuple[tuple[float, ...], ...], nodes: float, tokens: np.ndarray) -> np.ndarray:
        t = np.maximum(np.asarray(tokens, dtype=float), 1.0)
        per_node = []
        for row in table:
            r = np.asarray(row, dtype=float)
            ok = np.isfinite(r)
            xs, ys = np.log2(np.asarray(self.tokens, dtype=float)[ok]), np.log2(r[ok])
            x = np.log2(t)
            slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])  # beyond the largest: the last segment's power law
            y = np.where(x > xs[-1], ys[-1] + slope * (x - xs[-1]), np.interp(x, xs, ys))
            per_node.append(2.0 ** y)
        if len(self.nodes) == 1:
            return per_node[0]
        xn = np.log2(np.asarray(self.nodes, dtype=float))
        q = np.clip(np.log2(max(nodes, 1.0)), xn[0], xn[-1])
        i = int(np.clip(np.searchsorted(xn, q, side="right") - 1, 0, len(xn) - 2))
        w = (q - xn[i]) / (xn[i + 1] - xn[i])
        return per_node[i] * (1 - w) + per_node[i + 1] * w

    def a2a_s(self, nodes: float, tokens_per_gpu: np.ndarray) -> np.ndarray:
        """Dispatch plus combine of one MoE layer."""
        return self._at(self.dispatch_s, nodes, tokens_per_gpu) + self._at(self.combine_s, nodes, tokens_per_gpu)


@dataclass(frozen=True)
class ExpertLinks:
    """The links an expert-parallel all-to-all crosses, and any measured tables of it."""

    nvlink_bytes_per_s: float  # per GPU, per direction, achieved by the all-to-all inside the NVLink domain
    scale_out_bytes_per_s: float  # per GPU, per direction, achieved over the NIC (InfiniBand / RoCE)
    latency_s: float  # one dispatch or combine
    domain_gpus: int = 8  # GPUs one NVLink domain joins (8 in an HGX node, 72 in a GB200 NVL72 rack)
    tables: tuple[A2aTable, ...] = ()  # measured (AIConfigurator), for this model's hidden size / top-k / experts
    source: str = ""

    def table(self, mode: str) -> A2aTable | None:
        return next((t for t in self.tables if t.mode == mode), None)

    def a2a_s(self, ep: int, tokens_per_gpu: np.ndarray, topk: int, d_model: int, mode: str = "ll") -> np.ndarray:
        """Dispatch plus combine of one MoE layer over `ep` GPUs, each sending `tokens_per_gpu` tokens to top-`topk`
        experts: a measured table where one is given, else the links' model (module docstring)."""
        t = np.asarray(tokens_per_gpu, dtype=float)
        if ep <= 1:
            return 0.0 * t
        table = self.table(mode)
        if table is not None:
            return table.a2a_s(ep / self.domain_gpus, t)
        per_token = topk * d_model * (DISPATCH_BYTES + COMBINE_BYTES) * (ep - 1) / ep
        off = max(ep - self.domain_gpus, 0) / (ep - 1)  # destinations beyond this GPU's NVLink domain
        wire = np.maximum(t * per_token * (1 - off) / self.nvlink_bytes_per_s,
                          t * per_token * off / self.scale_out_bytes_per_s)
        return 2 * self.latency_s + wire
