// The optimize form: one spec per field (label, group, CLI flag, hint), rendered, read and
// validated here. Choices, bounds and defaults are NOT written here: applySchema fills them in
// from the API's own request schema (/openapi.json: OptimizeRequest and SchedulerOptions, which
// pydantic builds from the definitions in app/core), so a value the API would reject is flagged
// next to its field before the request is sent, in pydantic's words; the API's problem+json
// `errors` are shown the same way (showErrors).
import { h } from "./util.js";

/** Display names of the API's choices (a choice without one is shown as it is spelled). */
const CHOICE_LABELS = {
  mode: {
    agg: "Aggregated (agg)",
    disagg_prefill: "Disaggregated prefill (TTFT)",
    disagg_decode: "Disaggregated decode (TPOT)",
    pd_ratio: "PD ratio (instance split)",
    disagg: "Disaggregated deployment (both pools)",
  },
  scheduler_name: {
    decode_first_with_slack: "decode first with slack (RFC)",
    vllm: "vLLM",
    sglang: "SGLang",
    sglang_mixed_chunk: "SGLang mixed chunk",
  },
  prefill_order: { continue_first: "continue first (vLLM)", fifo: "FIFO, chunk-major (msmodeling)" },
  mixed_latency: { max: "max (overlapped)", sum: "sum (serial)", fused: "fused (one forward)" },
  workload: { burst: "burst (RFC)", closed_loop: "closed loop" },
  engine: { vllm: "vLLM", sglang: "SGLang", trtllm: "TensorRT-LLM", msmodeling: "msmodeling (RFC)" },
};

/**
 * kind: int | float | select | model | list-int | list-float | bool
 * cli: flag of `chunkwise optimize`; value: the initial value when it is not the API's default;
 * blank: label of the empty choice of an optional select (the API's default applies);
 * exclude: choices of the schema the form does not offer.
 * From the schema (applySchema): ge/gt/le/lt, maxItems, options, default, required.
 */
