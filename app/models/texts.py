"""Descriptions that several wire models share: one text per concept, its unit stated once.

Memory is in decimal gigabytes everywhere in the API (:data:`GB`); times are in ms unless a
name ends in ``_s``; throughputs are per second.
"""

from __future__ import annotations

#: The unit of every ``*_gb`` field.
GB = "GB (decimal, 10^9 bytes)"

# -- a parallel layout (optimize rows, probes, Pareto points, forward) --------------------------
PARALLEL = "the layout's label, e.g. 'TP4 DP2' or 'TP8 DP1 EP8' (PPn shown when pp > 1)"
TP = "tensor-parallel size: devices each layer's weights are split over"
DP = "data-parallel ranks: replicas, or the attention DP ranks of one MoE instance"
EP = "expert-parallel size: devices the MoE experts are split over (1: none)"
PP = "pipeline-parallel stages (devices in series)"
#: The search an optimize row, probe or Pareto point belongs to.
ROLE = "the search it belongs to: agg, or prefill / decode (the disaggregated modes, pd_ratio)"

# -- request fields of several resources --------------------------------------------------------
TP_SIZE = "tensor-parallel size of one replica (devices)"
EP_SIZE = "MoE expert-parallel size (devices the experts are split over; 1: none)"
TTFT_LIMIT = (
    "TTFT limit, ms: a configuration whose mean TTFT (front-end time included) exceeds it is "
    "infeasible; omitted: no limit"
)
TPOT_LIMIT = (
    "TPOT limit, ms: a configuration whose mean TPOT exceeds it is infeasible; omitted: no limit"
)

# -- results ----------------------------------------------------------------------------------
TTFT_INTERVAL = "TTFT's 80 % prediction interval [low, high], ms (docs/engine.md)"
TPOT_INTERVAL = "TPOT's 80 % prediction interval [low, high], ms"
SLA_CONFIDENCE = (
    "fraction in [0, 1]: the share of the 80 % intervals inside ttft_limit_ms / "
    "tpot_limit_ms (per limited metric the share of its interval below the limit on the log "
    "scale, the smaller of the two); 0.5 or less: a limit is as likely missed as met; null "
    "without a limit"
)
NOTICE = (
    "what the answer's reader must know before using it: an estimate outside the validated "
    "domain (its interval centred on it), an interval too wide to inform (hi / lo over 4x) "
    "or rows the intervals say more likely miss a limit"
)
THROUGHPUT_INTERVAL = "throughput_tokens_s's 80 % prediction interval [low, high], tokens/s"
MEMORY_LEFT = (
    f"{GB} left per device at this batch size on the tightest step checked (agg and simulate: "
    "the decode step and the largest prefill step; the prefill or decode search: its own "
    "step); < 0: does not fit"
)
MEMORY_PARTS = (
    f"the memory picture of one device, {GB}: capacity_gb, weights_gb, kv_cache_gb, "
    "activation_gb, reserved_gb and available_gb (what is left)"
)
METHOD = (
    "how the metrics were computed: time_simulation, closed_form_waves, closed_loop_simulation "
    "or poisson_simulation (the engine), chunk_waves (the prefill search), decode_step (the "
    "decode search), or none (nothing ran)"
)
FEASIBLE = "whether it fits in memory and meets the TTFT/TPOT limits"
EFFECTIVE_INPUT_LENGTH = (
    "tokens prefill computes per request: input_length - floor(input_length x "
    "prefix_cache_hit_rate)"
)
PREFILL_NUM_CHUNKS = "prefill chunks per request: ceil(effective_input_length / max_batched_tokens)"
STATS = "what the request cost: time, forwards computed, cache use"
REQUEST_ECHO = "the request, with the defaults the service filled in (engine profile values)"
# -- an optimize row, probe or Pareto point ------------------------------------------------------
BATCH_SIZE = "requests per data-parallel rank"
CONCURRENCY = "requests of the whole layout: batch_size x dp"
ROW_TTFT = (
    "mean time to first token, ms (front-end time and, prefill, serving_overhead_ms included); "
    "null for the decode search and points not simulated"
)
ROW_TPOT = "mean time per output token, ms; null for the prefill search and points not simulated"
THROUGHPUT_TOKENS_S = "tokens/s of all replicas of the layout"
THROUGHPUT_PER_DEVICE = "token/s/device: throughput_tokens_s / the layout's devices"
REQUEST_THROUGHPUT = "requests/s of all replicas of the layout"

# -- what optimize and simulate answers share ------------------------------------------------
ENGINE_USED = "the engine profile used and every value it set (after engine_options)"
SUGGESTIONS = "ways out of a memory-infeasible answer (quantization, devices, context)"
CALIBRATION_APPLIED = (
    "the calibration applied: id, applicable (false: the estimate lies outside what it was "
    "fitted on; reason says why and the intervals are widened), parameters"
)
REQUESTS_PER_CLIENT = "closed_loop: requests each client sends"
CACHE_USE = "the request's latency-cache use"
MODEL_NAME = "the model's name"
DEVICE_NAME = "the device's name"
# -- a forward's shape (the simulate timeline, the forward answer) -------------------------------
SHAPE_CONCURRENCY = "requests in the forward"
QUERY_LEN = "new tokens per request"
