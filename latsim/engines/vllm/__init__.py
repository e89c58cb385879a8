"""vLLM 0.25.1 (v1 engine): its scheduling policy and fast twin, memory plan, server defaults,
CUDA-graph limit, asynchronous launch model and fitted host terms."""
