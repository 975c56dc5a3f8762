"""Measurement and validation with the real engine: micro-benchmarks of the device, grids of timed passes, the
engine's own overheads and tax, measured acceptance, the calibration that writes a profile (`calibration`), the
profile fitted from another engine's step times (`step_import`), and the validations (`validate`,
`served_validation`, `exactness`). Above `engine` and `scenarios`; imports torch only inside what times passes."""
