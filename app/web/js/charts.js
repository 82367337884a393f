// Charts over the vendored Chart.js (window.Chart, loaded by index.html before this module).
import { fmt, fmtMs, h } from "./util.js";

const PALETTE = [
  "#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed",
  "#0891b2", "#db2777", "#65a30d", "#4b5563", "#9333ea",
];

const charts = new Map();

function draw(canvas, config) {
  charts.get(canvas.id)?.destroy();
  if (!window.Chart) throw new Error("the chart library did not load");
  const chart = new window.Chart(canvas, config);
  charts.set(canvas.id, chart);
  return chart;
}

export function chartOf(id) {
  return charts.get(id);
}

const baseOptions = () => ({
  responsive: true,
  maintainAspectRatio: false,
  animation: false,
  interaction: { mode: "nearest", intersect: false },
  plugins: { legend: { position: "bottom", labels: { boxWidth: 8, boxHeight: 8, usePointStyle: true } } },
});

/** Feasible probes grouped per (role, layout), sorted by concurrency. */
export function probeSeries(response) {
  const roles = new Set(response.probes.map((p) => p.role));
  const series = new Map();
  for (const probe of response.probes) {
    if (!probe.feasible) continue;
    const key = roles.size > 1 ? `${probe.role} ${probe.parallel}` : probe.parallel;
    if (!series.has(key)) series.set(key, { label: key, role: probe.role, probes: [] });
    series.get(key).probes.push(probe);
  }
  for (const s of series.values()) s.probes.sort((a, b) => a.concurrency - b.concurrency);
  return [...series.values()];
}

/** xInterval(probe): the x value's 80 % interval, when the x axis has one (latency). */
function datasets(series, x, xInterval = () => null) {
  return series
    .map((s, i) => ({
      label: s.label,
      data: s.probes
        .filter((p) => x(p, s) !== null && x(p, s) !== undefined)
        .map((p) => ({
          x: x(p, s),
          y: p.throughput_tokens_s,
          probe: p,
          xInterval: xInterval(p) ?? null,
          yInterval: p.throughput_interval ?? null,
        })),
      borderColor: PALETTE[i % PALETTE.length],
      backgroundColor: PALETTE[i % PALETTE.length],
      showLine: true,
      pointRadius: 3,
      borderWidth: 2,
      yAxisID: axisOf(s.role),
    }))
    .filter((d) => d.data.length);
}

/** Input tokens/s (prefill instances) and output tokens/s (the rest) are on axes of their own. */
const axisOf = (role) => (role === "prefill" ? "yIn" : "y");

/** The best row ringed on a probe chart (it is one of the probes). */
function bestDataset(response, x) {
  const best = response.best;
  if (!best) return [];
  const probe = response.probes.find(
    (p) => p.feasible && p.role === best.role && p.parallel === best.parallel && p.concurrency === best.concurrency,
  );
  const value = probe && x(probe);
  if (value === null || value === undefined) return [];
  return [
    {
      label: "best",
      data: [{ x: value, y: probe.throughput_tokens_s, probe }],
      borderColor: "#111827",
      backgroundColor: "rgba(0, 0, 0, 0)",
      pointStyle: "circle",
      pointRadius: 9,
      pointHoverRadius: 11,
      borderWidth: 2.5,
      showLine: false,
      yAxisID: axisOf(probe.role),
    },
  ];
}

/** A dashed vertical line at pixel x across the plot area; leaves the label font set. */
function dashedVertical(ctx, x, area, color) {
  ctx.strokeStyle = color;
  ctx.setLineDash([5, 4]);
  ctx.beginPath();
  ctx.moveTo(x, area.top);
  ctx.lineTo(x, area.bottom);
  ctx.stroke();
  ctx.setLineDash([]);
  ctx.font = "12px system-ui, sans-serif";
}

