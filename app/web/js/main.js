// Dashboard entry point: catalogs -> form; optimize -> summary, table, charts, chunk plan;
// a selected row -> /v1/simulate step timeline. Errors never leave a blank page.
import { postJson } from "./api.js";
import { activeCalibration, activeProfile, initCalibration, restore, setActive } from "./calibrate.js";
import {
  drawConcurrencyChart, drawDisaggChart, drawLatencyChart, drawParetoChart, drawTimeline, renderChunkPlan,
  timelineSpan,
} from "./charts.js";
import { exportDisaggCsv, renderDisaggSummary, renderDisaggTable } from "./disagg.js";
import { cliCommand, curlCommand } from "./commands.js";
import {
  applyMode, clearErrors, formState, input, readForm, renderForm, resetForm, setFormState, showErrors,
} from "./fields.js";
import { LAUNCH_ENGINES, launchBody, renderLaunch } from "./launch.js";
import { exportCsv, exportJson, intervalSource, renderSummary, renderTable } from "./results.js";
import { describeDevice, describeModel, hideBanner, loadCatalogs, loadSchema, showBanner, showProblem } from "./page.js";
import { fmt, fmtMs, h } from "./util.js";

const $ = (id) => document.getElementById(id);

const state = {
  response: null,
  controller: null, // AbortController of the running optimize
  simController: null,
  launchController: null,
  picked: null, // the launched point or row
};
// For the end-to-end tests and the curious: the last results.
window.chunkwise = state;

// -- optimize ----------------------------------------------------------------------------------
let timer = null;

function setBusy(busy, label = "Optimizing…") {
  $("run").disabled = busy;
  $("results").setAttribute("aria-busy", String(busy));
  $("results").classList.toggle("busy", busy);
  $("progress").hidden = !busy;
  clearInterval(timer);
  if (busy) {
    // The label is announced once (role=status); the running clock is for the eyes only.
    $("progress-text").textContent = label;
    const started = performance.now();
    const tick = () => {
      $("progress-time").textContent = `${fmt((performance.now() - started) / 1000, 1)} s`;
    };
    tick();
    timer = setInterval(tick, 100);
  }
}

function validate() {
  clearErrors();
  const { body, errors } = readForm();
  if (Object.keys(errors).length) {
    showErrors(errors);
    showBanner("Please fix the marked fields.", "");
    return null;
  }
  return withCalibration(body);
}

/** The request body with the applied calibration (the panel's "Apply"), if any. */
function withCalibration(body) {
  const id = activeCalibration();
  return id ? { ...body, calibration: id } : body;
}

/** The form's state for the URL: its fields where they differ, and the calibration. */
function urlState() {
  const id = activeCalibration();
  return id ? { ...formState(), calibration: id } : formState();
}

async function runOptimize(event) {
  event.preventDefault();
  hideBanner();
  const body = validate();
  if (!body) return;
  // The URL keeps the form: reload or share the link to get the same results.
  const query = new URLSearchParams(urlState()).toString();
  history.replaceState(null, "", query ? `#${query}` : window.location.pathname);
  state.controller?.abort();
  const controller = new AbortController();
  state.controller = controller;
  setBusy(true, `Optimizing ${body.model} on ${body.num_devices} × ${body.device}`);
  try {
    const response = await postJson("/v1/optimize", { ...body, include_probes: true }, controller.signal);
    // The budget the search used (the form's, or the engine profile's when it is blank).
    const planBody = {
      input_length: body.input_length,
      prefix_cache_hit_rate: body.prefix_cache_hit_rate ?? 0,
      max_batched_tokens: response.input.max_batched_tokens,
    };
    const plan = await postJson("/v1/chunk-plan", planBody, controller.signal).catch((err) => err);
    state.response = response;
    renderResults(response, plan);
  } catch (err) {
    if (err.name === "AbortError") showBanner("Cancelled.", "The previous results are kept.");
    else showProblem(err, "Optimize");
  } finally {
    if (state.controller === controller) {
      state.controller = null;
      setBusy(false);
    }
  }
}

/** The layouts no configuration could use, and why (every mode lists them). */
function renderInfeasible(response) {
  const infeasible = $("infeasible");
  infeasible.hidden = !response.infeasible.length;
  infeasible.querySelector("ul").replaceChildren(...response.infeasible.map((i) => h("li", {}, `${i.role} ${i.parallel}: ${i.reason}`)));
  infeasible.querySelector("summary").textContent = `Infeasible layouts (${response.infeasible.length})`;
}

