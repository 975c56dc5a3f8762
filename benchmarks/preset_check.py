"""The presets against published step times of real engines (scenarios/references.toml): a table of published vs
predicted step times, and the figure docs/preset-vs-published.png. Outside the test suite.

    python benchmarks/preset_check.py [--out docs/preset-vs-published.png]
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import numpy as np

from plots.presets import preset_vs_published
from scenarios.files import atomic_write_bytes
from scenarios.references import compare_presets


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("docs/preset-vs-published.png"))
    a = ap.parse_args()
    rows = compare_presets(batches=(1, 2, 4, 8, 16, 32, 64, 128))
    print(f"{'reference':26s} {'step':18s} {'batch':>5} {'context':>7} {'published ms':>12} {'preset ms':>9} "
          f"{'err':>7}")
    for r in rows:
        print(f"{r.reference:26s} {r.what:18s} {r.batch:5d} {r.context:7d} {1e3 * r.published_s:12.2f} "
              f"{1e3 * r.predicted_s:9.2f} {100 * r.rel_error:+6.1f} %")
    inside = [abs(r.rel_error) for r in rows if r.batch <= 64]
    print(f"|error| at the published batches (1..64): median {100 * np.median(inside):.1f} %, max "
          f"{100 * max(inside):.1f} %")
    h100 = [r for r in rows if r.reference == "llama-3.1-8b-h100-vllm"]
    fig = preset_vs_published(h100, "h100-sxm preset (vLLM engine) against SpecDecode-Bench's fit of vLLM step times, "
                              "Llama-3.1-8B on one H100 (measured at batch 1..64; 128 extrapolated)", fitted_up_to=64)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=130)
    atomic_write_bytes(a.out, buf.getvalue())
    print(f"figure written to {a.out}")


if __name__ == "__main__":
    main()
