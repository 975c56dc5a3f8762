"""`specsim hardware list|show`: the GPU presets, and one written out as a hardware file to edit and pass to
`--hardware my-gpu.toml` (the `hardware` group `specsim.py` registers; the file's fields: docs/hardware.md)."""

from __future__ import annotations

import click


@click.group(name="hardware")
def hardware_group() -> None:
    """The GPU presets, and your own GPU as a file.

    \b
    specsim hardware list
    specsim hardware show rtx-4090 > my-gpu.toml     # edit it (docs/hardware.md), then:
    specsim predict --hardware my-gpu.toml --acceptance iid:0.7 --batch 1..16 --k 0..4
    """


@hardware_group.command(name="list")
def hardware_list() -> None:
    """Every preset: its name, bandwidth, bf16 FLOP/s, memory and whether its achieved fractions were measured.

    \b
    specsim hardware list
    """
    from scenarios import hardware_names, hardware_table

    click.echo(f"{'preset':<20} {'TB/s':>6} {'bf16 TFLOP/s':>12} {'GB':>6}  rates     name")
    for name in hardware_names():
        d = hardware_table(name)
        peaks = d["peak_TFLOP_per_s"]
        rates = "assumed" if str(d.get("rates_source", "assumed")).startswith("assumed") else "measured"
        click.echo(f"{name:<20} {d['mem_bw_GB_per_s'] / 1e3:>6.2f} {peaks.get('bf16', peaks.get('fp16', 0)):>12g} "
                   f"{d['mem_GB']:>6g}  {rates:<8}  {d['name']}")


@hardware_group.command(name="show")
@click.argument("name")
def hardware_show(name: str) -> None:
    """A preset (or a hardware file) written as a hardware file: its fields, the defaults it takes, its engines'
    own kernels. Redirect it to a file, edit it, and give the file to --hardware.

    \b
    specsim hardware show h100-sxm > my-gpu.toml
    specsim predict --hardware my-gpu.toml --acceptance iid:0.7
    """
    from scenarios import _table, hardware_table
    from scenarios.hardware_file import hardware_toml, is_hardware_file

    stem = name.rsplit("/", 1)[-1].removesuffix(".toml") if is_hardware_file(name) else name.lower()
    click.echo(hardware_toml(stem, hardware_table(name), _table("hardware")["defaults"]), nl=False)
