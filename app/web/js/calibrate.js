// The "Calibrate" panel: measured runs (a CSV file or pasted text) -> POST /v1/calibrations ->
// the fit (parameters next to the catalog's, errors in and out of sample, ranges); "Apply" makes
// the form's requests carry `calibration: <id>` until it is cleared.
import { ApiError, getJson, postJson } from "./api.js";
import { fmt, h, stat } from "./util.js";

const $ = (id) => document.getElementById(id);

const state = {
  fitted: null, // the last CalibrationResponse shown in the panel
  active: null, // the applied one (its id goes into every request)
  controller: null,
  onChange: () => {},
};

/** The applied calibration's id, or null. */
export function activeCalibration() {
  return state.active?.id ?? null;
}

/** The applied calibration's profile (model, device, engine, quantization), or null. */
export function activeProfile() {
  return state.active?.profile ?? null;
}

function showError(title, detail, more = []) {
  const box = $("cal-error");
  box.replaceChildren(
    h("strong", {}, title),
    detail ? h("span", {}, ` ${detail}`) : "",
    more.length ? h("ul", {}, more.map((m) => h("li", {}, m))) : "",
  );
  box.hidden = false;
}

function hideError() {
  $("cal-error").hidden = true;
  $("cal-error").replaceChildren();
}

function problemText(err) {
  if (!(err instanceof ApiError)) return ["The calibration failed:", String(err.message || err), []];
  const p = err.problem;
  const status = p.status ? ` (${p.status})` : "";
  const more = (p.errors || [])
    .map((e) => {
      const where = (e.loc || []).filter((x) => x !== "body").join(".");
      return where && !String(e.msg).includes(where) ? `${where}: ${e.msg}` : String(e.msg);
    })
    .filter((m) => m !== p.detail);
  return [`${p.title || "The calibration failed"}${status}:`, p.detail || "", more];
}

// -- the fit ------------------------------------------------------------------------------
const pct = (v) => (v === null || v === undefined ? "–" : `${fmt(v, 1)} %`);
const value = (v) => (typeof v === "number" ? fmt(v, Math.abs(v) >= 100 ? 1 : 3) : String(v ?? "–"));
const range = (r, unit = "") => (r ? `${fmt(r[0])} – ${fmt(r[1])}${unit}` : "–");

/** The parameters: fitted ones next to the catalog value, the others with why they were kept. */
function parameterTable(profile) {
  const fitted = profile.parameters || {};
  const defaults = profile.defaults || {};
  const fixed = profile.fixed || {};
  const names = [...new Set([...Object.keys(fitted), ...Object.keys(fixed), ...Object.keys(defaults)])];
  const rows = names.map((name) => {
    const isFitted = name in fitted;
    const note = isFitted ? "fitted" : `catalog value kept: ${fixed[name] ?? "not fitted"}`;
    return h(
      "tr",
      { dataset: { parameter: name, fitted: String(isFitted) } },
      h("th", { scope: "row" }, name),
      h("td", { class: "num", dataset: { key: "value" } }, value(isFitted ? fitted[name] : defaults[name])),
      h("td", { class: "num", dataset: { key: "catalog" } }, value(defaults[name])),
      h("td", { class: "note", dataset: { key: "note" } }, note),
    );
  });
  return h(
    "div",
    { class: "table-wrap", tabindex: "0", role: "region", "aria-label": "Calibrated parameters" },
    h(
      "table",
      { class: "data compact", id: "cal-params" },
      h("caption", {}, "Parameters: fitted to your runs, or left at the catalog value"),
      h(
        "thead",
        {},
        h("tr", {}, ["parameter", "value", "catalog", "note"].map((c, i) => h("th", { scope: "col", class: i && i < 3 ? "num" : "" }, c))),
      ),
      h("tbody", {}, rows),
    ),
  );
}

