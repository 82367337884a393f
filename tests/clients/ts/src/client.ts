/**
 * Every operation of Chunkwise's API called through openapi-fetch, typed by what openapi-typescript
 * generated from the live /openapi.json (src/generated/schema.ts, written by
 * tests/clients/test_ts_client.py and not committed).
 *
 * `checks` has exactly one entry per operationId of the generated `operations`, so under
 * `tsc --strict` an operation added to the API without a call here (or renamed) fails the
 * compile, and every request body, answer field and problem read below is checked against the
 * schema. At run time each entry must reach its operation (a middleware records what was sent),
 * and the operation ids of the live schema must be exactly the ones called.
 *
 *   node build/client.js BASE_URL CALIBRATION.csv
 *
 * prints one JSON line, {"called": [operationId, ...]}, and exits 0; or names every failed check
 * on stderr and exits 1.
 */
import { readFileSync } from "node:fs";

import createClient, { type Middleware } from "openapi-fetch";

import type { components, operations, paths } from "./generated/schema.js";

type Schemas = components["schemas"];
type Problem = Schemas["Problem"];
type OperationId = keyof operations;

const [baseUrl, calibrationCsv] = process.argv.slice(2);
if (baseUrl === undefined || calibrationCsv === undefined) {
  console.error("usage: node build/client.js BASE_URL CALIBRATION.csv");
  process.exit(2);
}

/** "METHOD /path/{template}" of every request sent, in order. */
const sent: string[] = [];
const recordRequests: Middleware = {
  onRequest({ request, schemaPath }) {
    sent.push(`${request.method} ${schemaPath}`);
  },
};
const client = createClient<paths>({ baseUrl });
client.use(recordRequests);

class CheckFailed extends Error {}

function check(condition: unknown, message: string): asserts condition {
  if (!condition) {
    throw new CheckFailed(message);
  }
}

/** The typed body of an answer that must have `status`. */
function ok<T>(result: { data?: T; error?: unknown; response: Response }, status = 200): T {
  const { data, error, response } = result;
  check(
    response.status === status,
    `${response.url}: status ${response.status}, expected ${status}: ${JSON.stringify(error)}`,
  );
  check(data !== undefined, `${response.url}: no body`);
  return data;
}

/** The problem+json body of an error answer, read through its `Problem` schema. */
function problem(result: { error?: Problem; response: Response }, status: number): Problem {
  const { error, response } = result;
  const url = response.url;
  check(response.status === status, `${url}: status ${response.status}, expected ${status}`);
  const mediaType = response.headers.get("content-type") ?? "";
  check(mediaType.startsWith("application/problem+json"), `${url}: ${mediaType}`);
  check(error !== undefined, `${url}: no problem body`);
  check(error.status === status, `problem status ${error.status}, expected ${status}`);
  check(error.title.length > 0, "problem without a title");
  check(typeof error.detail === "string" && error.detail.length > 0, "problem without a detail");
  return error;
}

const MODEL = "Qwen/Qwen3-0.6B";
const DEVICE = "TEST_DEVICE";
const WORKLOAD = { model: MODEL, device: DEVICE, input_length: 512, output_length: 32 } as const;

/** The fields of an optimizer row that `/v1/deploy` launches. */
type DeployRow = Pick<
  Schemas["DeployRequest"],
  "num_devices" | "tp" | "dp" | "ep" | "pp" | "max_batched_tokens" | "batch_size"
>;

