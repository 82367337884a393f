// The Sweeps page: a grid over a base request -> POST /v1/sweeps (202) -> its progress polled
// (GET /v1/sweeps/{id}) until it ends or is cancelled (DELETE), its rows (results?format=json)
// in a table and a chart of the best value per group, the exports (csv, json, parquet). The
// sweep's id is in the URL fragment (#sweep=swp-…): a reload watches it again.
import { ApiError, deleteJson, getBlob, getJson, postJson } from "./api.js";
import { drawGroupedBars } from "./charts.js";
import { FIELDS, applyMode, clearErrors, input, readForm, renderForm, showErrors } from "./fields.js";
import { describeDevice, describeModel, hideBanner, loadCatalogs, loadSchema, showBanner, showProblem } from "./page.js";
import { download, fmt, fmtMs, h } from "./util.js";

const $ = (id) => document.getElementById(id);

/** The request schema of each operation (components of /openapi.json). */
const REQUEST_SCHEMAS = { optimize: "OptimizeRequest", simulate: "SimulateRequest", plan: "PlanRequest" };
/** A first grid and other base fields per operation: small enough to run in seconds. */
const STARTERS = {
  optimize: { extra: {}, grid: [["device", ""], ["num_devices", "1, 2"]] },
  simulate: { extra: { concurrency: 8 }, grid: [["device", ""], ["concurrency", "8, 32, 128"]] },
  plan: { extra: { request_rate: 1 }, grid: [["device", ""], ["request_rate", "1, 4"]] },
};
/** Rows drawn in the table at most (the exports have every row). */
const MAX_TABLE_ROWS = 500;
/** The figures of a row, how they are shown, and which is best for the chart. */
const FIGURES = {
  throughput_tokens_s: { digits: 0, best: Math.max, axis: "output tokens/s (best feasible row)" },
  ttft_ms: { digits: 1, best: Math.min, axis: "TTFT ms (least of the feasible rows)" },
  tpot_ms: { digits: 2, best: Math.min, axis: "TPOT ms (least of the feasible rows)" },
};
const POLL_MS = 1000;

const state = {
  schemas: null,
  sweep: null, // the last SweepStatus
  rows: [],
  spec: null, // the spec submitted from this page (not known after a reload)
  timer: null,
  fetching: false,
};
// For the end-to-end tests and the curious.
window.chunkwise = state;

// -- the form: base fields of the operation, other base fields, the grid -----------------------
const operation = () => $("sweep-operation").value;

function requestProperties(op) {
  return state.schemas?.[REQUEST_SCHEMAS[op]]?.properties ?? null;
}

/** Show the form's fields the operation's request has (hidden ones are not sent). */
function applyOperation() {
  applyMode();
  const properties = requestProperties(operation());
  if (properties) {
    for (const f of FIELDS) {
      if (f.parent ? f.parent in properties : f.name in properties) continue;
      input(f.name).closest(".field").hidden = true;
      input(f.name).disabled = true;
    }
    $("grid-field-names").replaceChildren(...Object.keys(properties).map((name) => h("option", { value: name })));
  }
  const starter = STARTERS[operation()];
  $("hint-base-extra").textContent = `Fields of the ${operation()} request the form has not, e.g. ${JSON.stringify(starter.extra)}`;
}

function gridRow(field = "", values = "") {
  const index = $("grid-rows").children.length + 1;
  const row = h(
    "div",
    { class: "grid-row" },
    h("input", { type: "text", class: "grid-field", list: "grid-field-names", value: field, "aria-label": `Grid field ${index}`, autocomplete: "off", spellcheck: "false", placeholder: "field" }),
    h("input", { type: "text", class: "grid-values", value: values, "aria-label": `Values of grid field ${index}`, autocomplete: "off", spellcheck: "false", placeholder: "value, value, …" }),
    h("button", { type: "button", class: "small", "aria-label": `Remove grid field ${index}`, onclick: () => { row.remove(); showCount(); } }, "×"),
  );
  $("grid-rows").append(row);
  return row;
}

/** A value as typed: a number or true/false as such, anything else as text. */
function parseValue(text) {
  if (/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(text)) return Number(text);
  if (text === "true" || text === "false") return text === "true";
  return text;
}

/** The grid {field: [values]} and its problems. */
function readGrid() {
  const grid = {};
  const errors = [];
  for (const row of $("grid-rows").children) {
    const field = row.querySelector(".grid-field").value.trim();
    const values = row.querySelector(".grid-values").value.split(",").map((v) => v.trim()).filter(Boolean);
    if (!field && !values.length) continue;
    if (!field) errors.push(`values ${values.join(", ")} have no field`);
    else if (!values.length) errors.push(`${field}: give its values, comma-separated`);
    else if (field in grid) errors.push(`${field} is in the grid twice`);
    else grid[field] = values.map(parseValue);
  }
  if (!errors.length && !Object.keys(grid).length) errors.push("add a field and its values");
  return { grid, errors };
}