function renderFit(response) {
  const profile = response.profile;
  const fit = profile.fit || {};
  const ranges = profile.ranges || {};
  const expires = new Date(response.expires_at_s * 1000).toISOString().replace("T", " ").replace(/\..*$/, " UTC");
  const held = fit.cross_validation ? `held out (${fit.cross_validation.replace(/_/g, " ")})` : "held out";
  const box = $("cal-result");
  box.replaceChildren(
    h("h3", { id: "cal-result-title" }, "Calibration ", h("code", { id: "cal-id" }, response.id)),
    h("p", { class: "sub" }, `${profile.model} on ${profile.device} · ${profile.engine} · ${profile.quantization} · ${fmt(fit.points)} runs · kept until ${expires}`),
    h(
      "dl",
      { class: "stats", id: "cal-fit", "aria-label": "Median absolute errors of the fit" },
      stat("TTFT error, in sample", pct(fit.ttft_fit_median_ape_pct), "median absolute error on the runs it was fitted to"),
      stat(`TTFT error, ${held}`, pct(fit.ttft_cv_median_ape_pct), "median absolute error on runs left out of the fit"),
      stat("TPOT error, in sample", pct(fit.tpot_fit_median_ape_pct), "median absolute error on the runs it was fitted to"),
      stat(`TPOT error, ${held}`, pct(fit.tpot_cv_median_ape_pct), "median absolute error on runs left out of the fit"),
      stat("converged", `${fit.converged ? "yes" : "no"} · ${fmt(fit.iterations)} iterations`, `${fmt(fit.evaluations)} model evaluations`),
    ),
    parameterTable(profile),
    h(
      "p",
      { class: "hint", id: "cal-ranges" },
      `Covers input ${range(ranges.isl, " tokens")}, output ${range(ranges.osl, " tokens")}, ` +
        `concurrency ${range(ranges.concurrency)}, layouts ${(ranges.layouts || []).join(", ") || "–"}; ` +
        "outside these ranges the intervals are widened.",
    ),
  );
  box.hidden = false;
}

async function fit() {
  hideError();
  const text = $("cal-csv").value;
  if (!text.trim()) {
    showError("No measurements:", "choose a CSV file or paste its text first.");
    $("cal-csv").focus();
    return;
  }
  state.controller?.abort();
  const controller = new AbortController();
  state.controller = controller;
  const status = $("cal-status");
  status.textContent = "Fitting the calibration…";
  $("cal-fit").disabled = true;
  $("calibrate").setAttribute("aria-busy", "true");
  try {
    const response = await postJson("/v1/calibrations", { csv: text }, controller.signal);
    state.fitted = response;
    renderFit(response);
    $("cal-apply").disabled = false;
    status.textContent = `Fitted ${response.id} to ${fmt(response.profile.fit?.points)} runs. “Apply to the form” uses it.`;
  } catch (err) {
    if (err.name === "AbortError") return;
    status.textContent = "";
    showError(...problemText(err));
  } finally {
    if (state.controller === controller) {
      state.controller = null;
      $("cal-fit").disabled = false;
      $("calibrate").setAttribute("aria-busy", "false");
    }
  }
}

async function readFile() {
  const file = $("cal-file").files?.[0];
  if (!file) return;
  hideError();
  try {
    $("cal-csv").value = await file.text();
    const lines = $("cal-csv").value.split(/\r?\n/).filter((l) => l.trim()).length;
    $("cal-status").textContent = `Read ${file.name}: ${fmt(Math.max(0, lines - 1))} runs. “Fit calibration” fits them.`;
  } catch (err) {
    showError(`${file.name} could not be read:`, String(err.message || err));
  }
}

// -- applied --------------------------------------------------------------------------------
function renderActive() {
  const box = $("active-calibration");
  const active = state.active;
  box.hidden = !active;
  $("active-cal-id").textContent = active ? active.id : "";
  const p = active?.profile;
  $("active-cal-text").textContent = p
    ? `Every Optimize and Timeline sends it. Fitted on ${p.model} · ${p.device} · ${p.engine} · ${p.quantization}.`
    : "";
}

/** Apply a CalibrationResponse (null clears it); `quiet`: no status message. */
export function setActive(response, quiet = false) {
  state.active = response;
  renderActive();
  if (!quiet) {
    $("cal-status").textContent = response
      ? `Applied ${response.id}: the form's requests now carry it.`
      : "The form's requests no longer carry a calibration.";
  }
  state.onChange(response);
}

/** Restore a calibration by id (a link's `calibration=`): shown and applied, or an error. */
export async function restore(id) {
  try {
    const response = await getJson(`/v1/calibrations/${encodeURIComponent(id)}`);
    state.fitted = response;
    renderFit(response);
    $("cal-apply").disabled = false;
    setActive(response, true);
    return true;
  } catch (err) {
    const [title, detail, more] = problemText(err);
    showError(`The link's calibration ${id} is not available (fit it again):`, `${title} ${detail}`.trim(), more);
    return false;
  }
}

export function initCalibration({ onChange = () => {} } = {}) {
  state.onChange = onChange;
  $("cal-file").addEventListener("change", readFile);
  $("cal-fit").addEventListener("click", fit);
  $("cal-apply").addEventListener("click", () => {
    if (state.fitted) setActive(state.fitted);
  });
  $("clear-calibration").addEventListener("click", () => {
    setActive(null);
    $("run").focus(); // the button itself is gone
  });
}
