// "Copy as CLI" and "Copy as curl" for the current form (an OptimizeRequest body).
import { FIELDS } from "./fields.js";
import { shellQuote } from "./util.js";

const CONTINUE = " \\\n  "; // shell line continuation

const join = (lines) => lines.map((line) => line.map(shellQuote).join(" ")).join(CONTINUE);

/** `chunkwise optimize` with the flags that differ from their defaults, one flag per line. */
export function cliCommand(body) {
  const lines = [["chunkwise", "optimize", body.model ?? ""]];
  const notes = [];
  const mode = body.mode ?? "agg";
  if (mode === "disagg_prefill" || mode === "disagg_decode") {
    lines.push(["--disagg"]);
    const limit = mode === "disagg_prefill" ? "ttft_limit_ms" : "tpot_limit_ms";
    if (body[limit] === undefined) {
      notes.push(`without a ${limit === "ttft_limit_ms" ? "TTFT" : "TPOT"} limit, --disagg runs both sides`);
    }
  } else if (mode === "pd_ratio") {
    lines.push(["--enable-optimize-prefill-decode-ratio"]);
  } else if (mode === "disagg") {
    lines.push(["--mode", "disagg"]);
  }
  for (const f of FIELDS) {
    if (!f.cli) continue;
    const value = f.parent ? body[f.parent]?.[f.key ?? f.name] : body[f.name];
    if (value === undefined || value === null) continue;
    if (f.default !== undefined && value === f.default) continue;
    if (f.kind === "bool") {
      if (value) lines.push([f.cli]);
    } else if (Array.isArray(value)) {
      if (value.length) lines.push([f.cli, ...value.map(String)]);
    } else {
      lines.push([f.cli, String(value)]);
    }
  }
  for (const f of FIELDS) {
    if (!f.cli && !["model", "mode"].includes(f.name) && f.name in body && body[f.name] !== f.default) {
      notes.push(`${f.name} has no CLI flag (curl and the dashboard send it)`);
    }
  }
  if (body.calibration) {
    notes.push(
      `calibration ${body.calibration}: the CLI applies a profile file instead (chunkwise calibrate RUNS.csv --out PROFILE.json, then --calibration PROFILE.json)`,
    );
  }
  return { text: join(lines), notes };
}

export function curlCommand(body, origin) {
  return join([
    ["curl", "-sS", `${origin}/v1/optimize`],
    ["-H", "content-type: application/json"],
    ["-d", JSON.stringify(body)],
  ]);
}
