// Helpers shared by every figure: fetch the API, format numbers, build elements and tables.

export class ApiError extends Error {}

export const SNAPSHOT_ONLY = "this saved page shows the state it was saved at; this needs the explorer's server (attnlab serve)";

// Call the JSON API. A 422 carries a message naming the field; show it as it is. A request the
// page makes at load is answered from the page itself when the server inlined its answer.
export async function api(path, { method = "GET", body } = {}) {
  const known = inlined(method, path, body);
  if (known !== undefined) return known;
  // A saved page (web/snapshot.py) holds the answers it was saved with, and no server.
  if (globalThis.attnlabSnapshot) throw new ApiError(SNAPSHOT_ONLY);
  const options = { method, headers: {} };
  if (body !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, options);
  } catch (err) {
    throw new ApiError(`the explorer's server did not answer (${err.message})`);
  }
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    throw new ApiError(data.message || data.detail || `request failed with HTTP ${response.status}`);
  }
  return data;
}

// The first screen's answers, rendered into the page by the server (web/pagefiles.py) so that no
// round trip stands between the HTML and a usable page: [{method, path, body, answer}]. A request
// matches one when its method, path (query included) and body (keys in any order) are the same;
// the caller gets a copy, since figures keep and change what they are given.
let firstAnswers = null;
const sortedKeys = (_key, x) => (x && typeof x === "object" && !Array.isArray(x)
  ? Object.fromEntries(Object.entries(x).sort(([a], [b]) => (a < b ? -1 : 1))) : x);
const canonical = (body) => JSON.stringify(body ?? null, sortedKeys);

function inlined(method, path, body) {
  firstAnswers ??= JSON.parse(globalThis.document?.getElementById("attnlab-first")?.textContent || "[]");
  const key = canonical(body);
  const hit = firstAnswers.find((a) => a.method === method && a.path === path && canonical(a.body) === key);
  return hit ? structuredClone(hit.answer) : undefined;
}

// The page's constants (worked example, limits, slider range, threshold) come from the server,
// never from literals here: GET /api/config, fetched once and shared by every section.
let configPromise = null;
export function config() {
  configPromise ??= api("/api/config");
  return configPromise;
}

// Fill each <span data-config="histogram.d_k_min"> with that value of the config.
export function fillConfig(cfg, node = document) {
  node.querySelectorAll("[data-config]").forEach((span) => {
    const value = span.dataset.config.split(".").reduce((obj, key) => obj?.[key], cfg);
    if (value !== undefined) span.textContent = String(value);
  });
}

// Numbers as every printer writes them, the rule of attnlab/core/numbers.py (a test runs both on
// one table of cases): 4 significant digits unless the reader picks more (the page's "Digits"
// control, digits= in the URL), trailing zeros dropped, plain from 0.001 up to a million and
// 1.235e-4 outside. "-inf" (a blocked pair, as JSON carries it) prints as -inf; null, undefined
// and NaN are no value and print as an em dash.
export const MASKED = "-inf";
export const NO_VALUE = "—";
let shown = 4; // digits shown; the page's "Digits shown" control offers the others
// d significant digits: one before the point and d - 1 after it, or d - 1 - decade decimals.
const DECADES = [1e-3, 1e-2, 1e-1, 1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6];

const trim = (text) => {
  const t = text.includes(".") ? text.replace(/0+$/, "").replace(/\.$/, "") : text;
  return t === "-0" ? "0" : t;
};

export const digitsShown = () => shown;

// The page's digits from now on: d if it is one of the choices offered, else the first of them.
export function setDigits(d, choices) {
  shown = choices.includes(d) ? d : choices[0];
  return shown;
}

export function formatNumber(x, digits = shown) {
  if (x === MASKED || x === -Infinity) return MASKED;
  if (x === null || x === undefined || Number.isNaN(x)) return NO_VALUE;
  if (x === Infinity) return "inf";
  if (x === 0) return "0";
  const size = Math.abs(x);
  if (!(size >= DECADES[0] && size < DECADES[DECADES.length - 1])) {
    const [mantissa, exponent] = x.toExponential(digits - 1).split("e");
    return `${trim(mantissa)}e${exponent}`;
  }
  const decade = DECADES.filter((d) => size >= d).length - 4;
  return trim(x.toFixed(Math.max(0, digits - 1 - decade)));
}