export const FIELDS = [
  // Deployment
  { name: "model", group: "deployment", label: "Model", kind: "model", cli: null,
    value: "Qwen/Qwen3-32B", hint: "Catalog name or Hugging Face id (case-insensitive)" },
  { name: "device", group: "deployment", label: "Device", kind: "select", cli: "--device",
    value: "ATLAS_800_A2_376T_64G", options: [] },
  { name: "num_devices", group: "deployment", label: "Device count", kind: "int",
    cli: "--num-devices", value: 8, hint: "tp × dp devices to search over" },
  // Blank: derived by the API (the engine profile's; the answer's input shows the value used).
  { name: "quantize_linear_action", group: "deployment", label: "Linear quantization",
    kind: "select", cli: "--quantize-linear-action", value: "", blank: "engine default",
    options: [["", "engine default"]] },
  { name: "quantize_attention_action", group: "deployment", label: "Attention quantization",
    kind: "select", cli: "--quantize-attention-action", value: "", blank: "engine default",
    options: [["", "engine default"]] },
  // Workload
  { name: "input_length", group: "workload", label: "Input length", unit: "tokens",
    kind: "int", cli: "--input-length", value: 3500 },
  { name: "output_length", group: "workload", label: "Output length", unit: "tokens",
    kind: "int", cli: "--output-length", value: 1500 },
  // Blank: the engine profile's budget for the device, as the API and the CLI (the answer's
  // input shows the value used: vLLM's 8192 on an H200, 2048 on a 64 GB device).
  { name: "max_batched_tokens", group: "workload", label: "Max batched tokens", unit: "tokens",
    kind: "int", cli: "--max-batched-tokens", value: "", placeholder: "engine default",
    hint: "Token budget of one engine step and the largest prefill chunk (blank: the engine's for the device)" },
  { name: "prefix_cache_hit_rate", group: "workload", label: "Prefix-cache hit rate",
    kind: "float", step: "0.05", cli: "--prefix-cache-hit-rate",
    hint: "Share of the prompt already cached, in [0, 1)" },
  // Mode and limits
  { name: "mode", group: "mode", label: "Mode", kind: "select", cli: null },
  { name: "ttft_limit_ms", group: "mode", label: "TTFT limit", unit: "ms", kind: "float",
    cli: "--ttft-limit", when: (v) => v.mode !== "disagg_decode" },
  { name: "tpot_limit_ms", group: "mode", label: "TPOT limit", unit: "ms", kind: "float",
    cli: "--tpot-limit", value: 50, when: (v) => v.mode !== "disagg_prefill" },
  { name: "prefill_devices_per_instance", group: "mode", label: "Prefill devices / instance",
    kind: "int", cli: "--prefill-devices-per-instance",
    when: (v) => v.mode === "pd_ratio" || v.mode === "disagg",
    hint: "pd_ratio default: half the devices; disagg: a fixed prefill worker size (default: searched)" },
  { name: "decode_devices_per_instance", group: "mode", label: "Decode devices / instance",
    kind: "int", cli: "--decode-devices-per-instance",
    when: (v) => v.mode === "pd_ratio" || v.mode === "disagg",
    hint: "pd_ratio default: half the devices; disagg: a fixed decode worker size (default: searched)" },
  { name: "max_workers", group: "mode", label: "Max workers per pool", kind: "int",
    cli: "--max-workers", when: (v) => v.mode === "disagg", hint: "Default: 16" },
  // MTP
  { name: "num_mtp_tokens", group: "mtp", label: "MTP draft tokens", kind: "int",
    cli: "--num-mtp-tokens", hint: "Multi-token prediction, 0 = off" },
  { name: "mtp_acceptance_rates", group: "mtp", label: "MTP acceptance rates",
    kind: "list-float", cli: "--mtp-acceptance-rates", value: "",
    hint: "One rate per draft token, e.g. 0.8 0.6" },
  // Search (advanced)
  { name: "tp_sizes", group: "advanced", label: "TP sizes", kind: "list-int",
    cli: "--tp-sizes", value: "", hint: "e.g. 1 2 4 8 (default: powers of two)" },
  { name: "ep_sizes", group: "advanced", label: "EP sizes (MoE)", kind: "list-int",
    cli: "--ep-sizes", value: "" },
  { name: "max_batch_size", group: "advanced", label: "Max batch size / replica", kind: "int",
    cli: "--max-batch-size" },
  { name: "top_k", group: "advanced", label: "Rows (top k)", kind: "int", cli: "--top-k" },
  { name: "reserved_memory_gb", group: "advanced", label: "Reserved memory", unit: "GB",
    kind: "float", cli: "--reserved-memory-gb", hint: "Default: the runner's" },
  { name: "serving_overhead_ms", group: "advanced", label: "Serving overhead (prefill)",
    unit: "ms", kind: "float", cli: null,
    when: (v) => v.mode === "disagg_prefill" || v.mode === "pd_ratio" },
  { name: "engine", group: "scheduler", label: "Engine profile", kind: "select", cli: "--engine",
    value: "", blank: "default (vLLM)",
    hint: "Sets the policy, token budget, KV pool and host times of that engine; msmodeling: the RFC" },
  // Blank: the engine profile's policy (the API's own default applies only when it is sent).
  { name: "scheduler_name", key: "name", parent: "scheduler", group: "scheduler",
    label: "Scheduler policy", kind: "select", cli: "--scheduler", optional: true, value: "",
    blank: "engine default", when: (v) => v.mode !== "disagg" },
  { name: "slack_ratio", parent: "scheduler", group: "scheduler", label: "Slack ratio",
    kind: "float", cli: "--slack-ratio",
    when: (v) => v.scheduler_name === "decode_first_with_slack",
    hint: "Mixed-step token slack" },
  { name: "prefill_order", parent: "scheduler", group: "scheduler", label: "Prefill order",
    kind: "select", cli: "--prefill-order", value: "", blank: "default (continue first)",
    when: (v) => v.scheduler_name === "decode_first_with_slack" },
  { name: "max_num_seqs", parent: "scheduler", group: "scheduler", label: "Max running requests",
    kind: "int", cli: "--max-num-seqs", placeholder: "policy default",
    when: (v) => Boolean(v.scheduler_name) && v.scheduler_name !== "decode_first_with_slack" },
  { name: "mixed_latency", parent: "scheduler", group: "scheduler", label: "Mixed step latency",
    kind: "select", cli: "--mixed-latency", value: "", blank: "policy default",
    when: (v) => Boolean(v.scheduler_name) && v.scheduler_name !== "decode_first_with_slack" },
  // optimize searches concurrency: a Poisson workload is simulate's (the API says so)
  { name: "workload", group: "scheduler", label: "Workload", kind: "select", cli: "--workload",
    exclude: ["poisson"], when: (v) => v.mode === "agg", value: "",
    blank: "engine default (closed loop; msmodeling: burst)",
    hint: "burst: all requests at t = 0 (RFC); closed loop: clients re-send" },
  { name: "window", group: "scheduler", label: "Measurement window", kind: "select",
    cli: "--window", when: (v) => v.mode === "agg" && closedLoop(v) },
  { name: "requests_per_client", group: "scheduler", label: "Requests per client", kind: "int",
    cli: "--requests-per-client", when: (v) => v.mode === "agg" && closedLoop(v) },
  { name: "force_simulation", group: "scheduler", label: "Force the time simulation",
    kind: "bool", cli: "--force-simulation", hint: "Also when the prompt fits in one chunk",
    when: (v) => v.mode !== "disagg" },
];