/** mode disagg: the two pools, the split and the binding pool; charts of its probes. */
function renderDisaggResults(response) {
  $("latency-metric").disabled = false;
  renderDisaggSummary($("summary"), response);
  $("export-csv").disabled = !response.rows.length;
  renderDisaggTable($("table"), response);
  renderInfeasible(response);
  const s = response.stats;
  $("stats").textContent = `${fmt(response.search.simulations)} simulations, ${fmt(s.forward_evaluations)} forwards computed, ${fmt(s.cache.hits)} cache hits${s.cache.response_cache_hit ? " (cached response)" : ""}, ${fmt(s.elapsed_ms, 0)} ms on the server`;
  drawProbeCharts(response);
  resetLaunch(response);
  drawPareto(response);
  $("launch-status").textContent = "A disaggregated deployment launches as two engine deployments (its pools): pick an aggregated result for a launch configuration.";
  resetTimeline();
  $("timeline-text").textContent = "The disaggregated search records no step timeline.";
}

function renderResults(response, plan) {
  $("placeholder").hidden = true;
  $("output").hidden = false;
  if (plan instanceof Error) {
    $("chunk-plan").replaceChildren(h("p", { class: "warn" }, `Chunk plan unavailable: ${plan.message}`));
  } else {
    renderChunkPlan($("chunk-plan"), plan);
  }
  if (response.mode === "disagg") {
    renderDisaggResults(response);
    return;
  }
  renderSummary($("summary"), response);
  $("export-csv").disabled = !response.rows.length;
  const table = renderTable($("table"), response, simulateRow, (row) => pick(row, `rank ${row.rank}`));
  renderInfeasible(response);
  const s = response.stats;
  $("stats").textContent = `${fmt(s.layouts)} layouts, ${fmt(s.probes)} probes, ${fmt(s.forward_evaluations)} forwards computed, ${fmt(s.cache.hits)} cache hits${s.cache.response_cache_hit ? " (cached response)" : ""}, ${fmt(s.elapsed_ms, 0)} ms on the server`;
  const metric = $("latency-metric");
  metric.value = response.mode === "disagg_prefill" ? "ttft_ms" : "tpot_ms";
  metric.disabled = response.mode === "disagg_prefill";
  drawProbeCharts(response);
  resetLaunch(response);
  drawPareto(response);
  resetTimeline();
  if (response.rows.length) table.select(1);
  if (window.innerWidth < 900) $("summary").scrollIntoView({ block: "start" });
}

/** Both probe charts, with or without their 80 % intervals, and what the bars mean. */
function drawProbeCharts(response) {
  const metric = $("latency-metric").value;
  const source = intervalSource(response.calibration);
  if (response.mode === "disagg") {
    try {
      drawDisaggChart($("chart-concurrency"), response, "concurrency");
      drawDisaggChart($("chart-latency"), response, metric);
    } catch (err) {
      showBanner("The charts could not be drawn:", String(err.message || err));
    }
    $("chart-conc-caption").textContent = "Output tokens/s per device of both pools, one line per deployment (split and layouts).";
    $("chart-lat-caption").textContent = "";
    return;
  }
  try {
    const conc = drawConcurrencyChart($("chart-concurrency"), response, { intervals: $("conc-intervals").checked });
    const lat = drawLatencyChart($("chart-latency"), response, metric, { intervals: $("lat-intervals").checked });
    const name = response.mode === "disagg_prefill" || metric === "ttft_ms" ? "TTFT" : "TPOT";
    $("chart-conc-caption").textContent = conc.intervals
      ? `Bars: 80 % intervals of the throughput of ${fmt(conc.intervals)} points, ${source}.`
      : "";
    $("chart-lat-caption").textContent = lat.intervals
      ? `Bars: 80 % intervals of the throughput (vertical) and ${name} (horizontal) of ${fmt(lat.intervals)} points, ${source}.`
      : "";
  } catch (err) {
    showBanner("The charts could not be drawn:", String(err.message || err));
  }
}

// -- Pareto front and launch configuration ---------------------------------------------------
const pointText = (p) =>
  `${p.role === "agg" ? "" : `${p.role} `}${p.parallel} at ${fmt(p.concurrency)} requests: ` +
  `${fmt(p.throughput_per_device, 1)} tokens/s/device, ${fmt(p.user_tokens_s, 1)} tokens/s/user`;

