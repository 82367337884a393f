// The launch configuration of a picked point or row: POST /v1/deploy, shown as the command,
// config files, Kubernetes and compose manifests, with a GET link carrying the same fields.
import { fmt, h } from "./util.js";

/** The engines /v1/deploy launches (its schema's enum when loaded, else these). */
export const LAUNCH_ENGINES = ["vllm", "sglang", "trtllm"];

/**
 * The deploy request of `point` (a Pareto point, a probe or a ranked row: tp, dp, ep, pp,
 * batch_size, concurrency) of `response` for `engine`. The token budget is the rows' (the
 * search resolved it), the quantization and MTP are the request's; engine_options go along only
 * when the launch engine is the one the estimate ran with (they override that profile).
 */
export function launchBody(response, point, engine) {
  const input = response.input;
  const budget = response.rows[0]?.max_batched_tokens ?? response.best?.max_batched_tokens ?? input.max_batched_tokens;
  const body = {
    engine,
    model: input.model,
    device: input.device,
    num_devices: point.num_devices ?? point.tp * point.dp * point.pp,
    tp: point.tp,
    dp: point.dp,
    ep: point.ep,
    pp: point.pp,
    batch_size: point.batch_size,
    quantize_linear_action: input.quantize_linear_action,
    num_mtp_tokens: input.num_mtp_tokens ?? 0,
  };
  if (budget) body.max_batched_tokens = budget;
  // DISABLED leaves the KV dtype to the engine profile's rule, as the estimate did.
  if (input.quantize_attention_action && input.quantize_attention_action !== "DISABLED") {
    body.quantize_attention_action = input.quantize_attention_action;
  }
  if (input.engine_options && input.engine === engine) body.engine_options = input.engine_options;
  return body;
}

/** GET /v1/deploy's link of a body, or null when the body has what a query cannot carry. */
export function launchLink(body) {
  if (typeof body.device !== "string" || body.engine_options) return null;
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(body)) {
    if (value !== null && value !== undefined) query.set(key, String(value));
  }
  return `/v1/deploy?${query}`;
}

function block(id, title, text, open = false) {
  return h(
    "details",
    { class: "launch-block", open: open || null },
    h("summary", {}, title),
    h("pre", { id, class: "code", tabindex: "0" }, text),
  );
}

/** Render a /v1/deploy answer for `what` (a sentence naming the point) into `container`. */
export function renderLaunch(container, deploy, what, body) {
  const files = Object.entries(deploy.files);
  const link = launchLink(body);
  container.replaceChildren(
    h("p", { id: "launch-what" }, what),
    h(
      "p",
      { class: "sub" },
      `${fmt(deploy.replicas)} replica${deploy.replicas === 1 ? "" : "s"} × ${fmt(deploy.devices_per_replica)} device${deploy.devices_per_replica === 1 ? "" : "s"} = ${fmt(deploy.num_devices)} devices · ${deploy.engine}`,
    ),
    h("label", { for: "launch-command" }, "Command (one replica)"),
    h("textarea", { id: "launch-command", readonly: true, rows: "3", spellcheck: "false" }, deploy.command.text),
    ...files.map(([name, text]) => block(`launch-file-${name.replace(/[^a-z0-9]/gi, "-")}`, `Config file ${name}`, text, true)),
    block("launch-k8s", "Kubernetes Deployment and Service", deploy.kubernetes),
    block("launch-compose", "docker-compose service", deploy.compose),
    deploy.notes.length ? h("ul", { id: "launch-notes", class: "hint" }, deploy.notes.map((n) => h("li", {}, n))) : "",
    h(
      "p",
      { class: "hint" },
      link ? h("a", { id: "launch-link", href: link, target: "_blank", rel: "noopener" }, "This launch as a link (GET /v1/deploy)") : "A custom device or engine options: POST /v1/deploy with the body.",
      ` · options from ${deploy.source}`,
    ),
  );
}