/** The scenario count (the product of the lists), shown before the sweep is submitted. */
function showCount() {
  const { grid } = readGrid();
  const lists = Object.values(grid);
  const count = lists.reduce((n, values) => n * values.length, lists.length ? 1 : 0);
  $("grid-count").textContent = lists.length
    ? `${fmt(count)} scenario${count === 1 ? "" : "s"} (${lists.map((v) => v.length).join(" × ")})`
    : "No scenario yet.";
  $("grid-count").dataset.count = String(count);
  $("err-grid").textContent = "";
}

/** The sweep spec of the form, or null (its errors shown). */
function readSpec() {
  clearErrors();
  $("err-base-extra").textContent = "";
  $("err-grid").textContent = "";
  const { body, errors } = readForm();
  let extra = {};
  try {
    extra = JSON.parse($("base-extra").value.trim() || "{}");
    if (!extra || typeof extra !== "object" || Array.isArray(extra)) throw new Error("not an object");
  } catch (err) {
    $("err-base-extra").textContent = `A JSON object of request fields (${err.message})`;
    extra = null;
  }
  const grid = readGrid();
  if (grid.errors.length) $("err-grid").textContent = grid.errors.join("; ");
  showErrors(errors);
  if (Object.keys(errors).length || extra === null || grid.errors.length) {
    showBanner("Please fix the marked fields.", "");
    return null;
  }
  return { operation: operation(), base: { ...body, ...extra }, grid: grid.grid };
}

