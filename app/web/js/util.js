// Small helpers shared by the dashboard modules (no dependencies).

/** Create an element: h("td", {class: "num"}, "12") */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    // Through the CSSOM: the Content-Security-Policy refuses style attributes.
    else if (key === "style") el.style.cssText = String(value);
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

const numberFormats = new Map();

/** Format a number with a fixed count of decimals and thousands separators; "–" for null. */
export function fmt(value, digits = 0) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  if (typeof value !== "number") return String(value);
  let f = numberFormats.get(digits);
  if (!f) {
    f = new Intl.NumberFormat("en-US", {
      minimumFractionDigits: digits,
      maximumFractionDigits: digits,
    });
    numberFormats.set(digits, f);
  }
  return f.format(value);
}

/** The API's memory (GB, 10^9 bytes) in GiB (2^30 bytes), as device names count it ("64G"). */
export const BYTES_PER_GB = 1e9;
export const BYTES_PER_GIB = 2 ** 30;
export function gib(gb) {
  return gb === null || gb === undefined ? gb : (gb * BYTES_PER_GB) / BYTES_PER_GIB;
}

/** Milliseconds as "850 ms" or "17.6 s". */
export function fmtMs(ms) {
  if (ms === null || ms === undefined) return "–";
  return ms >= 10000 ? `${fmt(ms / 1000, 1)} s` : `${fmt(ms, ms < 100 ? 1 : 0)} ms`;
}

/** Quote one word for a POSIX shell (only when needed). */
export function shellQuote(word) {
  const text = String(word);
  if (/^[A-Za-z0-9_\-./:=,@+%]+$/.test(text)) return text;
  return `'${text.replace(/'/g, `'\\''`)}'`;
}

/** A summary card's figure: its label and value (``hint``: the value's tooltip). */
export function stat(label, value, hint) {
  return h("div", { class: "stat" }, h("dt", {}, label), h("dd", { title: hint || null }, value));
}

/** One CSV cell: empty for null, an object as its JSON, quoted when it must be. */
export function csvCell(value) {
  if (value === null || value === undefined) return "";
  const text = typeof value === "object" ? JSON.stringify(value) : String(value);
  return /[",\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

/** Offer text as a file download. */
export function download(filename, text, type) {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = h("a", { href: url, download: filename, hidden: true });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

export function timestamp() {
  return new Date().toISOString().replace(/[:]/g, "").replace(/\..*$/, "");
}