/** Whether the form's workload is a closed loop (blank: the engine profile's default). */
function closedLoop(v) {
  return (v.workload || (v.engine === "msmodeling" ? "burst" : "closed_loop")) === "closed_loop";
}

// -- the request schema ------------------------------------------------------------------------
const BOUNDS = { minimum: "ge", exclusiveMinimum: "gt", maximum: "le", exclusiveMaximum: "lt" };

function resolve(schemas, prop) {
  const ref = prop.$ref ?? (prop.allOf?.length === 1 ? prop.allOf[0].$ref : undefined);
  return ref ? schemas[ref.split("/").pop()] : prop;
}

/** Fill each field's choices, bounds, default and `required` from the API's schemas. */
export function applySchema(schemas) {
  const request = schemas.OptimizeRequest;
  for (const f of FIELDS) {
    const owner = f.parent ? resolve(schemas, request.properties[f.parent]) : request;
    const key = f.key ?? f.name;
    const prop = owner.properties[key];
    if (!prop) throw new Error(`the API has no field ${f.parent ? `${f.parent}.` : ""}${key}`);
    // f.optional: a field the form may leave out although the API has a default for it.
    const optional = Boolean(f.optional) || (prop.anyOf ?? []).some((p) => p.type === "null");
    // `X | None` is anyOf [X, null]: the bounds and choices are X's.
    const type = (prop.anyOf ?? []).find((p) => p.type !== "null") ?? prop;
    const scalar = type.items ?? type;
    for (const [keyword, bound] of Object.entries(BOUNDS)) {
      if (scalar[keyword] !== undefined) f[bound] = scalar[keyword];
    }
    if (type.maxItems !== undefined) f.maxItems = type.maxItems;
    if (type.enum) {
      const labels = CHOICE_LABELS[f.name] ?? {};
      const choices = type.enum.filter((c) => !(f.exclude ?? []).includes(c));
      f.options = [
        ...(optional ? [["", f.blank ?? "default"]] : []),
        ...choices.map((c) => [c, labels[c] ?? c.replaceAll("_", " ")]),
      ];
    }
    if (prop.default !== undefined && prop.default !== null && !f.optional) {
      f.default = prop.default;
      if (!("value" in f)) f.value = prop.default;
    }
    f.required = Boolean(f.required) || (owner.required ?? []).includes(key);
    // An optional number whose default the API states in words ("default 1.15").
    const stated = /^default ([\d.]+)$/.exec(prop.description ?? "");
    if (stated && f.placeholder === undefined) f.placeholder = stated[1];
  }
}

export const GROUPS = [
  ["deployment", "Deployment"],
  ["workload", "Workload"],
  ["mode", "Mode and limits"],
  ["mtp", "Multi-token prediction"],
  ["advanced", "Search"],
  ["scheduler", "Scheduler and workload"],
];

const byName = new Map(FIELDS.map((f) => [f.name, f]));
export const fieldSpec = (name) => byName.get(name);

const inputId = (name) => `f-${name}`;
const errorId = (name) => `err-${name}`;

function boundsText(f) {
  const parts = [];
  if (f.ge !== undefined) parts.push(`≥ ${f.ge}`);
  if (f.gt !== undefined) parts.push(`> ${f.gt}`);
  if (f.le !== undefined) parts.push(`≤ ${f.le.toLocaleString("en-US")}`);
  if (f.lt !== undefined) parts.push(`< ${f.lt}`);
  return parts.join(", ");
}

