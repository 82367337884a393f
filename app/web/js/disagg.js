// mode disagg of /v1/optimize: the best deployment's two pools, the split and the binding
// pool; the ranked deployments; their CSV (each pool's figures as prefill_* / decode_*).
import { csvCell, download, fmt, fmtMs, h, stat, timestamp } from "./util.js";

const pool = (p) => `${fmt(p.workers)} × ${p.parallel} (${fmt(p.devices)} devices)`;
const busy = (p) => `${fmt(p.utilisation * 100, 0)} % busy · waits ${fmtMs(p.wait_ms)}`;

export function renderDisaggSummary(container, response) {
  const input = response.input;
  const heading = `${input.model} on ${input.num_devices} × ${input.device} · engine ${response.engine?.name ?? ""} · disaggregated`;
  const best = response.best;
  const notice = response.notice ? [h("p", { class: "warn", id: "disagg-notice" }, response.notice)] : [];
  if (!best) {
    container.replaceChildren(
      h("h2", { id: "summary-title" }, "No feasible deployment"),
      h("p", { class: "sub" }, heading),
      h("p", { class: "warn" }, response.reason || "no split of the devices meets the limits"),
      ...notice,
    );
    container.classList.add("infeasible");
    return;
  }
  container.classList.remove("infeasible");
  container.replaceChildren(
    h("h2", { id: "summary-title" }, `Best split: ${best.pd_split}, ${fmt(best.concurrency)} clients`),
    h("p", { class: "sub" }, `${heading} · first token: ${response.first_token.replace(/_/g, " ")}`),
    h(
      "dl",
      { class: "stats", id: "disagg-pools" },
      stat("output tokens/s", fmt(best.output_throughput, 0)),
      stat("tokens/s/device", fmt(best.throughput_per_device, 1), "output tokens/s over the devices of both pools"),
      stat("TTFT", fmtMs(best.ttft_ms)),
      stat("TPOT", fmtMs(best.tpot_ms)),
      stat("P:D split", best.pd_split),
      stat("binding pool", best.binding_pool, "the pool requests queue for longer: the one to grow"),
      stat("prefill pool", pool(best.prefill)),
      stat("decode pool", pool(best.decode)),
      stat("prefill load", busy(best.prefill)),
      stat("decode load", busy(best.decode)),
      stat("KV transfer", fmtMs(best.transfer_ms), "mean time a request's KV takes from prefill to decode"),
      stat("requests/s", fmt(best.request_throughput, 3)),
    ),
    ...notice,
    h("p", { class: "hint" }, `${fmt(response.search.evaluated)} of ${fmt(response.search.configurations)} configurations simulated (${fmt(response.search.simulations)} closed-loop runs).`),
  );
}

const COLUMNS = [
  ["rank", "#", 0],
  ["pd_split", "split", null],
  ["prefill_pool", "prefill pool", null],
  ["decode_pool", "decode pool", null],
  ["binding_pool", "binds", null],
  ["concurrency", "clients", 0],
  ["throughput_per_device", "tokens/s/dev", 1],
  ["output_throughput", "tokens/s", 0],
  ["ttft_ms", "TTFT ms", 1],
  ["tpot_ms", "TPOT ms", 2],
  ["prefill_util", "P busy %", 0],
  ["decode_util", "D busy %", 0],
];

export function renderDisaggTable(container, response) {
  const rows = response.rows.map((r, i) => ({
    ...r,
    rank: i + 1,
    prefill_pool: pool(r.prefill),
    decode_pool: pool(r.decode),
    prefill_util: r.prefill.utilisation * 100,
    decode_util: r.decode.utilisation * 100,
  }));
  if (!rows.length) {
    container.replaceChildren(h("p", { class: "empty" }, "No feasible deployment."));
    return;
  }
  const head = h("tr", {}, COLUMNS.map(([key, label, digits]) => h("th", { scope: "col", class: digits === null ? "" : "num", dataset: { key } }, label)));
  const body = rows.map((row) =>
    h(
      "tr",
      { dataset: { rank: row.rank }, class: row.rank === 1 ? "selected" : "" },
      COLUMNS.map(([key, , digits]) =>
        key === "pd_split"
          ? h("th", { scope: "row" }, row[key])
          : h("td", { class: digits === null ? "" : "num", dataset: { key } }, digits === null ? String(row[key]) : fmt(row[key], digits)),
      ),
    ),
  );
  const table = h("table", { class: "data", id: "results-table" }, h("caption", { class: "sr-only" }, "Disaggregated deployments, ranked by tokens/s per device"), h("thead", {}, head), h("tbody", {}, body));
  container.replaceChildren(
    h("p", { class: "hint table-hint" }, "Deployments the search simulated, each at its highest concurrency within the limits, ranked by output tokens/s per device of both pools."),
    h("div", { class: "table-wrap", tabindex: "0", role: "region", "aria-label": "Disaggregated deployments" }, table),
  );
}

/** One line per deployment: its figures, each pool's as prefill_* / decode_* columns. */
export function disaggCsv(response) {
  const rows = response.rows;
  if (!rows.length) return "";
  const flat = rows.map((r) => {
    const out = {};
    for (const [key, value] of Object.entries(r)) {
      if (key === "prefill" || key === "decode") {
        for (const [k, v] of Object.entries(value)) out[`${key}_${k}`] = v;
      } else out[key] = value;
    }
    return out;
  });
  const keys = Object.keys(flat[0]);
  return `${[keys.join(","), ...flat.map((r) => keys.map((k) => csvCell(r[k])).join(","))].join("\n")}\n`;
}

export function exportDisaggCsv(response) {
  download(`chunkwise-optimize-disagg-${timestamp()}.csv`, disaggCsv(response), "text/csv");
}