function drawPareto(response) {
  const front = response.pareto || [];
  const picked = front.includes(state.picked) ? state.picked : null;
  try {
    drawParetoChart($("chart-pareto"), response, { picked, onPick: (p) => pick(p, "the picked point") });
  } catch (err) {
    showBanner("The Pareto chart could not be drawn:", String(err.message || err));
  }
  const met = front.filter((p) => p.feasible).length;
  $("pareto-caption").textContent = front.length
    ? `${fmt(front.length)} points no other evaluated layout and concurrency beats on both axes; ${fmt(met)} meet the TTFT/TPOT limits (filled). Click a point for its launch.`
    : "";
  const list = $("pareto-points");
  list.hidden = !front.length;
  list.querySelector("summary").textContent = `Points of the front (${front.length})`;
  list.querySelector("ol").replaceChildren(
    ...[...front].reverse().map((p) =>
      h(
        "li",
        {},
        h("button", { type: "button", class: "small", "aria-label": `Launch ${pointText(p)}`, onclick: () => pick(p, "the picked point") }, "Launch"),
        ` ${pointText(p)}${p.feasible ? "" : ` (misses: ${p.reason})`}`,
      ),
    ),
  );
}

function resetLaunch(response) {
  state.picked = null;
  state.launchController?.abort();
  const engine = response.input.engine;
  $("launch-engine").value = LAUNCH_ENGINES.includes(engine) ? engine : "vllm";
  $("launch-output").replaceChildren();
  $("launch-status").textContent = "Pick a point of the Pareto front (or “Launch” on a row) for its engine command and manifests.";
}

/** Launch `point` (a Pareto point or a ranked row): POST /v1/deploy for the chosen engine. */
async function pick(point, label) {
  const response = state.response;
  if (!response) return;
  state.picked = point;
  if ((response.pareto || []).includes(point)) drawPareto(response);
  const engine = $("launch-engine").value;
  const body = launchBody(response, point, engine);
  state.launchController?.abort();
  const controller = new AbortController();
  state.launchController = controller;
  const what = `Launch of ${label}: ${point.role === "agg" ? "" : `${point.role} `}${point.parallel} at ${fmt(point.concurrency)} requests (${fmt(point.batch_size)} per replica)`;
  $("launch-status").textContent = `${what}: asking /v1/deploy…`;
  $("launch-panel").setAttribute("aria-busy", "true");
  try {
    const deploy = await postJson("/v1/deploy", body, controller.signal);
    state.launch = deploy;
    renderLaunch($("launch-output"), deploy, what, body);
    $("launch-status").textContent = `${deploy.engine}: the launch of ${label} is below.`;
  } catch (err) {
    if (err.name === "AbortError") return;
    $("launch-output").replaceChildren();
    $("launch-status").textContent = "No launch configuration (see the message above).";
    showProblem(err, "Deploy");
  } finally {
    if (state.launchController === controller) {
      state.launchController = null;
      $("launch-panel").setAttribute("aria-busy", "false");
    }
  }
}

/** Redraw the timeline for the zoom controls (start slider: % of the run). */
function zoomTimeline() {
  const sim = state.simulation;
  const zoom = Number($("timeline-zoom").value);
  const slider = $("timeline-start");
  slider.disabled = zoom >= 1;
  if (!sim) return;
  const span = timelineSpan(sim.timeline || []);
  const start = zoom >= 1 ? 0 : Math.min(Number(slider.value) / 100, 1 - zoom) * span;
  slider.setAttribute("aria-valuetext", `${fmtMs(start)}`);
  drawTimeline($("chart-timeline"), sim, zoom >= 1 ? {} : { from: start, to: start + zoom * span });
}

function resetTimeline() {
  state.simulation = null;
  $("timeline-zoom").value = "1";
  $("timeline-start").value = "0";
  $("timeline-start").disabled = true;
  $("timeline-text").textContent = "Choose “Timeline” on a row to simulate it.";
  drawTimeline($("chart-timeline"), { timeline: [] });
}

// -- simulate a row -----------------------------------------------------------------------------
const SIM_FIELDS = [
  "model", "device", "quantize_linear_action", "quantize_attention_action", "reserved_memory_gb",
  "input_length", "prefix_cache_hit_rate", "max_batched_tokens", "output_length",
  "length_range_ratio", "num_mtp_tokens", "mtp_acceptance_rates", "scheduler", "force_simulation",
  "workload", "window", "requests_per_client", "engine", "engine_options", "calibration",
];