/** SHA-256 in hex, or undefined outside a secure context (no crypto.subtle there). */
async function sha256(text) {
  if (!window.crypto?.subtle) return undefined;
  const digest = await window.crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/** Cancelled sweeps of one spec the page steps over at most (each is one POST). */
const MAX_CANCELLED = 10;

/**
 * POST the spec with an Idempotency-Key: its SHA-256, as `chunkwise sweep --remote` sends
 * (docs/sweeps.md), so a double click or a resent request follows one sweep. The key returns
 * the sweep it made, also once cancelled: running the spec again then means a new sweep, keyed
 * by the spec and the cancelled sweep's id (so that is idempotent too).
 */
async function submitSpec(spec) {
  const text = JSON.stringify(spec);
  let key = await sha256(text);
  for (let hop = 0; ; hop += 1) {
    const sweep = await postJson("/v1/sweeps", spec, undefined, key ? { "idempotency-key": key } : {});
    if (sweep.state !== "cancelled" || !key || hop >= MAX_CANCELLED) return sweep;
    key = await sha256(`${text}\n${sweep.id}`);
  }
}

/** A refused spec: the API's message in the banner, and next to the grid when it names it. */
function showRefusal(err) {
  if (err instanceof ApiError) {
    const { grid } = readGrid();
    const names = (err.problem.errors || []).map((e) => (e.loc || []).filter((x) => x !== "body").join("."));
    if (names.some((name) => name === "grid" || name.startsWith("grid.") || name in grid)) {
      $("err-grid").textContent = err.problem.detail || err.problem.title;
    }
  }
  showProblem(err, "Submitting the sweep");
}

async function submit(event) {
  event.preventDefault();
  hideBanner();
  const spec = readSpec();
  if (!spec) return;
  $("run").disabled = true;
  try {
    const sweep = await submitSpec(spec);
    state.spec = spec;
    watch(sweep);
  } catch (err) {
    showRefusal(err);
  } finally {
    $("run").disabled = false;
  }
}

// -- watching a sweep -----------------------------------------------------------------------
function watch(sweep) {
  clearTimeout(state.timer);
  state.rows = [];
  state.sweep = null;
  history.replaceState(null, "", `#sweep=${encodeURIComponent(sweep.id)}`);
  $("placeholder").hidden = true;
  $("sweep-progress").hidden = false;
  $("sweep-id").textContent = sweep.id;
  for (const link of document.querySelectorAll("#exports a")) {
    link.href = `/v1/sweeps/${encodeURIComponent(sweep.id)}/results?format=${link.dataset.format}`;
    link.download = `chunkwise-${sweep.id}.${link.dataset.format}`;
  }
  update(sweep);
}

function etaText(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  return seconds >= 90 ? `${fmt(seconds / 60, 1)} min` : `${fmt(seconds, 0)} s`;
}

/** Show a SweepStatus; fetch the rows when there are new ones; poll again while it runs. */
async function update(sweep) {
  const before = state.sweep;
  state.sweep = sweep;
  const running = sweep.state === "running";
  $("results").setAttribute("aria-busy", String(running));
  $("sweep-cancel").disabled = !running;
  $("sweep-bar").max = Math.max(1, sweep.total);
  $("sweep-bar").value = sweep.done;
  $("sweep-progress").dataset.state = sweep.state;
  $("sweep-status").textContent =
    `${sweep.state} · ${fmt(sweep.done)} of ${fmt(sweep.total)} scenarios done, ${fmt(sweep.failed)} failed · ` +
    `${sweep.rate_scenarios_s === null ? "–" : fmt(sweep.rate_scenarios_s, 1)} scenarios/s · ETA ${running ? etaText(sweep.eta_s) : "–"} · ` +
    `executor ${sweep.executor}`;
  if (!before || before.done !== sweep.done || before.state !== sweep.state) await loadRows(sweep);
  if (running && state.sweep === sweep) state.timer = setTimeout(() => poll(sweep.id), POLL_MS);
}

async function poll(id) {
  try {
    const sweep = await getJson(`/v1/sweeps/${encodeURIComponent(id)}`);
    // A cancel answered meanwhile has the last word.
    if (state.sweep?.id === id && state.sweep.state === "running") await update(sweep);
  } catch (err) {
    showProblem(err, "Watching the sweep");
  }
}

async function loadRows(sweep) {
  if (state.fetching) return;
  state.fetching = true;
  try {
    const rows = await getJson(`/v1/sweeps/${encodeURIComponent(sweep.id)}/results?format=json`);
    if (state.sweep?.id !== sweep.id) return;
    state.rows = rows;
    renderRows();
  } catch (err) {
    showProblem(err, "Reading the sweep's rows");
  } finally {
    state.fetching = false;
  }
}

async function cancel() {
  const sweep = state.sweep;
  if (!sweep) return;
  $("sweep-cancel").disabled = true;
  try {
    clearTimeout(state.timer);
    await update(await deleteJson(`/v1/sweeps/${encodeURIComponent(sweep.id)}`));
  } catch (err) {
    showProblem(err, "Cancelling the sweep");
    $("sweep-cancel").disabled = false;
  }
}

async function exportRows(event) {
  event.preventDefault();
  const link = event.currentTarget;
  try {
    // Through fetch, so a service with API keys gets the bearer token (a plain link cannot).
    const blob = await getBlob(link.getAttribute("href"));
    download(link.download, blob, blob.type);
  } catch (err) {
    showProblem(err, `The ${link.dataset.format} export`);
  }
}

// -- rows: the table and the chart ------------------------------------------------------------
/** The sweep's own fields: a row's keys before "operation" (its values come first, in the spec's order). */
function gridFields(rows) {
  const keys = Object.keys(rows[0] ?? {});
  const end = keys.indexOf("operation");
  return end < 0 ? [] : keys.slice(0, end);
}

function cellText(key, value) {
  if (value === null || value === undefined) return "–";
  if (FIGURES[key]) return fmt(value, FIGURES[key].digits);
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

function renderRows() {
  const rows = state.rows;
  $("output").hidden = !rows.length;
  if (!rows.length) return;
  const columns = Object.keys(rows[0]);
  const shown = rows.slice(0, MAX_TABLE_ROWS);
  const table = h(
    "table",
    { class: "data", id: "sweep-rows" },
    h("caption", { class: "sr-only" }, "One row per scenario"),
    h("thead", {}, h("tr", {}, columns.map((key) => h("th", { scope: "col", class: typeof rows[0][key] === "number" ? "num" : "" }, key)))),
    h(
      "tbody",
      {},
      shown.map((row) =>
        h(
          "tr",
          { class: row.error ? "failed-row" : "" },
          columns.map((key) => h("td", { class: typeof row[key] === "number" ? "num" : "", dataset: { key }, title: key === "error" ? row.error : null }, cellText(key, row[key]))),
        ),
      ),
    ),
  );
  $("sweep-table").replaceChildren(
    h("p", { class: "hint table-hint" }, shown.length < rows.length ? `The first ${fmt(shown.length)} of ${fmt(rows.length)} rows; the exports have all of them.` : `${fmt(rows.length)} rows so far.`),
    h("div", { class: "table-wrap", tabindex: "0", role: "region", "aria-label": "Sweep rows" }, table),
  );
  chooseAxes();
  drawChart();
}

/** The x and series choices: the grid's fields (device along x and a bar per model by default). */
function chooseAxes() {
  const fields = gridFields(state.rows);
  const fill = (select, options, preferred) => {
    const current = select.options.length ? select.value : null; // the user's choice stays
    select.replaceChildren(...options.map(([value, label]) => h("option", { value }, label)));
    const values = options.map(([value]) => value);
    select.value = values.includes(current) ? current : preferred.find((p) => values.includes(p)) ?? values[0] ?? "";
  };
  fill($("chart-x"), fields.map((f) => [f, f]), ["device", "model", ...fields]);
  const others = fields.filter((f) => f !== $("chart-x").value);
  fill($("chart-series"), [["", "(one bar)"], ...others.map((f) => [f, f])], ["model", "device", ...others, ""]);
}

function drawChart() {
  const metric = $("chart-metric").value;
  const x = $("chart-x").value;
  const by = $("chart-series").value;
  const figure = FIGURES[metric];
  const usable = state.rows.filter((r) => r.feasible === true && !r.error && typeof r[metric] === "number");
  const categories = [...new Set(state.rows.map((r) => String(r[x])))];
  const groups = by ? [...new Set(state.rows.map((r) => String(r[by])))] : [""];
  const series = groups.map((group) => {
    const best = categories.map((category) => {
      const members = usable.filter((r) => String(r[x]) === category && (!by || String(r[by]) === group));
      if (!members.length) return null;
      const value = figure.best(...members.map((r) => r[metric]));
      return members.find((r) => r[metric] === value);
    });
    return { label: by ? `${by} ${group}` : metric, values: best.map((r) => (r ? r[metric] : null)), rows: best };
  });
  const fields = gridFields(state.rows).filter((f) => f !== x && f !== by);
  const describe = (row) =>
    row
      ? [
          fields.map((f) => `${f} ${row[f]}`).join(" · "),
          `TTFT ${fmtMs(row.ttft_ms)} · TPOT ${fmtMs(row.tpot_ms)}`,
          row.best_tp ? `best: tp ${row.best_tp} · dp ${row.best_dp} · ep ${row.best_ep} at ${fmt(row.best_concurrency)} requests` : "",
        ].filter(Boolean)
      : [];
  try {
    const drawn = drawGroupedBars($("chart-sweep"), categories, series, { xTitle: x, yTitle: figure.axis, describe });
    $("chart-sweep").dataset.points = String(drawn.points);
    const infeasible = state.rows.length - usable.length;
    $("chart-sweep-caption").textContent =
      `${fmt(drawn.points)} bars: per ${x}${by ? ` and ${by}` : ""}, the best of its feasible rows` +
      (infeasible ? `; ${fmt(infeasible)} rows infeasible, failed or without the figure are left out.` : ".");
  } catch (err) {
    showBanner("The chart could not be drawn:", String(err.message || err));
  }
}

// -- boot --------------------------------------------------------------------------------------
/** The first grid (the form's device, and a list the operation takes). */
function starterGrid() {
  for (const [field, values] of STARTERS[operation()].grid) gridRow(field, field === "device" && !values ? input("device").value : values);
}

/** Another operation: its fields; its other base fields when the user had not edited them. */
function changeOperation(event) {
  const previous = JSON.stringify(STARTERS[event.target.dataset.previous].extra);
  if ($("base-extra").value.trim() === previous) $("base-extra").value = JSON.stringify(STARTERS[operation()].extra);
  event.target.dataset.previous = operation();
  applyOperation();
}

async function boot() {
  const form = $("plan-form");
  state.schemas = await loadSchema();
  renderForm(form, $("base-extra-field"));
  form.append(h("datalist", { id: "grid-field-names" }));
  $("form-loading").remove();
  for (const name of ["mode", "scheduler_name", "workload", "engine"]) input(name).addEventListener("change", applyOperation);
  input("model").addEventListener("input", describeModel);
  input("device").addEventListener("change", describeDevice);
  $("sweep-operation").addEventListener("change", changeOperation);
  $("grid-add").addEventListener("click", () => gridRow().querySelector("input").focus());
  $("grid-rows").addEventListener("input", showCount);
  form.addEventListener("submit", submit);
  $("sweep-cancel").addEventListener("click", cancel);
  for (const link of document.querySelectorAll("#exports a")) link.addEventListener("click", exportRows);
  $("chart-x").addEventListener("change", () => {
    chooseAxes(); // a field along x is no bar series
    drawChart();
  });
  for (const id of ["chart-metric", "chart-series"]) $(id).addEventListener("change", drawChart);
  await loadCatalogs();
  $("base-extra").value = JSON.stringify(STARTERS[operation()].extra);
  $("sweep-operation").dataset.previous = operation();
  starterGrid();
  applyOperation();
  showCount();
  document.body.dataset.ready = "true";
  const id = new URLSearchParams(window.location.hash.slice(1)).get("sweep");
  if (id) {
    try {
      watch(await getJson(`/v1/sweeps/${encodeURIComponent(id)}`));
    } catch (err) {
      showProblem(err, `The link's sweep ${id}`);
    }
  }
}

boot().catch((err) => showBanner("The dashboard failed to start:", String(err.message || err)));
