// What every dashboard page shares: the banner (errors that belong to no field), problem+json
// shown next to the form's fields, the request schema and the model and device catalogs.
import { ApiError, getJson } from "./api.js";
import { applySchema, fieldOfLoc, fieldSpec, input, setOptions, showErrors } from "./fields.js";
import { fmt, gib, h } from "./util.js";

const $ = (id) => document.getElementById(id);

/** The catalogs (GET /v1/models, /v1/devices) once loaded. */
export const catalog = { models: [], devices: [] };

// -- banner (errors that belong to no field) ------------------------------------------------
export function showBanner(title, detail, extra = []) {
  const banner = $("banner");
  banner.replaceChildren(
    h("strong", {}, title),
    detail ? h("span", {}, ` ${detail}`) : "",
    extra.length ? h("ul", {}, extra.map((e) => h("li", {}, e))) : "",
    h("button", { type: "button", class: "close", "aria-label": "Dismiss", onclick: hideBanner }, "×"),
  );
  banner.hidden = false;
}

export function hideBanner() {
  $("banner").hidden = true;
  $("banner").replaceChildren();
}

window.addEventListener("error", (event) => {
  showBanner("Something went wrong in the page:", event.message || String(event.error));
});
window.addEventListener("unhandledrejection", (event) => {
  showBanner("Something went wrong in the page:", String(event.reason?.message || event.reason));
});

/** Show an ApiError: field errors next to their fields, the rest in the banner. */
export function showProblem(err, what) {
  if (!(err instanceof ApiError)) {
    showBanner(`${what} failed:`, String(err.message || err));
    return;
  }
  const p = err.problem;
  const byField = {};
  const loose = [];
  for (const e of p.errors || []) {
    const field = fieldOfLoc(e.loc);
    let msg = e.msg;
    if (p.valid && (field === "model" || field === "device")) {
      msg = `${msg}. Valid: ${p.valid.slice(0, 12).join(", ")}${p.valid.length > 12 ? ", …" : ""}`;
    }
    if (field) byField[field] = byField[field] ? `${byField[field]}; ${msg}` : msg;
    else loose.push(`${(e.loc || []).filter((x) => x !== "body").join(".")}: ${msg}`);
  }
  loose.push(...showErrors(byField));
  const status = p.status ? ` (${p.status})` : "";
  if (Object.keys(byField).length && !loose.length) {
    showBanner(`${p.title || "Invalid input"}${status}:`, "see the marked fields.");
  } else {
    showBanner(`${p.title || what + " failed"}${status}:`, p.detail || "", loose);
  }
}

// -- catalogs -> form ------------------------------------------------------------------------
export async function loadCatalogs() {
  try {
    const [models, devices] = await Promise.all([getJson("/v1/models"), getJson("/v1/devices")]);
    Object.assign(catalog, { models: models.models, devices: devices.devices });
    $("model-options").replaceChildren(...models.models.map((m) => h("option", { value: m.name })));
    setOptions(input("device"), devices.devices.map((d) => [d.name, `${d.name} (${fmt(gib(d.hbm_capacity_gb), 0)} GiB)`]));
    for (const [name, actions] of [
      ["quantize_linear_action", models.quantize_linear_actions],
      ["quantize_attention_action", models.quantize_attention_actions],
    ]) {
      setOptions(input(name), [["", fieldSpec(name).blank], ...actions]);
    }
    describeModel();
    describeDevice();
  } catch (err) {
    // The form still works with typed names; the API validates them.
    const device = input("device");
    const text = h("input", { id: device.id, name: device.name, type: "text", value: "ATLAS_800_A2_376T_64G", "aria-describedby": device.getAttribute("aria-describedby") });
    device.replaceWith(text);
    showProblem(err, "Loading the model and device catalogs");
  }
}

export function describeModel() {
  const name = input("model").value.trim().toLowerCase();
  const m = catalog.models.find((x) => x.name.toLowerCase() === name);
  const hint = $("hint-model");
  hint.textContent = m
    ? `${m.model_type} · ${fmt(m.num_params / 1e9, 1)}B params${m.num_active_params !== m.num_params ? ` (${fmt(m.num_active_params / 1e9, 1)}B active)` : ""} · ${m.num_layers} layers`
    : "Catalog name or Hugging Face id (case-insensitive)";
}

export function describeDevice() {
  const d = catalog.devices.find((x) => x.name === input("device").value);
  $("hint-device").textContent = d ? `${d.vendor} · ${fmt(gib(d.hbm_capacity_gb), 1)} GiB HBM · ${fmt(d.hbm_bandwidth_gb_s, 0)} GB/s · ${fmt(d.peak_bf16_tflops, 0)} BF16 TFLOPS` : "";
}

/**
 * Choices, bounds and defaults of the form: the API's request schema (one source, in core).
 * Returns the API's schemas (null when they could not be read).
 */
export async function loadSchema() {
  try {
    const openapi = await getJson("/openapi.json");
    applySchema(openapi.components.schemas);
    return openapi.components.schemas;
  } catch (err) {
    // The form still renders (without client-side checks); the API validates every request.
    showProblem(err, "Loading the request schema");
    return null;
  }
}