/** A dashed vertical line at a limit (TTFT / TPOT), drawn by a tiny inline plugin. */
const limitLine = {
  id: "limitLine",
  afterDatasetsDraw(chart, _args, options) {
    if (!options || options.value === null || options.value === undefined) return;
    const { ctx, chartArea: area, scales } = chart;
    const x = scales.x.getPixelForValue(options.value);
    if (x < area.left - 1 || x > area.right + 1) return;
    ctx.save();
    dashedVertical(ctx, x, area, "#6b7280");
    ctx.textAlign = x - area.left > ctx.measureText(options.label).width + 8 ? "right" : "left";
    ctx.fillStyle = "#374151";
    ctx.fillText(options.label, ctx.textAlign === "right" ? x + 2 : x - 2, area.top - 12);
    ctx.restore();
  },
};

/**
 * 80 % intervals as error bars under the points: vertical for throughput (yInterval), horizontal
 * for the x axis's latency (xInterval), in the dataset's colour, clipped to the plot area. The
 * count of points drawn with a bar is kept on the chart (`chart.$intervals`).
 */
const errorBars = {
  id: "errorBars",
  beforeDatasetsDraw(chart, _args, options) {
    chart.$intervals = 0;
    if (!options?.display) return;
    const { ctx, chartArea: area, scales } = chart;
    const CAP = 3; // px, half the width of a bar's end
    const px = (scale, v) => {
      const p = scale.getPixelForValue(v);
      return Number.isFinite(p) ? p : scale.isHorizontal() ? area.left : area.bottom;
    };
    ctx.save();
    ctx.beginPath();
    ctx.rect(area.left, area.top, area.right - area.left, area.bottom - area.top);
    ctx.clip();
    ctx.lineWidth = 1.25;
    let drawn = 0;
    chart.data.datasets.forEach((dataset, index) => {
      if (!chart.isDatasetVisible(index)) return;
      ctx.strokeStyle = withAlpha(dataset.borderColor, 0.55);
      const yScale = scales[dataset.yAxisID ?? "y"] ?? scales.y;
      for (const point of dataset.data) {
        const { xInterval: xi, yInterval: yi } = point;
        if (!xi && !yi) continue;
        const x = px(scales.x, point.x);
        const y = px(yScale, point.y);
        ctx.beginPath();
        if (yi) {
          const [lo, hi] = [px(yScale, yi[0]), px(yScale, yi[1])];
          ctx.moveTo(x, lo);
          ctx.lineTo(x, hi);
          ctx.moveTo(x - CAP, lo);
          ctx.lineTo(x + CAP, lo);
          ctx.moveTo(x - CAP, hi);
          ctx.lineTo(x + CAP, hi);
        }
        if (xi) {
          const [lo, hi] = [px(scales.x, xi[0]), px(scales.x, xi[1])];
          ctx.moveTo(lo, y);
          ctx.lineTo(hi, y);
          ctx.moveTo(lo, y - CAP);
          ctx.lineTo(lo, y + CAP);
          ctx.moveTo(hi, y - CAP);
          ctx.lineTo(hi, y + CAP);
        }
        ctx.stroke();
        drawn += 1;
      }
    });
    ctx.restore();
    chart.$intervals = drawn;
  },
};

/** Points that have an interval to draw. */
const withIntervals = (data) => data.reduce((n, d) => n + d.data.filter((p) => p.xInterval || p.yInterval).length, 0);

/** A y axis reaches the highest throughput interval of its datasets when the bars are shown. */
function intervalTop(data, shown, axis) {
  if (!shown) return undefined;
  const tops = data.filter((d) => d.yAxisID === axis).flatMap((d) => d.data.map((p) => p.yInterval?.[1] ?? p.y));
  return tops.length ? Math.max(...tops) : undefined;
}

const span = (interval, format) => (interval ? `${format(interval[0])} – ${format(interval[1])}` : "–");

function probeTooltip(ctx) {
  const p = ctx.raw.probe;
  const lines = [
    `${ctx.dataset.label}: ${fmt(p.throughput_tokens_s, 0)} tokens/s`,
    `concurrency ${p.concurrency} (batch ${p.batch_size}/replica)`,
    `TTFT ${fmtMs(p.ttft_ms)} · TPOT ${fmtMs(p.tpot_ms)}`,
  ];
  if (p.throughput_interval || p.ttft_ms_interval || p.tpot_ms_interval) {
    lines.push(
      `80 %: ${span(p.throughput_interval, (v) => fmt(v, 0))} tokens/s`,
      `80 %: TTFT ${span(p.ttft_ms_interval, fmtMs)} · TPOT ${span(p.tpot_ms_interval, fmtMs)}`,
    );
  }
  return lines;
}

