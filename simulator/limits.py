"""The largest sizes a user can ask for, each with the reason it is the largest. The CLI checks them before any work
starts; past them a request is not a bigger version of the same question but a different one (or one no device
holds), so it gets a one-line error that names the bound and why.
"""

from __future__ import annotations

MAX_DRAFT_TOKENS = 64
WHY_DRAFT = ("a verification pass of more than 64 drafted tokens per sequence is a prefill, not a speculative step; "
             "the chance of accepting 64 drafts in a row is below 1e-3 even at alpha 0.9")
MAX_TREE_NODES = 4096
WHY_TREE = ("a tree of more than 4,096 nodes is verified by a pass as large as a long prefill; give a smaller one "
            "(e.g. 4,2,2,1)")
MAX_BATCH = 2**29
WHY_BATCH = ("no preset device holds one cached token each for more sequences: the smallest KV cache of any preset "
             "model (specsim-draft, 512 bytes a token) fills the largest device (MI300X, 192 GB) at 337 million")
MAX_CONTEXT = 2**29
WHY_CONTEXT = ("no preset device holds more cached tokens of one sequence: the smallest KV cache of any preset model "
               "(specsim-draft, 512 bytes a token) fills the largest device (MI300X, 192 GB) at 337 million")
MAX_RANGE_VALUES = 65_536
WHY_RANGE = "a sweep of more values than that is a different question: use a stepped range such as 1..N:x2"
MAX_TP = 64
WHY_TP = "tensor parallelism past 64 GPUs spans several nodes, whose links this model does not price"
MAX_REQUESTS = 2_000_000
WHY_REQUESTS = "two million requests are a day of traffic at 23 req/s; simulate a day at a time"
MAX_ENGINES = 4096
WHY_ENGINES = "a fleet of more than 4,096 engines is planned by scaling a smaller one"
MAX_LOAD_RPS = 1_000_000.0
WHY_LOAD = "a load above a million requests per second needs more engines than a fleet simulation holds"
MAX_COST_RATIO = 1000.0
WHY_COST_RATIO = "a draft a thousand times as costly as the target is no draft"