/** What one check leaves for a later one (checks run in the order written). */
const state: {
  best?: DeployRow;
  calibrationId?: string;
  launch?: Schemas["DeployResponse"];
  sweepId?: string;
} = {};

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const checks: { [Id in OperationId]: () => Promise<void> } = {
  async healthz() {
    const health = ok(await client.GET("/healthz"));
    check(health.status === "ok", `healthz: ${JSON.stringify(health)}`);
  },
  async readyz() {
    const ready = ok(await client.GET("/readyz"));
    check(ready.status === "ready" && ready.cache.reachable, `readyz: ${JSON.stringify(ready)}`);
  },
  async metrics() {
    const text = ok(await client.GET("/metrics", { parseAs: "text" }));
    check(text.includes("chunkwise_http_requests_total"), "metrics: no request counter");
  },
  async models() {
    const list = ok(await client.GET("/v1/models"));
    check(list.models.some((m) => m.name === MODEL), `models: no ${MODEL}`);
    check(list.quantize_linear_actions.length > 0, "models: no quantization actions");
  },
  async devices() {
    const list = ok(await client.GET("/v1/devices"));
    check(list.devices.some((d) => d.name === DEVICE), `devices: no ${DEVICE}`);
  },
  async model() {
    const model = ok(await client.GET("/v1/models/{name}", { params: { path: { name: MODEL } } }));
    check(model.name === MODEL && model.num_params > 0 && model.num_layers > 0, model.name);
  },
  async device() {
    const params = { path: { name: DEVICE } };
    const device = ok(await client.GET("/v1/devices/{name}", { params }));
    check(device.name === DEVICE && device.hbm_capacity_gb > 0, device.name);
    const unknown = problem(
      await client.GET("/v1/devices/{name}", { params: { path: { name: "TPU9" } } }),
      404,
    );
    check(unknown.valid?.includes(DEVICE), `unknown device: valid names ${unknown.valid}`);
  },
  async chunk_plan() {
    const body = { input_length: 3500, max_batched_tokens: 2048 };
    const plan = ok(await client.POST("/v1/chunk-plan", { body }));
    check(plan.prefill_num_chunks === 2 && plan.chunks.length === 2, JSON.stringify(plan));
    const last = plan.chunks[plan.chunks.length - 1];
    check(last?.is_last_chunk && last.seq_len === 3500, `last chunk ${JSON.stringify(last)}`);
  },
  async simulate() {
    const body = { ...WORKLOAD, concurrency: 4 };
    const simulated = ok(await client.POST("/v1/simulate", { body }));
    check("replica_split" in simulated, "an aggregated request answered as a disaggregated one");
    check(simulated.feasible && simulated.ttft_ms > 0 && simulated.tpot_ms > 0, "simulate");
    check(simulated.batch_size === 4 && simulated.replica_split[0]?.concurrency === 4, "the split");
    // A field out of its bounds: the problem lists it under `errors`.
    const invalid = problem(
      await client.POST("/v1/simulate", { body: { ...body, input_length: 0 } }),
      422,
    );
    const field = invalid.errors?.find((e) => e.loc.includes("input_length"));
    check(field !== undefined && field.msg.length > 0, `errors: ${JSON.stringify(invalid.errors)}`);
    const unknown = problem(
      await client.POST("/v1/simulate", { body: { ...body, model: "acme/Unknown-1B" } }),
      422,
    );
    check(unknown.detail?.includes("acme/Unknown-1B"), `unknown model: ${unknown.detail}`);
  },
  async optimize() {
    const body = { ...WORKLOAD, num_devices: 1, tpot_limit_ms: 100 };
    const answer = ok(await client.POST("/v1/optimize", { body }));
    // The answer is a union: the disaggregated search's has no Pareto front.
    check("pareto" in answer, "an aggregated search answered as a disaggregated one");
    const searched = answer;
    check(searched.mode === "agg" && searched.rows.length > 0, `optimize: ${searched.reason}`);
    check(searched.best, `optimize: no best row (${searched.reason})`);
    check((searched.pareto ?? []).length > 0, "optimize: an empty Pareto front");
    const { throughput_tokens_s: throughput, tpot_ms: tpot, ...row } = searched.best;
    check(throughput > 0 && tpot !== null && tpot <= 100, "optimize: best row");
    const { num_devices, tp, dp, ep, pp, max_batched_tokens, batch_size } = row;
    state.best = { num_devices, tp, dp, ep, pp, max_batched_tokens, batch_size };
  },
  async capacity_plan() {
    const body = { ...WORKLOAD, request_rate: 2, tpot_limit_ms: 100, num_requests: 50 };
    const plan = ok(await client.POST("/v1/plan", { body }));
    check(plan.feasible && plan.replicas >= 1 && plan.devices >= 1, `plan: ${plan.reason}`);
  },
  async forward() {
    const body = { model: MODEL, device: DEVICE, num_queries: 1, query_length: 64 };
    const forward = ok(await client.POST("/v1/forward", { body }));
    check(forward.latency_ms > 0 && forward.breakdown.ops.length > 0, "forward");
  },
  async create_calibration() {
    const body = { csv: readFileSync(calibrationCsv, "utf8") };
    const created = ok(await client.POST("/v1/calibrations", { body }), 201);
    check(created.id.length > 0 && created.expires_at_s > 0, `created: ${created.id}`);
    state.calibrationId = created.id;
  },
  async read_calibration() {
    check(state.calibrationId, "no calibration created");
    const params = { path: { calibration_id: state.calibrationId } };
    const read = ok(await client.GET("/v1/calibrations/{calibration_id}", { params }));
    check(read.id === state.calibrationId, `read ${read.id}`);
  },
  async delete_calibration() {
    check(state.calibrationId, "no calibration created");
    const params = { path: { calibration_id: state.calibrationId } };
    const { response } = await client.DELETE("/v1/calibrations/{calibration_id}", { params });
    check(response.status === 204, `delete: status ${response.status}`);
    const gone = problem(await client.GET("/v1/calibrations/{calibration_id}", { params }), 404);
    check(gone.detail?.includes(state.calibrationId), `deleted: ${gone.detail}`);
  },
  async deploy() {
    check(state.best, "no optimized row to deploy");
    const body = { ...state.best, engine: "vllm" as const, model: MODEL, device: DEVICE };
    const launch = ok(await client.POST("/v1/deploy", { body }));
    check(launch.engine === "vllm" && launch.command.argv.length > 0, launch.command.text);
    check(launch.num_devices === body.num_devices, `deploy: ${launch.num_devices} devices`);
    state.launch = launch;
  },
  async create_sweep() {
    const body = {
      operation: "simulate" as const,
      base: { ...WORKLOAD, concurrency: 1 },
      grid: { concurrency: [1, 2] },
    };
    const params = { header: { "idempotency-key": "ts-client" } };
    const created = await client.POST("/v1/sweeps", { body, params });
    const sweep = ok(created, 202);
    check(created.response.headers.get("location") === `/v1/sweeps/${sweep.id}`, "no Location");
    check(sweep.total === 2, `create_sweep: ${JSON.stringify(sweep)}`);
    const again = ok(await client.POST("/v1/sweeps", { body, params }), 202);
    check(again.id === sweep.id, `Idempotency-Key: ${again.id} is not ${sweep.id}`);
    const bad = problem(
      await client.POST("/v1/sweeps", { body: { ...body, grid: { concurrency: [-1] } } }),
      422,
    );
    check(bad.detail?.includes("concurrency") === true, `bad sweep: ${bad.detail}`);
    state.sweepId = sweep.id;
  },
  async read_sweep() {
    check(state.sweepId, "no sweep created");
    const params = { path: { sweep_id: state.sweepId } };
    for (let tries = 0; tries < 600; tries += 1) {
      const status = ok(await client.GET("/v1/sweeps/{sweep_id}", { params }));
      if (status.state === "done") {
        check(status.done === 2 && status.failed === 0, `read_sweep: ${JSON.stringify(status)}`);
        return;
      }
      await sleep(200);
    }
    check(false, "the sweep did not finish");
  },
  async sweep_results() {
    check(state.sweepId, "no sweep created");
    const path = { sweep_id: state.sweepId };
    const text = ok(
      await client.GET("/v1/sweeps/{sweep_id}/results", {
        params: { path, query: { format: "csv" } },
        parseAs: "text",
      }),
    );
    check(text.startsWith("concurrency,"), `sweep_results: ${text.slice(0, 80)}`);
    const rows = ok(
      await client.GET("/v1/sweeps/{sweep_id}/results", {
        params: { path, query: { format: "json" } },
      }),
    );
    check(rows.length === 2, `sweep_results json: ${JSON.stringify(rows)}`);
  },
  async cancel_sweep() {
    check(state.sweepId, "no sweep created");
    const params = { path: { sweep_id: state.sweepId } };
    const cancelled = ok(await client.DELETE("/v1/sweeps/{sweep_id}", { params }));
    check(cancelled.id === state.sweepId, `cancel_sweep: ${cancelled.id}`);
    const missing = { path: { sweep_id: `swp-${"0".repeat(32)}` } };
    problem(await client.DELETE("/v1/sweeps/{sweep_id}", { params: missing }), 404);
  },
  async deploy_get() {
    check(state.best && state.launch, "no deployed row to link");
    const query = { ...state.best, engine: "vllm" as const, model: MODEL, device: DEVICE };
    const linked = ok(await client.GET("/v1/deploy", { params: { query } }));
    check(linked.command.text === state.launch.command.text, `deploy_get: ${linked.command.text}`);
    const bad = problem(
      await client.GET("/v1/deploy", { params: { query: { ...query, tp: 0 } } }),
      422,
    );
    check(bad.errors?.some((e) => e.loc.includes("tp")) === true, JSON.stringify(bad.errors));
  },
};