/**
 * The throughput axes: output tokens/s (agg, decode) on the left, input tokens/s (prefill) on
 * its own axis, on the right when both are plotted (pd_ratio), so neither rate is read off the
 * other's scale.
 */
function throughputScales(data, shown) {
  const axes = new Set(data.map((d) => d.yAxisID));
  const both = axes.has("y") && axes.has("yIn");
  const scales = {};
  if (axes.has("y") || !axes.size) {
    scales.y = { type: "linear", position: "left", title: { display: true, text: both ? "output tokens/s (decode)" : "output tokens/s" }, beginAtZero: true, suggestedMax: intervalTop(data, shown, "y") };
  }
  if (axes.has("yIn")) {
    scales.yIn = {
      type: "linear",
      position: both ? "right" : "left",
      title: { display: true, text: both ? "input tokens/s (prefill)" : "input tokens/s" },
      beginAtZero: true,
      grid: { drawOnChartArea: !both },
      suggestedMax: intervalTop(data, shown, "yIn"),
    };
  }
  return scales;
}

/** Log-axis labels at 1, 2, 5 × 10^k only. */
function logTick(value) {
  if (!(value > 0)) return "";
  const r = value / 10 ** Math.floor(Math.log10(value) + 1e-9);
  return [1, 2, 5].some((m) => Math.abs(r - m) < 1e-6) ? fmt(value, value < 1 ? 1 : 0) : "";
}

/** "No data" note next to a chart's canvas. */
function note(canvas, points, text) {
  const box = canvas.parentElement;
  let el = box.querySelector(".chart-note");
  if (!el) {
    el = h("p", { class: "chart-note" });
    box.append(el);
  }
  el.textContent = points ? "" : text;
  el.hidden = Boolean(points);
}

/** view.intervals: draw the 80 % intervals. Returns {points, intervals} (counts plotted). */
export function drawConcurrencyChart(canvas, response, view = {}) {
  const shown = view.intervals ?? true;
  const series = probeSeries(response);
  const data = datasets(series, (p) => p.concurrency);
  draw(canvas, {
    type: "scatter",
    data: { datasets: [...data, ...bestDataset(response, (p) => p.concurrency)] },
    plugins: [errorBars],
    options: {
      ...baseOptions(),
      scales: {
        x: {
          type: "logarithmic",
          title: { display: true, text: "concurrency (requests, log scale)" },
          ticks: { callback: logTick, autoSkip: false, maxRotation: 0 },
        },
        ...throughputScales(data, shown),
      },
      plugins: {
        ...baseOptions().plugins,
        tooltip: { callbacks: { label: probeTooltip } },
        errorBars: { display: shown },
      },
    },
  });
  const points = data.reduce((n, d) => n + d.data.length, 0);
  note(canvas, points, "No feasible probe to plot.");
  return { points, intervals: shown ? withIntervals(data) : 0 };
}

/**
 * metric: "tpot_ms" or "ttft_ms". Prefill instances have no TPOT: with TPOT they are left out
 * (pd_ratio), and disagg_prefill always plots TTFT; with TTFT, pd_ratio shows the prefill side.
 */
