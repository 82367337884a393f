// The best configuration, the ranked table (sortable, selectable) and the exports.
import { csvCell, download, fmt, fmtMs, gib, h, stat, timestamp } from "./util.js";

/** Columns of the ranked table: [key, header, digits | formatter, title]. */
export const COLUMNS = [
  ["rank", "#", 0, "rank by throughput"],
  ["role", "role", null, "agg, prefill or decode instances"],
  ["parallel", "layout", null, "parallel layout"],
  ["concurrency", "concurrency", 0, "requests over all replicas"],
  ["batch_size", "batch", 0, "requests per replica"],
  ["throughput_tokens_s", "tokens/s", 0, "throughput of all replicas"],
  ["throughput_per_device", "tokens/s/dev", 1, "throughput per device"],
  ["ttft_ms", "TTFT ms", 1, "mean time to first token"],
  ["tpot_ms", "TPOT ms", 2, "mean time per output token"],
  ["prefill_num_chunks", "chunks", 0, "prefill_num_chunks"],
  ["effective_input_length", "eff. input", 0, "effective_input_length (uncached tokens)"],
  ["memory_left_gib", "mem left GiB", 2, "memory left per device, GiB (memory_left_gb in GiB)"],
  ["kv_cache_gib", "KV GiB", 2, "KV cache per device, GiB (memory_gb.kv_cache_gb in GiB)"],
  ["weights_gib", "weights GiB", 2, "weights per device, GiB (memory_gb.weights_gb in GiB)"],
  ["request_throughput", "req/s", 3, "requests per second"],
  ["sla_confidence", "SLA conf.", 2, "share of the 80 % intervals inside the limits (below 0.5: a limit is more likely missed than met)"],
  ["method", "method", null, "time_simulation or closed_form_waves"],
];

/**
 * pd_ratio's split rows: the prefill and decode operating points the split runs its instances
 * at (the RFC picks each side's most QPS per instance: P_QPS = batch / TTFT, D_QPS from TPOT),
 * which the summary card reports. They can differ from the ranked rows of the same layouts
 * (each layout's highest-throughput point), so the table lists them first, as P×n and D×n.
 */
export function splitRows(response) {
  const pd = response.mode === "pd_ratio" ? response.pd_ratio : null;
  if (!pd?.split) return [];
  return [
    [pd.prefill_row, -1, `P×${pd.split.prefill_instances}`],
    [pd.decode_row, 0, `D×${pd.split.decode_instances}`],
  ]
    .filter(([row]) => row)
    .map(([row, rank, label]) => ({ ...row, rank, rank_label: label, in_split: true }));
}

export function tableRows(response) {
  return [...splitRows(response), ...response.rows.map((row, i) => ({ ...row, rank: i + 1, in_split: false }))].map((row) => ({
    ...row,
    memory_left_gib: gib(row.memory_left_gb),
    kv_cache_gib: gib(row.memory_gb?.kv_cache_gb ?? null),
    weights_gib: gib(row.memory_gb?.weights_gb ?? null),
  }));
}

function compare(key, dir) {
  return (a, b) => {
    const x = a[key];
    const y = b[key];
    if (x === y) return a.rank - b.rank;
    if (x === null || x === undefined) return 1;
    if (y === null || y === undefined) return -1;
    const out = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y), "en", { numeric: true });
    return dir === "ascending" ? out : -out;
  };
}

/**
 * Render the table into `container`; `onSelect(row)` runs when a row's "timeline" button is used,
 * `onLaunch(row)` when its "launch" button is. Returns a controller with `select(rank)`.
 */
