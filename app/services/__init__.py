"""Service functions: request model -> domain call (through the latency cache) -> response model.

The API and the CLI are thin adapters over these functions. Every function here is synchronous
and CPU-bound; the API runs them in a worker thread (``anyio.to_thread.run_sync``).

One module per job, imported by what needs it (this package imports none of them, so a command
loads only its own service, its wire models and the core it runs):

    context      ServiceContext (settings, cache, counters, runner memo), create_context
    scenario     the resolver: a request -> its Scenario (app/core/scenario.py) and its echo
    resolve      model / device / quantization / scheduler resolution, inline-config checks
    sizing       the engine budget, the request's WorkloadSpec, simulation-size bounds
    cost_model   the cache-backed latency model (ForwardRecord, CachedServingModel, ModelFactory)
    chunk_plan   POST /v1/chunk-plan
    simulate     POST /v1/simulate
    simulate_fields  which fields a simulate request takes (workload and device count)
    disagg_fields    which fields a mode disagg request takes, its pools' layouts and devices
    disagg_simulate  POST /v1/simulate with mode disagg (a prefill pool and a decode pool)
    optimize     POST /v1/optimize (disagg_optimize: its mode disagg)
    capacity     POST /v1/plan
    forward      POST /v1/forward and chunkwise forward (one path: plan_forward / run_forward)
    validate     chunkwise validate (the replay of measured data)
    catalog      GET /v1/models, GET /v1/devices
"""
