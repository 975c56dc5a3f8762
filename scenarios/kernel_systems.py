"""AIConfigurator's systems (its kernel tables, `aiconfigurator-core`) and the hardware preset each one describes:
preset data that both the kernel-table route (`calibrate.aiconfigurator`) and the presets' own checks
(`scenarios.datasheet_order`) read, so it lives with the presets (scenarios/ imports no measurement code)."""

PRESET_OF = {"a100_sxm": "a100-80gb-sxm", "h100_sxm": "h100-sxm", "h200_sxm": "h200", "b200_sxm": "b200-sxm",
             "b300_sxm": "b300-sxm", "gb200": "gb200", "gb300": "gb300", "l40s": "l40s", "l4": "l4"}