export function renderTable(container, response, onSelect, onLaunch = () => {}) {
  const rows = tableRows(response);
  const showRole = new Set(rows.map((r) => r.role)).size > 1 || response.mode !== "agg";
  const columns = COLUMNS.filter(([key]) => key !== "role" || showRole);
  let sortKey = "rank";
  let sortDir = "ascending";
  let selected = null;
  const table = h("table", { class: "data", id: "results-table" });
  const caption = h("caption", { class: "sr-only" }, "Ranked configurations, best per parallel layout");
  const thead = h("thead");
  const tbody = h("tbody");
  table.append(caption, thead, tbody);

  function header() {
    const cells = columns.map(([key, label, digits, title]) => {
      const sorted = key === sortKey;
      return h(
        "th",
        { scope: "col", "aria-sort": sorted ? sortDir : null, class: digits === null ? "" : "num", dataset: { key } },
        h(
          "button",
          { type: "button", class: "sort", title: `${title}; sort`, onclick: () => sortBy(key) },
          label,
          h("span", { class: "sort-mark", "aria-hidden": "true" }, sorted ? (sortDir === "ascending" ? " ▲" : " ▼") : ""),
        ),
      );
    });
    cells.splice(1, 0, h("th", { scope: "col" }, h("span", { class: "sr-only" }, "actions")));
    thead.replaceChildren(h("tr", {}, cells));
  }

  function body() {
    const sorted = [...rows].sort(compare(sortKey, sortDir));
    tbody.replaceChildren(
      ...sorted.map((row) => {
        const classes = [row.rank === selected ? "selected" : "", row.in_split ? "split-row" : ""].filter(Boolean).join(" ");
        const tr = h("tr", { dataset: { rank: row.rank }, class: classes, "aria-selected": row.rank === selected ? "true" : "false" });
        for (const [key, , digits] of columns) {
          const value = row[key];
          const text = key === "rank" && row.rank_label ? row.rank_label : digits === null ? value ?? "–" : fmt(value, digits);
          tr.append(key === "parallel" ? h("th", { scope: "row" }, text) : h("td", { class: digits === null ? "" : "num", dataset: { key } }, text));
        }
        tr.insertBefore(
          h(
            "td",
            { class: "row-actions" },
            h("button", { type: "button", class: "small", "aria-label": `Simulate the step timeline of rank ${row.rank} (${row.parallel})`, onclick: () => controller.select(row.rank) }, "Timeline"),
            h("button", { type: "button", class: "small", "aria-label": `Launch configuration of rank ${row.rank} (${row.parallel})`, onclick: () => onLaunch(row) }, "Launch"),
          ),
          tr.children[1],
        );
        return tr;
      }),
    );
  }

  function sortBy(key) {
    if (key === sortKey) sortDir = sortDir === "ascending" ? "descending" : "ascending";
    else {
      sortKey = key;
      const numeric = rows.some((r) => typeof r[key] === "number");
      sortDir = numeric && key !== "rank" ? "descending" : "ascending";
    }
    header();
    body();
    thead.querySelector(`th[data-key="${key}"] button`)?.focus(); // keep the keyboard's place
  }

  const controller = {
    select(rank) {
      const hadFocus = tbody.contains(document.activeElement);
      selected = rank;
      body();
      if (hadFocus) tbody.querySelector(`tr[data-rank="${rank}"] button`)?.focus();
      const row = rows.find((r) => r.rank === rank);
      if (row) onSelect(row);
    },
  };
  header();
  body();
  container.replaceChildren(
    ...(rows.length
      ? [
          h(
            "p",
            { class: "hint table-hint" },
            rows.some((r) => r.in_split)
              ? "P×n and D×n: the operating points the split runs its prefill and decode instances at (the summary's numbers; the most requests/s per instance); 1, 2, …: each layout's highest-throughput row. "
              : "Best row per parallel layout. ",
            "Sort by a column header; “Timeline” simulates a row, “Launch” gives its engine command.",
          ),
          h("div", { class: "table-wrap", tabindex: "0", role: "region", "aria-label": "Ranked configurations" }, table),
        ]
      : [h("p", { class: "empty" }, "No feasible configuration.")]),
  );
  return controller;
}