export function drawLatencyChart(canvas, response, metric, view = {}) {
  const shown = view.intervals ?? true;
  let series = probeSeries(response);
  if (response.mode === "pd_ratio") {
    series = series.filter((s) => (metric === "ttft_ms" ? s.role === "prefill" : s.role === "decode"));
  }
  const key = response.mode === "disagg_prefill" ? "ttft_ms" : metric;
  const data = datasets(series, (p) => p[key], (p) => p[`${key}_interval`]);
  const side = response.mode === "pd_ratio" ? (key === "ttft_ms" ? ", prefill layouts" : ", decode layouts") : "";
  const label = `${key === "ttft_ms" ? "TTFT" : "TPOT"} (ms${side})`;
  const limit = response.input[key === "ttft_ms" ? "ttft_limit_ms" : "tpot_limit_ms"];
  draw(canvas, {
    type: "scatter",
    data: { datasets: [...data, ...bestDataset(response, (p) => p[key])] },
    plugins: [limitLine, errorBars],
    options: {
      ...baseOptions(),
      layout: { padding: { top: limit ? 22 : 0 } }, // room for the limit's label
      scales: {
        x: { title: { display: true, text: label }, suggestedMax: limit ? limit * 1.03 : undefined },
        ...throughputScales(data, shown),
      },
      plugins: {
        ...baseOptions().plugins,
        tooltip: { callbacks: { label: probeTooltip } },
        errorBars: { display: shown },
        limitLine: { value: limit ?? null, label: `${key === "ttft_ms" ? "TTFT" : "TPOT"} limit ${fmt(limit ?? 0, 0)} ms` },
      },
    },
  });
  const points = data.reduce((n, d) => n + d.data.length, 0);
  note(canvas, points, "No feasible probe to plot.");
  return { points, intervals: shown ? withIntervals(data) : 0 };
}

// -- step timeline of /v1/simulate ------------------------------------------------------
const LANES = ["finished", "first token", "decode", "prefill"]; // y = index
const BINS = 800; // time resolution of the lanes (about a pixel at 1280 px)
const EXACT = 64; // place a repeated step's work step by step up to this many repeats

/**
 * The lanes as bars: the run is cut into BINS time bins, each bin knows how busy the lane
 * was (prefill or decode forward time / bin width), and runs of bins at the same busy level
 * (quarters) become one bar, drawn as opaque as the lane was busy. Thousands of sub-pixel
 * steps thus read as a bar whose shade is their duty cycle. Markers are exact.
 */
export function timelineSpan(timeline) {
  const last = timeline[timeline.length - 1];
  return last ? last.start_ms + last.repeat * last.step_ms : 0;
}

export function timelineData(timeline, from = 0, to = timelineSpan(timeline)) {
  const first = [];
  const done = [];
  const width = (to - from) / BINS || 1;
  const busy = { prefill: new Float64Array(BINS), decode: new Float64Array(BINS) };
  const add = (bins, a, b, share) => {
    a = Math.max(a, from);
    b = Math.min(b, to);
    let i = Math.min(BINS - 1, Math.floor((a - from) / width));
    while (a < b && i < BINS) {
      const e = Math.min(b, from + (i + 1) * width);
      bins[i] += (e - a) * share;
      a = e;
      i += 1;
    }
  };
  for (const step of timeline) {
    const { start_ms: t0, step_ms: dt, repeat } = step;
    if (t0 > to) break;
    if (t0 + repeat * dt < from) continue;
    for (const [lane, active, ms] of [
      ["prefill", step.p_step > 0, step.prefill_ms],
      ["decode", step.d_step > 0, step.decode_ms],
    ]) {
      if (!active || !(ms > 0)) continue;
      if (repeat <= EXACT) {
        for (let r = 0; r < repeat; r += 1) add(busy[lane], t0 + r * dt, t0 + r * dt + ms, 1);
      } else {
        add(busy[lane], t0, t0 + repeat * dt, Math.min(1, ms / dt));
      }
    }
    // First tokens and finishes happen at the end of the entry's last step (API semantics).
    const end = t0 + repeat * dt;
    if (end >= from && end <= to) {
      if (step.first_tokens) first.push({ x: end, y: 1, count: step.first_tokens, step });
      if (step.finished) done.push({ x: end, y: 0, count: step.finished, step });
    }
  }
  const bars = (bins, y) => {
    const out = [];
    let open = null;
    const close = (i) => {
      if (!open) return;
      const end = from + i * width;
      out.push({ x: open.start, y, level: open.level, busy: open.busy / (end - open.start) }, { x: end, y }, { x: end, y: null });
      open = null;
    };
    for (let i = 0; i < BINS; i += 1) {
      const share = bins[i] / width;
      const level = share < 0.02 ? 0 : Math.max(0.25, Math.round(share * 4) / 4);
      if (open && level !== open.level) close(i);
      if (level && !open) open = { start: from + i * width, level, busy: 0 };
      if (open) open.busy += bins[i];
    }
    close(BINS);
    return out;
  };
  return { prefill: bars(busy.prefill, 3), decode: bars(busy.decode, 2), first, done };
}

