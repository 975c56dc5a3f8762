"""How a forward pass runs: eagerly, or replayed from a CUDA graph captured once per shape, as serving engines do.

On a GPU an eager pass costs what Python takes to launch its kernels (a decoder layer of ~30 small ops: 0.3-0.6 ms
whatever its size); an engine captures each shape it runs once and replays it (vLLM's `capture_model`, gpt-fast's
``torch.compile(mode="reduce-overhead")``). `GraphRunner` does the same: a pass of a given shape (model, batch, new
tokens, keys read, window pattern) is captured the first time it is asked for, with static input buffers; later
passes copy their inputs in, replay, and read the static output.

The output of a replay lives in the graph's memory and is valid until the next pass of the same shape: callers
consume it (sample, compare) before running that shape again, as the engine's step does.

The capture mechanism is a `GraphBackend`: `CudaGraphs` on a GPU; `EagerStandIn` in tests on the CPU, which
"captures" by running the pass and "replays" by running it again on the static buffers into the same output tensor,
so the static-buffer logic (inputs copied in, one capture per shape, output in place) is exercised without a GPU.

A graph holds the addresses of the tensors its pass read, not references to them: whatever the pass reads (the static
inputs, the window's offsets and visibility) must stay alive as long as the graph may replay, or the allocator hands
that memory to other tensors and a replay reads them. `Captured` keeps the pass itself, and with it every static
tensor it reads; the stand-in holds the pass only weakly, so a runner that let it go fails on the CPU as it would
read freed memory on a GPU (there, the window's offsets freed after capture made a replay read its rotary positions
from reused memory: "index out of bounds" in the rotary tables' gather).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch

from engine.model import Decoder, Window


class PassRunner(Protocol):
    mode: str  # "eager" or "graph"
    captures: int  # graphs captured so far (a pass that captured is not a steady-state timing)

    def __call__(self, model: Decoder, tokens: torch.Tensor, window: Window, pattern: tuple) -> torch.Tensor: ...

    def reset(self) -> None: ...


class EagerRunner:
    """Every pass runs op by op from Python (the CPU's way, and `--eager` on a GPU)."""

    mode = "eager"
    captures = 0

    def __call__(self, model: Decoder, tokens: torch.Tensor, window: Window, pattern: tuple) -> torch.Tensor:
        return model(tokens, window)

    def reset(self) -> None:
        pass


@dataclass
class Captured:
    """One captured pass: its static inputs, its output, how to replay it, and the pass itself (which holds every
    static tensor it reads alive: the graph holds only their addresses)."""

    replay: Callable[[], None]
    output: torch.Tensor
    tokens: torch.Tensor
    start: torch.Tensor
    positions: torch.Tensor | None
    run: Callable[[], torch.Tensor]


class GraphBackend(Protocol):
    def capture(self, fn: Callable[[], torch.Tensor]) -> tuple[Callable[[], None], torch.Tensor]:
        """Capture `fn` (which reads only static buffers); return (replay, the output tensor replays fill)."""
        ...


class CudaGraphs:
    """`torch.cuda.CUDAGraph` capture after a warm-up on a side stream (lazy initialisation of cuBLAS and friends
    must not happen inside a capture). Each graph keeps its own memory pool."""

    def __init__(self, warmup: int = 2) -> None:
        self.warmup = warmup
        self.graphs: list[torch.cuda.CUDAGraph] = []

    def capture(self, fn: Callable[[], torch.Tensor]) -> tuple[Callable[[], None], torch.Tensor]:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(self.warmup):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = fn()
        self.graphs.append(graph)
        graph.replay()
        return graph.replay, out


@dataclass
class EagerStandIn:
    """A graph backend for tests on the CPU: capture runs the pass once, replay runs it again into the same output
    tensor. Counts both, so tests can see that each shape is captured once and replayed after."""

    captures: int = 0
    replays: int = 0

    def capture(self, fn: Callable[[], torch.Tensor]) -> tuple[Callable[[], None], torch.Tensor]:
        self.captures += 1
        out = fn()
        held = weakref.ref(fn)  # as a graph holds its pass's tensors: by address, not by reference

        def replay() -> None:
            self.replays += 1
            pass_ = held()
            if pass_ is None:
                raise RuntimeError("a captured pass was replayed after its static tensors were freed: keep it alive "
                                   "(on a GPU the replay would read reused memory)")
            out.copy_(pass_())

        return replay, out


@dataclass
class GraphRunner:
    """Passes replayed from graphs captured per shape (see the module docstring)."""

    backend: GraphBackend
    mode: str = "graph"
    graphs: dict[tuple, Captured] = field(default_factory=dict)
    captures: int = 0

    def __call__(self, model: Decoder, tokens: torch.Tensor, window: Window, pattern: tuple) -> torch.Tensor:
        """`pattern` names the window's offsets and visibility (they are fixed per pattern and captured with it);
        the batch, the new tokens, the keys read and whether positions are given complete the shape."""
        key = (model.uid, model.cache_version, tuple(tokens.shape), window.keys, pattern,
               window.positions is not None, window.row0)
        entry = self.graphs.get(key)
        if entry is None:
            self._forget_stale(model)
            entry = self._capture(model, tokens, window)
            self.graphs[key] = entry
            self.captures += 1
            return entry.output
        entry.tokens.copy_(tokens)
        entry.start.copy_(window.start)
        if entry.positions is not None:
            assert window.positions is not None
            entry.positions.copy_(window.positions)
        entry.replay()
        return entry.output

    def _capture(self, model: Decoder, tokens: torch.Tensor, window: Window) -> Captured:
        static_tokens, static_start = tokens.clone(), window.start.clone()
        static_positions = None if window.positions is None else window.positions.clone()
        static = Window(static_start, window.offsets.clone(), window.visible.clone(), window.keys, static_positions,
                        window.row0)

        def run() -> torch.Tensor:
            return model(static_tokens, static)

        replay, out = self.backend.capture(run)
        return Captured(replay, out, static_tokens, static_start, static_positions, run)

    def _forget_stale(self, model: Decoder) -> None:
        """Graphs of this model's previous caches can never replay again: free them."""
        for key in [k for k in self.graphs if k[0] == model.uid and k[1] != model.cache_version]:
            del self.graphs[key]

    def reset(self) -> None:
        """Drop every captured graph (their memory goes back to the allocator)."""
        self.graphs.clear()


def make_runner(device: torch.device, eager: bool = False) -> PassRunner:
    """CUDA graphs on a GPU unless `eager`; eager on the CPU."""
    if device.type == "cuda" and not eager:
        return GraphRunner(CudaGraphs())
    return EagerRunner()