// A whole number with thousands commas (200,000), without toLocaleString: its first call loads
// the locale data, a tenth of a second on the page's first screen.
export const grouped = (n) => String(Math.round(n)).replace(/\B(?=(\d{3})+(?!\d))/g, ",");

// The page's short name for it.
export const fmt = (x) => formatNumber(x);

// A table entry that is a blocked pair (JSON's "-inf").
export const isMasked = (x) => x === MASKED;

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === false || value === null || value === undefined) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// A labelled numeric table. cell(i, j, value) may return attributes for the <td>.
export function matrixTable({ caption, rows, cols, values, cell, rowError }) {
  const head = el("tr", {}, el("th", { scope: "col" }, el("span", { class: "sr-only", text: "row" })));
  cols.forEach((c) => head.append(el("th", { scope: "col", text: c })));
  const body = values.map((row, i) => {
    const tr = el("tr", {}, el("th", { scope: "row", text: rows[i] }));
    const error = rowError ? rowError(i) : null;
    if (error) {
      tr.classList.add("row-error");
      tr.append(el("td", { colspan: cols.length, class: "error-cell", "data-row": i }, "⚠ ", error));
      return tr;
    }
    row.forEach((value, j) => {
      const { text, ...attrs } = cell ? cell(i, j, value) || {} : {};
      const td = el("td", {
        "data-row": i,
        "data-col": j,
        "data-value": value === null ? "" : String(value),
        title: isMasked(value) ? "-inf (blocked)" : value === null ? "no value" : String(value),
        ...attrs,
      }, text ?? fmt(value));
      if (isMasked(value)) td.classList.add("blocked");
      tr.append(td);
    });
    return tr;
  });
  return el("table", { class: "matrix" }, el("caption", {}, caption), el("thead", {}, head), el("tbody", {}, body));
}

// Report a failure next to the figure, in words, instead of leaving it silently stale.
export function showError(node, err) {
  node.textContent = err instanceof Error ? err.message : String(err);
  node.hidden = false;
}

export function clearError(node) {
  node.textContent = "";
  node.hidden = true;
}

// A number as a person types it: 2, -0.5, 1e-3, "−2" with a real minus sign. Not "0x10" (which
// Number() would read as 16), not "", not "1,5". null when the text is no such number.
export function parseNumber(text) {
  const t = String(text).trim().replace(/^−/, "-");
  if (!/^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i.test(t)) return null;
  const x = Number(t);
  return Number.isFinite(x) ? x : null;
}

// Plotly's toolbar holds only "download as image": no cloud sharing, no logo, no selection tools,
// so it adds one tab stop and stays clear of the titles (which sit on the left).
export const PLOT_CONFIG = {
  displaylogo: false,
  responsive: true,
  showSendToCloud: false,
  showEditInChartStudio: false,
  showLink: false,
  modeBarButtons: [["toImage"]],
  toImageButtonOptions: { format: "png", scale: 2 },
};

// plotly.js (4.8 MB, about 2 s of main-thread work to evaluate on a slow machine) is not on the
// first screen's path: a chart waits until charts are wanted, which is when one comes near the
// viewport (an IntersectionObserver with half a screen of margin), when the page has become ready
// and the browser is idle (main.js), or when an export needs the picture. Until then the numbers
// beside each chart are already on the page.
const PLOTLY_URL = "/vendor/plotly.min.js";
let wanted = null;
let want = null;
// Resolves once something has asked for the charts (and so for plotly.js).
export const chartsWanted = () => (wanted ??= new Promise((resolve) => { want = resolve; }));
let plotlyLoaded = null;

// Fetch and run plotly.js now (once); resolves to Plotly, or null when it did not load.
export function loadPlotly() {
  chartsWanted();
  want();
  plotlyLoaded ??= new Promise((resolve) => {
    if (window.Plotly) return resolve(window.Plotly);
    const script = el("script", { src: PLOTLY_URL, id: "plotly-js" });
    script.addEventListener("load", () => resolve(window.Plotly ?? null));
    script.addEventListener("error", () => resolve(null));
    document.head.append(script);
  });
  return plotlyLoaded;
}