function withAlpha(hex, alpha) {
  const n = Number.parseInt(hex.slice(1), 16);
  return `rgba(${(n >> 16) & 255}, ${(n >> 8) & 255}, ${n & 255}, ${alpha.toFixed(3)})`;
}

/** view: {from, to} in ms (default: the whole run). */
export function drawTimeline(canvas, sim, view = {}) {
  const timeline = sim.timeline || [];
  const from = view.from ?? 0;
  const to = view.to ?? timelineSpan(timeline);
  const { prefill, decode, first, done } = timelineData(timeline, from, to);
  const seconds = to - from > 10000;
  const lane = (label, data, color) => ({
    label,
    data,
    borderColor: color,
    backgroundColor: color,
    // A bar is as opaque as the lane was busy inside it (decode inside mixed steps: faint).
    segment: {
      borderColor: (ctx) => {
        const level = data[ctx.p0DataIndex].level ?? 1;
        return level >= 1 ? color : withAlpha(color, 0.15 + 0.85 * level);
      },
    },
    showLine: true,
    spanGaps: false,
    borderWidth: 14,
    borderCapStyle: "butt",
    pointRadius: 0,
    pointHitRadius: 4,
  });
  const marker = (label, data, color, style) => ({
    label,
    data,
    borderColor: color,
    backgroundColor: color,
    showLine: false,
    pointStyle: style,
    pointRadius: 4,
    pointHoverRadius: 8,
  });
  draw(canvas, {
    type: "scatter",
    data: {
      datasets: [
        lane("prefill chunks", prefill, "#d97706"),
        lane("decode steps", decode, "#2563eb"),
        marker("first token", first, "#059669", "triangle"),
        marker("finished", done, "#dc2626", "rectRot"),
      ],
    },
    options: {
      ...baseOptions(),
      interaction: { mode: "nearest", intersect: true },
      scales: {
        x: {
          min: from,
          max: view.to !== undefined && to > from ? to : undefined,
          title: { display: true, text: seconds ? "time (s)" : "time (ms)" },
          ticks: { callback: (v) => (seconds ? fmt(v / 1000, v % 1000 ? 1 : 0) : fmt(v)) },
        },
        y: {
          min: -0.6,
          max: 3.6,
          afterBuildTicks: (axis) => {
            axis.ticks = [0, 1, 2, 3].map((v) => ({ value: v }));
          },
          ticks: { callback: (v) => LANES[v] ?? "" },
          grid: { display: false },
        },
      },
      plugins: {
        ...baseOptions().plugins,
        legend: {
          position: "bottom",
          labels: {
            boxWidth: 12,
            usePointStyle: true,
            generateLabels: (chart) =>
              window.Chart.defaults.plugins.legend.labels
                .generateLabels(chart)
                .map((item) => (item.datasetIndex < 2 ? { ...item, lineWidth: 1, pointStyle: "rect" } : item)),
          },
        },
        tooltip: {
          callbacks: {
            label: (ctx) => {
              const { count, step } = ctx.raw;
              const unit = seconds ? 1000 : 1;
              const t = (ms) => `${fmt(ms / unit, seconds ? 2 : 1)} ${seconds ? "s" : "ms"}`;
              if (count) {
                return [`${count} ${ctx.dataset.label} at ${t(ctx.raw.x)}`, `(step of ${fmt(step.p_step)} prefill, ${fmt(step.d_step)} decode requests)`];
              }
              const start = ctx.dataset.data[ctx.dataIndex - (ctx.raw.level === undefined ? 1 : 0)];
              const end = ctx.dataset.data[ctx.dataIndex + (ctx.raw.level === undefined ? 0 : 1)];
              if (!start || !end) return "";
              return `${ctx.dataset.label}: busy ${fmt(100 * start.busy, 0)}% of ${t(start.x)} – ${t(end.x)}`;
            },
          },
        },
      },
    },
  });
  return { prefill: prefill.length / 3, decode: decode.length / 3, first: first.length, done: done.length };
}