/** operationId of every "METHOD /path" of the live schema. */
async function liveOperations(): Promise<Map<string, string>> {
  const response = await fetch(new URL("/openapi.json", baseUrl));
  check(response.ok, `/openapi.json: status ${response.status}`);
  const schema = (await response.json()) as {
    paths: Record<string, Record<string, { operationId: string }>>;
  };
  const ids = new Map<string, string>();
  for (const [path, methods] of Object.entries(schema.paths)) {
    for (const [method, operation] of Object.entries(methods)) {
      ids.set(`${method.toUpperCase()} ${path}`, operation.operationId);
    }
  }
  return ids;
}

async function main(): Promise<number> {
  const operationOf = await liveOperations();
  const failures: string[] = [];
  const called = new Set<string>();
  for (const [id, run] of Object.entries(checks)) {
    const first = sent.length;
    try {
      await run();
      const reached = sent.slice(first).map((request) => operationOf.get(request) ?? request);
      check(reached.includes(id), `sent ${reached.join(", ")}, none of them ${id}`);
      for (const operation of reached) {
        called.add(operation);
      }
    } catch (error) {
      failures.push(`${id}: ${error instanceof Error ? error.message : String(error)}`);
    }
  }
  const uncalled = [...new Set(operationOf.values())].filter((id) => !called.has(id));
  if (uncalled.length > 0) {
    failures.push(`operations of /openapi.json never called: ${uncalled.join(", ")}`);
  }
  console.log(JSON.stringify({ called: [...called].sort() }));
  for (const failure of failures) {
    console.error(failure);
  }
  return failures.length === 0 ? 0 : 1;
}

process.exitCode = await main();
