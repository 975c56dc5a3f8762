"""specsim's own inference engine, in torch: a Llama-style decoder with a preallocated KV cache (`model`), passes
run eagerly or replayed from CUDA graphs (`pass_runner`), the accept/reject rules of speculative sampling
(`rejection`), real batched speculative decoding (`speculative`), the served loop (`served_loop`: the simulator's
scheduler on the wall clock), the built-in draft/target pair with its training and weights (`builtin`, `train`,
`weights/`) and the device it runs on (`device`).

Imports point down: the engine uses `scenarios` (model shapes) and `simulator` (the scheduler, trees, policies);
nothing below imports it. `calibrate` measures and validates with it.
"""