async function simulateRow(row) {
  const input = state.response.input;
  // A row's concurrency is its total over the replicas (batch_size each), as /v1/simulate takes it.
  const body = { include_timeline: true, tp_size: row.tp, ep_size: row.ep, dp_size: row.dp, concurrency: row.concurrency };
  for (const key of SIM_FIELDS) if (input[key] !== null && input[key] !== undefined) body[key] = input[key];
  state.simController?.abort();
  const controller = new AbortController();
  state.simController = controller;
  const text = $("timeline-text");
  text.textContent = `Simulating ${row.parallel} at ${fmt(row.concurrency)} requests (${fmt(row.batch_size)} per replica)…`;
  $("timeline-panel").setAttribute("aria-busy", "true");
  try {
    let sim = await postJson("/v1/simulate", body, controller.signal);
    let forced = "";
    if (!sim.timeline?.length && !body.force_simulation) {
      // Closed-form waves (one chunk) have no steps: simulate the same point step by step.
      const closed = sim;
      sim = await postJson("/v1/simulate", { ...body, force_simulation: true }, controller.signal);
      forced = ` · steps from the time simulation (the ${closed.method.replace(/_/g, " ")} give TTFT ${fmtMs(closed.ttft_ms)}, TPOT ${fmtMs(closed.tpot_ms)})`;
    }
    state.simulation = sim;
    zoomTimeline();
    const role = row.role === "agg" ? "" : ` (${row.role} row, simulated as one aggregated replica)`;
    text.textContent =
      `Rank ${row.rank}: ${sim.parallel}${role}, ` +
      (sim.workload === "closed_loop"
        ? `${fmt(sim.concurrency)} clients (${perReplica(sim)}) · `
        : `${fmt(sim.concurrency)} requests at t = 0 (${perReplica(sim)}) · `) +
      `TTFT ${fmtMs(sim.ttft_ms)}${within(sim.ttft_ms_interval)} · TPOT ${fmtMs(sim.tpot_ms)}${within(sim.tpot_ms_interval)} · makespan ${fmtMs(sim.makespan_ms)} · ` +
      `${fmt(sim.steps)} steps (${sim.method.replace(/_/g, " ")}) · ${fmt(sim.timeline?.length ?? 0)} step records` +
      forced +
      (sim.workload === "closed_loop"
        ? ` · closed loop: ${fmt(sim.num_requests)} requests, mean running batch ${fmt(sim.mean_running_batch, 1)}`
        : "") +
      (sim.calibration ? ` · calibration ${sim.calibration.id}${sim.calibration.applicable ? "" : ` (does not cover it: ${sim.calibration.reason})`}` : "") +
      (sim.timeline_truncated ? " · timeline truncated" : "") +
      (sim.feasible ? "" : ` · infeasible: ${sim.reason}`);
  } catch (err) {
    if (err.name === "AbortError") return;
    text.textContent = "The simulation failed (see the message above).";
    showProblem(err, "Simulate");
  } finally {
    if (state.simController === controller) {
      state.simController = null;
      $("timeline-panel").setAttribute("aria-busy", "false");
    }
  }
}

/** " (80 %: a – b)" for an interval, "" without one. */
function within(interval) {
  return interval ? ` (80 %: ${fmtMs(interval[0])} – ${fmtMs(interval[1])})` : "";
}

/** "8 per replica", or "3 on 2 replicas, 2 on 2" when the total does not divide evenly. */
function perReplica(sim) {
  const split = sim.replica_split || [];
  if (split.length === 1) return `${fmt(split[0].concurrency)} per replica`;
  return split.map((s, i) => `${fmt(s.concurrency)} on ${fmt(s.replicas)}${i ? "" : " replicas"}`).join(", ");
}

// -- the applied calibration ----------------------------------------------------------------
/** The form's deployment as the calibration's profile names it ({field: value}). */
function profileDeployment(profile) {
  return {
    model: profile.model,
    device: profile.device,
    engine: profile.engine,
    quantize_linear_action: profile.quantization,
  };
}

/** Whether the form's deployment is the calibration's; offer to switch when it is not. */
function describeCalibration() {
  const profile = activeProfile();
  const button = $("use-calibration-deployment");
  if (!profile) {
    button.hidden = true;
    return;
  }
  const differs = Object.entries(profileDeployment(profile)).filter(
    ([name, value]) => String(input(name).value).toLowerCase() !== String(value).toLowerCase(),
  );
  button.hidden = !differs.length;
  button.title = differs.length ? `The form has another ${differs.map(([n]) => n.replace(/_/g, " ")).join(", ")}` : "";
}