// -- summary card ------------------------------------------------------------------------
export function renderSummary(container, response) {
  const input = response.input;
  const engine = response.engine?.name ? ` · engine ${response.engine.name}` : "";
  const heading = `${input.model} on ${input.num_devices} × ${input.device}${engine}`;
  if (response.mode === "pd_ratio" && response.pd_ratio) {
    const pd = response.pd_ratio;
    const split = pd.split;
    container.replaceChildren(
      h("h2", { id: "summary-title" }, "Best PD split"),
      h("p", { class: "sub" }, heading),
      split
        ? h(
            "dl",
            { class: "stats" },
            stat("output tokens/s", fmt(pd.output_throughput, 0)),
            stat("tokens/s/device", fmt(pd.throughput_per_device, 1)),
            stat("prefill : decode instances", `${split.prefill_instances} : ${split.decode_instances}`),
            stat("devices used", fmt(split.devices_used)),
            stat("PD ratio (D_QPS / P_QPS)", fmt(pd.pd_ratio, 3)),
            stat("balanced QPS", fmt(split.balanced_qps, 2)),
            stat("split", pd.pd_split ?? "–", "prefill:decode instances (devices)"),
            stat("binding pool", pd.binding_pool ?? "–", "the side whose instances cap the balanced QPS (the one to grow)"),
            stat(`prefill layout (P×${split.prefill_instances})`, pd.prefill_row ? `${pd.prefill_row.parallel} · ${fmt(pd.prefill_row.concurrency)} req` : "–"),
            stat(`decode layout (D×${split.decode_instances})`, pd.decode_row ? `${pd.decode_row.parallel} · ${fmt(pd.decode_row.concurrency)} req` : "–"),
            stat("TTFT", fmtMs(pd.prefill_row?.ttft_ms)),
            stat("TPOT", fmtMs(pd.decode_row?.tpot_ms)),
            stat("input tokens/s per prefill instance", fmt(pd.prefill_row?.throughput_tokens_s, 0)),
            stat("output tokens/s per decode instance", fmt(pd.decode_row?.throughput_tokens_s, 0)),
          )
        : h("p", { class: "warn" }, pd.reason || response.reason || "no feasible split"),
      split ? h("p", { class: "sub" }, `The layouts and numbers are the table's P×${split.prefill_instances} and D×${split.decode_instances} rows.`) : "",
    );
    container.classList.toggle("infeasible", !split);
    return;
  }
  const best = response.best;
  if (!best) {
    container.replaceChildren(
      h("h2", { id: "summary-title" }, "No feasible configuration"),
      h("p", { class: "sub" }, heading),
      h("p", { class: "warn" }, response.reason || "every probed configuration violates a limit or memory"),
    );
    container.classList.add("infeasible");
    return;
  }
  container.classList.remove("infeasible");
  const role = best.role === "agg" ? "" : ` (${best.role} instances)`;
  container.replaceChildren(
    h("h2", { id: "summary-title" }, `Best: ${best.parallel}${role}, concurrency ${fmt(best.concurrency)}`),
    h("p", { class: "sub" }, `${heading} · ${best.quantization} · ${best.method.replace(/_/g, " ")}`),
    h(
      "dl",
      { class: "stats" },
      stat(`${best.throughput_kind} tokens/s`, fmt(best.throughput_tokens_s, 0)),
      stat("tokens/s/device", fmt(best.throughput_per_device, 1)),
      stat("TTFT", fmtMs(best.ttft_ms)),
      stat("TPOT", fmtMs(best.tpot_ms)),
      stat("TTFT, 80 % interval", span(best.ttft_ms_interval, fmtMs), INTERVAL_HINT),
      stat("TPOT, 80 % interval", span(best.tpot_ms_interval, fmtMs), INTERVAL_HINT),
      stat("tokens/s, 80 % interval", span(best.throughput_interval, (v) => fmt(v, 0)), INTERVAL_HINT),
      stat("requests/s", fmt(best.request_throughput, 3)),
      stat("batch / replica", fmt(best.batch_size)),
      stat("prefill chunks", fmt(best.prefill_num_chunks), "prefill_num_chunks"),
      stat("effective input", `${fmt(best.effective_input_length)} tokens`, "effective_input_length"),
      stat("max batched tokens", fmt(best.max_batched_tokens)),
      stat("memory left", `${fmt(gib(best.memory_left_gb), 2)} GiB`, "per device"),
      stat("SLA confidence", fmt(best.sla_confidence, 2), "share of the 80 % intervals inside the limits"),
    ),
    ...calibrationNote(response.calibration),
    ...(response.notice ? [h("p", { class: "warn", id: "answer-notice" }, response.notice)] : []),
  );
}