function control(f) {
  const common = {
    id: inputId(f.name),
    name: f.name,
    "aria-describedby": `${errorId(f.name)} hint-${f.name}`,
  };
  if (f.kind === "select") {
    const select = h("select", common);
    setOptions(select, f.options ?? [], f.value);
    return select;
  }
  if (f.kind === "bool") {
    return h("input", { ...common, type: "checkbox", checked: f.value ? true : null });
  }
  if (f.kind === "model") {
    return h("input", {
      ...common,
      type: "text",
      list: "model-options",
      autocomplete: "off",
      spellcheck: "false",
      required: true,
      value: f.value,
    });
  }
  const numeric = f.kind === "int" || f.kind === "float";
  return h("input", {
    ...common,
    type: "text",
    inputmode: numeric ? (f.kind === "int" ? "numeric" : "decimal") : "text",
    autocomplete: "off",
    required: f.required ? true : null,
    value: f.value ?? "",
    placeholder: f.placeholder ?? (f.required ? null : f.default !== undefined ? String(f.default) : "none"),
  });
}

export function setOptions(select, options, selected) {
  const current = selected ?? (select.value || fieldSpec(select.name)?.value);
  select.replaceChildren(
    ...options.map((opt) => {
      const [value, label] = Array.isArray(opt) ? opt : [opt, opt];
      return h("option", { value, selected: value === current ? true : null }, label);
    }),
  );
  if (current && [...select.options].some((o) => o.value === current)) select.value = current;
}

/** Build the fieldsets into `form` (before its action bar). */
export function renderForm(form, before) {
  for (const [group, title] of GROUPS) {
    const fields = FIELDS.filter((f) => f.group === group);
    const body = fields.map((f) => {
      const label = h("label", { for: inputId(f.name) }, f.label, f.unit ? ` (${f.unit})` : "");
      const hint = [f.hint, boundsText(f)].filter(Boolean).join(" · ");
      const wrap = h(
        "div",
        { class: `field field-${f.kind}`, dataset: { field: f.name } },
        f.kind === "bool" ? [control(f), label] : [label, control(f)],
        h("p", { class: "hint", id: `hint-${f.name}` }, hint),
        h("p", { class: "error", id: errorId(f.name), "aria-live": "polite" }),
      );
      return wrap;
    });
    const fieldset =
      group === "advanced" || group === "scheduler"
        ? h(
            "details",
            { class: "group advanced", id: group },
            h("summary", {}, title),
            h("div", { class: "grid" }, body),
          )
        : h(
            "fieldset",
            { class: "group", id: `group-${group}` },
            h("legend", {}, title),
            h("div", { class: "grid" }, body),
          );
    form.insertBefore(fieldset, before);
  }
  form.append(h("datalist", { id: "model-options" }));
}

export function input(name) {
  return document.getElementById(inputId(name));
}

/** Show only the fields that apply (mode, scheduler, workload); hidden ones are not sent. */
export function applyMode() {
  const values = {};
  for (const f of FIELDS) if (f.kind === "select") values[f.name] = input(f.name).value;
  for (const f of FIELDS) {
    if (!f.when) continue;
    const on = f.when(values);
    input(f.name).closest(".field").hidden = !on;
    input(f.name).disabled = !on;
  }
}

// -- reading and validating (messages in pydantic's words) ------------------------------
const NUMBER = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;

function checkNumber(f, raw, isInt) {
  if (!NUMBER.test(raw)) {
    return isInt ? ["Input should be a valid integer", null] : ["Input should be a valid number", null];
  }
  const value = Number(raw);
  if (isInt && !Number.isInteger(value)) {
    return ["Input should be a valid integer, got a number with a fractional part", null];
  }
  if (f.ge !== undefined && value < f.ge) return [`Input should be greater than or equal to ${f.ge}`, null];
  if (f.gt !== undefined && value <= f.gt) return [`Input should be greater than ${f.gt}`, null];
  if (f.le !== undefined && value > f.le) return [`Input should be less than or equal to ${f.le}`, null];
  if (f.lt !== undefined && value >= f.lt) return [`Input should be less than ${f.lt}`, null];
  return [null, value];
}