function useCalibrationDeployment() {
  const profile = activeProfile();
  if (!profile) return;
  setFormState(profileDeployment(profile));
  describeModel();
  describeDevice();
  describeCalibration();
  $("run").focus();
}

// -- copy as CLI / curl ---------------------------------------------------------------------
async function copyCommand(kind) {
  hideBanner();
  clearErrors();
  const { body: fields, errors } = readForm();
  showErrors(errors);
  const body = withCalibration(fields);
  const cli = cliCommand(body);
  const text = kind === "cli" ? cli.text : curlCommand(body, window.location.origin);
  const notes = kind === "cli" ? cli.notes : [];
  $("copy-box").hidden = false;
  $("copy-label").textContent = kind === "cli" ? "CLI command" : "curl command";
  $("copy-text").value = text;
  $("copy-text").rows = Math.min(14, text.split("\n").length + 1);
  $("copy-text").dataset.kind = kind;
  const status = $("copy-status");
  const warn = Object.keys(errors).length ? " Some fields are invalid; the command carries the valid ones." : "";
  try {
    await navigator.clipboard.writeText(text);
    status.textContent = `Copied to the clipboard.${warn} ${notes.join("; ")}`.trim();
  } catch {
    $("copy-text").select();
    status.textContent = `Select the text and copy it (the clipboard is not available here).${warn} ${notes.join("; ")}`.trim();
  }
}

// -- boot --------------------------------------------------------------------------------------
async function boot() {
  const form = $("plan-form");
  await loadSchema();
  renderForm(form, $("active-calibration"));
  $("form-loading").remove();
  applyMode();
  for (const name of ["mode", "scheduler_name", "workload", "engine"]) {
    input(name).addEventListener("change", applyMode);
  }
  input("model").addEventListener("input", describeModel);
  input("device").addEventListener("change", describeDevice);
  form.addEventListener("change", describeCalibration);
  form.addEventListener("input", describeCalibration);
  form.addEventListener("submit", runOptimize);
  form.addEventListener("input", (event) => {
    // Editing a field clears its error.
    const wrap = event.target.closest?.(".field");
    if (wrap?.classList.contains("invalid")) {
      wrap.classList.remove("invalid");
      event.target.removeAttribute("aria-invalid");
      wrap.querySelector(".error").textContent = "";
    }
  });
  $("cancel").addEventListener("click", () => state.controller?.abort());
  $("copy-cli").addEventListener("click", () => copyCommand("cli"));
  $("copy-curl").addEventListener("click", () => copyCommand("curl"));
  $("reset").addEventListener("click", () => {
    resetForm();
    setActive(null, true);
    hideBanner();
    describeModel();
    describeDevice();
    history.replaceState(null, "", window.location.pathname);
  });
  $("export-csv").addEventListener("click", () => {
    const response = state.response;
    if (response) (response.mode === "disagg" ? exportDisaggCsv : exportCsv)(response);
  });
  $("export-json").addEventListener("click", () => state.response && exportJson(state.response));
  $("timeline-zoom").addEventListener("change", zoomTimeline);
  $("timeline-start").addEventListener("input", zoomTimeline);
  for (const id of ["latency-metric", "conc-intervals", "lat-intervals"]) {
    $(id).addEventListener("change", () => state.response && drawProbeCharts(state.response));
  }
  $("launch-engine").addEventListener("change", () => state.picked && pick(state.picked, "the picked point"));
  initCalibration({ onChange: describeCalibration });
  $("use-calibration-deployment").addEventListener("click", useCalibrationDeployment);
  const { calibration, ...fromUrl } = Object.fromEntries(new URLSearchParams(window.location.hash.slice(1)));
  setFormState(fromUrl); // selects filled from the catalogs get theirs below
  // A link's calibration is read back first; when it is gone the link is not run without it.
  const restored = calibration ? restore(calibration) : Promise.resolve(true);
  return Promise.all([loadCatalogs(), restored]).then(([, ok]) => {
    const linked = setFormState(fromUrl); // the selects have their options now
    describeModel(); // the link's model and device, not the form's defaults
    describeDevice();
    describeCalibration(); // the device list is in now
    document.body.dataset.ready = "true";
    if ((linked || calibration) && ok) form.requestSubmit();
  });
}

boot().catch((err) => showBanner("The dashboard failed to start:", String(err.message || err)));