// -- chunk plan (HTML, no chart library) ----------------------------------------------
const MAX_DRAWN_CHUNKS = 1000;

export function renderChunkPlan(container, plan) {
  const total = plan.input_length || 1;
  const pct = (tokens) => `${((100 * tokens) / total).toFixed(3)}%`;
  const bar = h("div", { class: "plan-bar", role: "img", "aria-label": planSentence(plan) });
  if (plan.cached_prefix_tokens > 0) {
    bar.append(
      h("div", { class: "plan-seg cached", style: `flex-basis:${pct(plan.cached_prefix_tokens)}`, title: `cached prefix: ${plan.cached_prefix_tokens} tokens` }, "cached"),
    );
  }
  const chunks = plan.chunks;
  const drawn = chunks.length > MAX_DRAWN_CHUNKS ? chunks.slice(0, MAX_DRAWN_CHUNKS - 1) : chunks;
  drawn.forEach((c, i) => {
    bar.append(
      h(
        "div",
        { class: `plan-seg chunk c${i % 2}`, style: `flex-basis:${pct(c.query_len)}`, title: `chunk ${c.index + 1}: query ${c.query_len}, context after ${c.seq_len}` },
        drawn.length <= 24 ? String(c.index + 1) : "",
      ),
    );
  });
  if (drawn.length < chunks.length) {
    const rest = chunks.slice(drawn.length).reduce((n, c) => n + c.query_len, 0);
    bar.append(h("div", { class: "plan-seg chunk more", style: `flex-basis:${pct(rest)}`, title: `${chunks.length - drawn.length} more chunks` }, "…"));
  }
  const shown = chunks.length > 12 ? [...chunks.slice(0, 8), null, ...chunks.slice(-3)] : chunks;
  const rows = shown.map((c) =>
    c === null
      ? h("tr", {}, h("td", { class: "num", colspan: "4" }, `… ${fmt(chunks.length - 11)} more`))
      : h("tr", {}, h("td", { class: "num" }, c.index + 1), h("td", { class: "num" }, fmt(c.query_len)), h("td", { class: "num" }, fmt(c.seq_len)), h("td", {}, c.is_last_chunk ? "yes (first token)" : "")),
  );
  container.replaceChildren(
    h("p", { class: "plan-text" }, planSentence(plan)),
    bar,
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        { class: "data compact" },
        h("caption", { class: "sr-only" }, "Prefill chunks"),
        h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "chunk"), h("th", { scope: "col" }, "query_len"), h("th", { scope: "col" }, "seq_len"), h("th", { scope: "col" }, "last"))),
        h("tbody", {}, rows),
      ),
    ),

  );
}

function planSentence(plan) {
  return (
    `${fmt(plan.input_length)} input tokens, ${fmt(plan.cached_prefix_tokens)} cached: ` +
    `effective input ${fmt(plan.effective_input_length)} tokens in ${fmt(plan.prefill_num_chunks)} ` +
    `chunk${plan.prefill_num_chunks === 1 ? "" : "s"} of at most ${fmt(plan.max_batched_tokens)} tokens`
  );
}

// -- Pareto front of /v1/optimize ---------------------------------------------------------
/** The SLA region (x at least 1000 / TPOT limit: the streams the limit allows), shaded. */
const slaRegion = {
  id: "slaRegion",
  beforeDatasetsDraw(chart, _args, options) {
    if (!options || options.from === null || options.from === undefined) return;
    const { ctx, chartArea: area, scales } = chart;
    const x = Math.max(area.left, Math.min(area.right, scales.x.getPixelForValue(options.from)));
    ctx.save();
    ctx.fillStyle = "rgba(5, 150, 105, 0.09)";
    ctx.fillRect(x, area.top, area.right - x, area.bottom - area.top);
    dashedVertical(ctx, x, area, "#059669");
    ctx.fillStyle = "#065f46";
    ctx.textAlign = area.right - x > ctx.measureText(options.label).width + 8 ? "left" : "right";
    ctx.fillText(options.label, ctx.textAlign === "left" ? x + 4 : x - 4, area.top + 14);
    ctx.restore();
  },
};