/** Parse one field: [error message | null, value | undefined (= not sent)]. */
function readField(f) {
  const el = input(f.name);
  if (el.disabled) return [null, undefined];
  if (f.kind === "bool") return [null, el.checked];
  const raw = el.value.trim();
  if (f.kind === "select") return [null, raw === "" ? undefined : raw];
  if (f.kind === "model") return raw ? [null, raw] : ["Field required", undefined];
  if (raw === "") return f.required ? ["Field required", undefined] : [null, undefined];
  if (f.kind === "int" || f.kind === "float") return checkNumber(f, raw, f.kind === "int");
  // lists: "1 2 4", "1,2,4"
  const items = raw.split(/[\s,]+/).filter(Boolean);
  if (items.length > f.maxItems) {
    return [`List should have at most ${f.maxItems} items after validation, not ${items.length}`, undefined];
  }
  const values = [];
  for (const item of items) {
    const [error, value] = checkNumber(f, item, f.kind === "list-int");
    if (error) return [`${item}: ${error}`, undefined];
    values.push(value);
  }
  return [null, values];
}

/** The form as an OptimizeRequest body, plus the client-side errors by field. */
export function readForm() {
  const body = {};
  const errors = {};
  for (const f of FIELDS) {
    const [error, value] = readField(f);
    if (error) {
      errors[f.name] = error;
      continue;
    }
    // Defaults are left to the API (a short curl body; the same request as the CLI's).
    if (value === undefined || (f.default !== undefined && value === f.default)) continue;
    if (f.parent) {
      body[f.parent] ??= {};
      body[f.parent][f.key ?? f.name] = value;
    } else {
      body[f.name] = value;
    }
  }
  return { body, errors };
}

/** Field name of a problem+json error `loc` (["body", "scheduler", "slack_ratio"] etc.). */
export function fieldOfLoc(loc) {
  const parts = (loc || []).filter((p) => p !== "body");
  const nested = FIELDS.find((f) => f.parent && f.parent === parts[0] && (f.key ?? f.name) === parts[1]);
  if (nested) return nested.name;
  for (let i = parts.length - 1; i >= 0; i -= 1) {
    if (typeof parts[i] === "string" && byName.has(parts[i])) return parts[i];
  }
  return null;
}

export function clearErrors() {
  for (const f of FIELDS) showError(f.name, "");
}

export function showError(name, message) {
  const el = input(name);
  const slot = document.getElementById(errorId(name));
  if (!el || !slot) return false;
  if (message && el.closest(".field").hidden) return false; // not visible: the banner says it
  slot.textContent = message;
  el.closest(".field").classList.toggle("invalid", Boolean(message));
  if (message) el.setAttribute("aria-invalid", "true");
  else el.removeAttribute("aria-invalid");
  if (message) {
    // An error in a collapsed section must be visible.
    const details = el.closest("details");
    if (details) details.open = true;
  }
  return true;
}

/** Show errors {field: message}; focus the first one. Returns messages not tied to a field. */
export function showErrors(errors) {
  const unplaced = [];
  let first = null;
  for (const [name, message] of Object.entries(errors)) {
    if (showError(name, message)) first ??= input(name);
    else unplaced.push(`${name}: ${message}`);
  }
  first?.focus();
  return unplaced;
}

/** Raw values that differ from the form's initial ones (for the URL). */
export function formState() {
  const state = {};
  for (const f of FIELDS) {
    const el = input(f.name);
    const value = f.kind === "bool" ? String(el.checked) : el.value;
    const initial = f.kind === "bool" ? String(Boolean(f.value)) : String(f.value ?? "");
    if (value !== initial) state[f.name] = value;
  }
  return state;
}

/** Back to the initial values. */
export function resetForm() {
  for (const f of FIELDS) {
    const el = input(f.name);
    if (f.kind === "bool") el.checked = Boolean(f.value);
    else el.value = f.value ?? "";
  }
  clearErrors();
  applyMode();
}

/** Put raw values back (unknown names are ignored); returns how many were applied. */
export function setFormState(state) {
  let applied = 0;
  for (const [name, value] of Object.entries(state)) {
    const f = byName.get(name);
    const el = f && input(name);
    if (!el) continue;
    if (f.kind === "bool") el.checked = value === "true";
    else if (el.tagName === "SELECT" && ![...el.options].some((o) => o.value === value)) continue;
    else el.value = value;
    applied += 1;
  }
  applyMode();
  return applied;
}