let watcher = null;
function watch(node) {
  watcher ??= new IntersectionObserver((entries) => {
    if (entries.some((e) => e.isIntersecting)) { watcher.disconnect(); loadPlotly(); }
  }, { rootMargin: "50% 0px" });
  if (!plotlyLoaded) watcher.observe(node);
}

const drawing = new Set();

// Every chart asked for so far, drawn, and those asked for meanwhile too (the charts signal).
export async function chartsDrawn() {
  while (drawing.size) await Promise.allSettled([...drawing]);
}

// Draw when charts are wanted and Plotly has arrived; without it, say so and keep the numbers.
export function plot(node, data, layout, config = {}) {
  watch(node);
  const drawn = chartsWanted().then(loadPlotly).then((Plotly) => (Plotly ? draw(Plotly, node, data, layout, config)
    : (node.textContent = "The plotting library did not load; the numbers beside the chart still hold.")));
  drawing.add(drawn);
  const forget = () => drawing.delete(drawn);
  drawn.then(forget, forget);
  return drawn;
}

// Plotly never wraps a title: a lab's title and its one-line summary (the <sup> part) ran off a
// narrow chart. Wrapped here at words, by the chart's width; extra = lines added.
function wrapTitle(text, width, size) {
  const lines = (words, chars) => words.split(" ").reduce((out, word) => {
    const last = out.at(-1);
    if (last !== undefined && last.length + word.length < chars) out[out.length - 1] = `${last} ${word}`;
    else out.push(word);
    return out;
  }, []);
  const [head, sub = ""] = text.split("<br><sup>");
  const top = lines(head, Math.max(12, Math.floor(width / (size * 0.55))));
  const below = sub ? lines(sub.replace("</sup>", ""), Math.max(12, Math.floor(width / (size * 0.42)))) : [];
  const joined = top.join("<br>") + (below.length ? `<br><sup>${below.join("<br>")}</sup>` : "");
  return { text: joined, extra: top.length - 1 + Math.max(0, below.length - 1) };
}

function draw(Plotly, node, data, layout, config) {
  const big = Boolean(node.closest(".presenting"));
  // Presenting: type and plot height follow the screen's height (20 px type and a 62% high plot
  // at 1080 px), so the chart sits on the first screen of a 720 px projector too.
  const size = big ? Math.max(14, Math.round(window.innerHeight / 54)) : 13;
  const titleSize = big ? size + 4 : 14;
  const wrapped = layout.title ? wrapTitle(layout.title.text, node.clientWidth || 600, titleSize) : null;
  const title = layout.title ? { x: 0.01, xanchor: "left", ...layout.title, text: wrapped.text, font: { size: titleSize } } : undefined;
  // Each extra line of title takes room above the plot, and the figure grows by as much, so the
  // plot keeps its height and the y axis's title stays clear of the chart's title.
  const extra = wrapped ? Math.round(wrapped.extra * titleSize * 1.4) : 0;
  const sized = big && layout.height ? { height: Math.round(Math.min(layout.height * 1.6, window.innerHeight * 0.62)) + extra }
    : layout.height ? { height: layout.height + extra } : {};
  const drawn = Plotly.react(node, data, {
    margin: big ? { t: 3 * size + extra, r: 20, b: 4 * size, l: 5 * size } : { t: 40 + extra, r: 10, b: 45, l: 55 },
    font: { family: "system-ui, sans-serif", size },
    paper_bgcolor: "rgba(0,0,0,0)",
    plot_bgcolor: "rgba(0,0,0,0)",
    ...layout,
    ...sized,
    title,
  }, { ...PLOT_CONFIG, ...config });
  // (relayout, not Plots.resize: a resize would also shrink the height back to the container's;
  // a chart hidden while presenting keeps its width)
  if (big) drawn.then(() => requestAnimationFrame(() => node.clientWidth && Plotly.relayout(node, { width: node.clientWidth })));
  return drawn;
}

export const narrow = () => window.matchMedia("(max-width: 600px)").matches;