/** The front's points as chart data (x: tokens/s per user, y: tokens/s per device). */
const paretoData = (points) =>
  points.map((p) => ({ x: p.user_tokens_s, y: p.throughput_per_device, point: p }));

function paretoTooltip(ctx) {
  const p = ctx.raw.point;
  return [
    `${p.role === "agg" ? "" : `${p.role} `}${p.parallel} at ${fmt(p.concurrency)} requests`,
    `${fmt(p.throughput_per_device, 1)} tokens/s/device · ${fmt(p.user_tokens_s, 1)} tokens/s/user`,
    `TTFT ${fmtMs(p.ttft_ms)} · TPOT ${fmtMs(p.tpot_ms)}`,
    p.feasible ? "meets the limits · click for its launch" : `misses: ${p.reason} · click for its launch`,
  ];
}

/**
 * The front of tokens/s per device against tokens/s per user, SLA region shaded from the TPOT
 * limit, points inside the limits (TTFT included) filled, the others hollow; `picked` (a point
 * of the front) ringed. `onPick(point)` runs when a point is clicked. Returns {points}.
 */
export function drawParetoChart(canvas, response, { picked = null, onPick = () => {} } = {}) {
  const front = response.pareto || [];
  const limit = response.input.tpot_limit_ms;
  const met = front.filter((p) => p.feasible);
  const missed = front.filter((p) => !p.feasible);
  const datasets = [
    {
      label: "front",
      data: paretoData(front),
      borderColor: "#9ca3af",
      backgroundColor: "#9ca3af",
      showLine: true,
      pointRadius: 0,
      pointHitRadius: 0,
      borderWidth: 1.5,
    },
    {
      label: "meets the limits",
      data: paretoData(met),
      borderColor: "#059669",
      backgroundColor: "#059669",
      pointRadius: 4,
      pointHoverRadius: 6,
      showLine: false,
    },
    {
      label: "misses a limit",
      data: paretoData(missed),
      borderColor: "#dc2626",
      backgroundColor: "rgba(0, 0, 0, 0)",
      pointRadius: 4,
      pointHoverRadius: 6,
      borderWidth: 1.5,
      showLine: false,
    },
  ];
  if (picked) {
    datasets.push({
      label: "picked",
      data: paretoData([picked]),
      borderColor: "#111827",
      backgroundColor: "rgba(0, 0, 0, 0)",
      pointRadius: 9,
      pointHoverRadius: 10,
      borderWidth: 2.5,
      showLine: false,
    });
  }
  const from = limit ? 1000 / limit : null;
  draw(canvas, {
    type: "scatter",
    data: { datasets },
    plugins: [slaRegion],
    options: {
      ...baseOptions(),
      interaction: { mode: "nearest", intersect: true },
      onClick(_event, elements, chart) {
        const hit = elements.find((e) => e.datasetIndex > 0);
        if (hit) onPick(chart.data.datasets[hit.datasetIndex].data[hit.index].point);
      },
      scales: {
        x: { title: { display: true, text: "tokens/s per user (1000 / TPOT ms)" }, beginAtZero: true },
        y: { title: { display: true, text: "output tokens/s per device" }, beginAtZero: true },
      },
      plugins: {
        ...baseOptions().plugins,
        legend: { ...baseOptions().plugins.legend, labels: { ...baseOptions().plugins.legend.labels, filter: (item) => item.text !== "front" } },
        tooltip: { filter: (item) => item.datasetIndex > 0, callbacks: { label: paretoTooltip } },
        slaRegion: { from, label: limit ? `SLA: TPOT ≤ ${fmt(limit, 0)} ms` : "" },
      },
    },
  });
  note(canvas, front.length, "No point with a decode step to plot (the prefill search has none; the disaggregated search ranks whole deployments).");
  return { points: front.length };
}

