// "Copy as CLI" and "Copy as curl" for the current form (an OptimizeRequest body).
import { FIELDS } from "./fields.js";
import { shellQuote } from "./util.js";

/** Flags that differ from their default, in the order of the form. */
export function cliCommand(body) {
  const words = ["chunkwise", "optimize", body.model ?? ""];
  const notes = [];
  const mode = body.mode ?? "agg";
  if (mode === "disagg_prefill" || mode === "disagg_decode") {
    words.push("--disagg");
    const limit = mode === "disagg_prefill" ? "ttft_limit_ms" : "tpot_limit_ms";
    if (body[limit] === undefined) {
      notes.push(`without a ${limit === "ttft_limit_ms" ? "TTFT" : "TPOT"} limit, --disagg runs both sides`);
    }
  } else if (mode === "pd_ratio") {
    words.push("--enable-optimize-prefill-decode-ratio");
  }
  for (const f of FIELDS) {
    if (!f.cli) continue;
    const value = f.parent ? body[f.parent]?.[f.name] : body[f.name];
    if (value === undefined || value === null) continue;
    if (f.default !== undefined && value === f.default) continue;
    if (f.kind === "bool") {
      if (value) words.push(f.cli);
    } else if (Array.isArray(value)) {
      if (value.length) words.push(f.cli, ...value.map(String));
    } else {
      words.push(f.cli, String(value));
    }
  }
  for (const f of FIELDS) {
    if (!f.cli && f.name in body && f.name !== "model" && f.name !== "mode" && body[f.name] !== f.default) {
      notes.push(`${f.name} has no CLI flag (curl and the dashboard send it)`);
    }
  }
  return { text: words.map(shellQuote).join(" "), notes };
}

export function curlCommand(body, origin) {
  const json = JSON.stringify(body);
  return [
    "curl",
    "-sS",
    `${origin}/v1/optimize`,
    "-H",
    "content-type: application/json",
    "-d",
    json,
  ]
    .map(shellQuote)
    .join(" ");
}