const INTERVAL_HINT = "where the measured value lies with 80 % probability (docs/engine.md, Calibration and uncertainty)";

/** An interval [low, high] as "low – high" ("–" when there is none). */
function span(interval, format) {
  return interval ? `${format(interval[0])} – ${format(interval[1])}` : "–";
}

/** The calibration a response applied, and whether it covers the estimate. */
function calibrationNote(note) {
  if (!note) return [];
  const text = note.applicable
    ? `calibrated (${note.id})`
    : `calibration ${note.id} does not cover this estimate: ${note.reason}; intervals widened`;
  return [h("p", { class: note.applicable ? "sub" : "warn" }, text)];
}

/** Where a response's intervals come from, in words (the charts' captions). */
export function intervalSource(note) {
  if (!note) return "from the product's validation errors for this device and engine";
  return note.applicable
    ? `from calibration ${note.id}`
    : `from calibration ${note.id}, widened (it does not cover this: ${note.reason})`;
}

// -- exports -------------------------------------------------------------------------------
/** The CSV name of an interval's bounds: ttft_ms_interval -> ttft_ms_lo, ttft_ms_hi. */
const INTERVAL_OF = { throughput_interval: "throughput_tokens_s" };
const intervalBase = (key) => INTERVAL_OF[key] ?? key.replace(/_interval$/, "");

/**
 * One line per row; memory_gb and the [low, high] intervals become columns of their own. pd_ratio
 * adds its split rows first (in_split true) and the split (pd_split, binding_pool) on each line.
 */
export function rowsCsv(response) {
  const split = splitRows(response);
  const rows = [...split, ...response.rows];
  if (!rows.length) return "";
  const memoryKeys = [...new Set(rows.flatMap((r) => Object.keys(r.memory_gb || {})))];
  const keys = Object.keys(response.rows[0] ?? response.pd_ratio.prefill_row).filter((k) => k !== "memory_gb");
  const columns = keys.flatMap((k) =>
    k.endsWith("_interval")
      ? [
          [`${intervalBase(k)}_lo`, (r) => r[k]?.[0]],
          [`${intervalBase(k)}_hi`, (r) => r[k]?.[1]],
        ]
      : [[k, (r) => r[k]]],
  );
  columns.push(...memoryKeys.map((m) => [`memory_gb.${m}`, (r) => r.memory_gb?.[m]]));
  const pd = response.mode === "pd_ratio" ? response.pd_ratio : null;
  if (pd) {
    columns.push(
      ["in_split", (r) => Boolean(r.in_split)],
      ["pd_split", () => pd.pd_split],
      ["binding_pool", () => pd.binding_pool],
    );
  }
  const lines = rows.map((r) => columns.map(([, get]) => csvCell(get(r))).join(","));
  return `${[columns.map(([name]) => name).join(","), ...lines].join("\n")}\n`;
}

export function exportCsv(response) {
  download(`chunkwise-optimize-${timestamp()}.csv`, rowsCsv(response), "text/csv");
}

export function exportJson(response) {
  download(`chunkwise-optimize-${timestamp()}.json`, `${JSON.stringify(response, null, 2)}\n`, "application/json");
}