// -- mode disagg: the searched deployments' probes ------------------------------------------
/** Feasible probes of a disaggregated search, one series per deployment (split and layouts),
 * tokens/s per device against `x` ("concurrency", "ttft_ms" or "tpot_ms"). */
export function drawDisaggChart(canvas, response, x) {
  const series = new Map();
  for (const p of response.probes) {
    if (!p.feasible) continue;
    const label = `${p.pd_split} · P ${p.prefill_parallel} / D ${p.decode_parallel}`;
    if (!series.has(label)) series.set(label, []);
    series.get(label).push(p);
  }
  const datasets = [...series.entries()].map(([label, probes], i) => ({
    label,
    data: probes
      .sort((a, b) => a[x] - b[x])
      .map((p) => ({ x: p[x], y: p.throughput_per_device, probe: p })),
    borderColor: PALETTE[i % PALETTE.length],
    backgroundColor: PALETTE[i % PALETTE.length],
    showLine: true,
    pointRadius: 3,
    borderWidth: 2,
  }));
  const names = { concurrency: "concurrency (clients over both pools, log scale)", ttft_ms: "TTFT (ms)", tpot_ms: "TPOT (ms)" };
  draw(canvas, {
    type: "scatter",
    data: { datasets },
    options: {
      ...baseOptions(),
      scales: {
        x: x === "concurrency"
          ? { type: "logarithmic", title: { display: true, text: names[x] }, ticks: { callback: logTick, autoSkip: false, maxRotation: 0 } }
          : { title: { display: true, text: names[x] } },
        y: { title: { display: true, text: "output tokens/s per device (both pools)" }, beginAtZero: true },
      },
      plugins: {
        ...baseOptions().plugins,
        tooltip: {
          callbacks: {
            label: (ctx) => {
              const p = ctx.raw.probe;
              return [
                ctx.dataset.label,
                `${fmt(p.concurrency)} clients · ${fmt(p.throughput_per_device, 1)} tokens/s/device`,
                `TTFT ${fmtMs(p.ttft_ms)} · TPOT ${fmtMs(p.tpot_ms)}`,
              ];
            },
          },
        },
      },
    },
  });
  const points = datasets.reduce((n, d) => n + d.data.length, 0);
  note(canvas, points, "No feasible probe to plot.");
  return { points };
}

// -- sweeps: the best value of each group -----------------------------------------------------
/**
 * A grouped bar chart: `categories` along x, one bar series per `series` entry ({label,
 * values: [value per category, null where none]}). Returns {points} (bars with a value).
 */
export function drawGroupedBars(canvas, categories, series, { xTitle, yTitle, describe = () => [] } = {}) {
  const datasets = series.map((s, i) => ({
    label: s.label,
    data: s.values,
    rows: s.rows,
    borderColor: PALETTE[i % PALETTE.length],
    backgroundColor: withAlpha(PALETTE[i % PALETTE.length], 0.75),
    borderWidth: 1,
  }));
  draw(canvas, {
    type: "bar",
    data: { labels: categories, datasets },
    options: {
      ...baseOptions(),
      interaction: { mode: "nearest", intersect: true },
      scales: {
        x: { title: { display: Boolean(xTitle), text: xTitle } },
        y: { title: { display: Boolean(yTitle), text: yTitle }, beginAtZero: true },
      },
      plugins: {
        ...baseOptions().plugins,
        tooltip: {
          callbacks: {
            label: (ctx) => [`${ctx.dataset.label}: ${fmt(ctx.raw, 1)}`, ...describe(ctx.dataset.rows?.[ctx.dataIndex])],
          },
        },
      },
    },
  });
  const points = series.reduce((n, s) => n + s.values.filter((v) => v !== null && v !== undefined).length, 0);
  note(canvas, points, "No feasible row to plot yet.");
  return { points };
}
