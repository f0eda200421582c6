// Figure sqrt-dk-histogram: raw and scaled scores on one axis at one width, and saturation
// across every width (GET /api/histogram). The toggle says which of the two is in front.
import { api, clearError, config, el, fmt, grouped, narrow, plot, showError } from "./common.js";
import { figureTools } from "./export.js";
import { onUrlChange, readUrl, writeUrl } from "./state.js";

const root = document.getElementById("figure-sqrt-dk-histogram");
const $ = (sel) => root.querySelector(sel);
let timer = null;
let latest = 0;
let cfg = null;
let current = null;

const pct = (x) => `${fmt(100 * x)}%`;
// A share of pairs: two decimals below 1% (0.04%), one above, never an exponent.
const pairShare = (x) => (x === 0 ? "0%" : `${(100 * x).toFixed(x < 0.01 ? 2 : 1)}%`);

function drawScores(fig) {
  // Both on one axis, as densities: the raw scores widen with d_k, the scaled ones never do.
  const traces = fig.series.map((s) => {
    const front = s.scaled === fig.scaled;
    return {
      type: "bar",
      name: s.scaled ? "scaled q·k/√d_k" : "raw q·k",
      x: s.density.map((_, b) => (s.edges[b] + s.edges[b + 1]) / 2),
      y: s.density,
      width: s.edges[1] - s.edges[0],
      opacity: front ? 0.95 : 0.35,
      marker: { color: s.scaled ? "#d9480f" : "#3b6ea8" },
      hovertemplate: `${s.scaled ? "scaled" : "raw"} score ≈ %{x:.2f}<br>density %{y:.3f}<extra></extra>`,
    };
  });
  if (fig.scaled) traces.reverse(); // the one asked for is drawn last, on top
  const limit = 5 * Math.sqrt(cfg.d_k_max);
  plot($("#hist-plot"), traces, {
    title: { text: `${grouped(fig.draws)} scores, d_k = ${fig.d_k}: raw spread ${fmt(fig.series[0].std)}, scaled ${fmt(fig.series[1].std)}` },
    xaxis: { title: { text: "score" }, range: [-limit, limit], zeroline: true },
    yaxis: { title: { text: "share of draws per unit score" } },
    barmode: "overlay",
    bargap: 0,
    legend: { x: 0.98, xanchor: "right", y: 0.98, bgcolor: "rgba(255,255,255,0.8)" },
    height: narrow() ? 300 : 340,
  });
}

function drawCurve(fig) {
  const c = fig.curve;
  plot($("#hist-curve"), [
    { type: "scatter", mode: "lines+markers", name: "raw", x: c.d_k, y: c.unscaled_share, marker: { color: "#3b6ea8", symbol: "circle" } },
    { type: "scatter", mode: "lines+markers", name: "scaled", x: c.d_k, y: c.scaled_share, marker: { color: "#d9480f", symbol: "diamond", size: 9 }, line: { dash: "dot" } },
    { type: "scatter", mode: "markers", name: `d_k = ${fig.d_k}`, x: [fig.d_k], y: [fig.scaled ? fig.scaled_share : fig.unscaled_share], marker: { color: "#111", size: 14, symbol: "circle-open", line: { width: 3 } }, hoverinfo: "skip" },
  ], {
    title: { text: `Share of trials with max weight > ${fig.threshold}, by width` },
    xaxis: { title: { text: "d_k" }, tickvals: c.d_k.filter((_, n) => n % 2 === 1), range: [0, cfg.d_k_max + 8] },
    yaxis: { title: { text: "saturated trials" }, tickformat: ".0%", rangemode: "tozero" },
    legend: { x: 0.01, y: 0.98, bgcolor: "rgba(255,255,255,0.8)" },
    height: narrow() ? 280 : 300,
  });
}

function render(fig) {
  drawScores(fig);
  drawCurve(fig);
  $("#hist-figure").setAttribute("aria-label",
    `Raw and scaled scores at d_k = ${fig.d_k}: raw spread ${fmt(fig.series[0].std)}, scaled ${fmt(fig.series[1].std)}. Saturated trials rise with d_k without scaling and stay at 0 with it.`);
  $("#hist-spread").replaceChildren(
    `Measured spread (standard deviation) of the ${fig.scaled ? "scaled" : "raw"} scores: `,
    el("strong", { id: "hist-std", "data-value": String(fig.std), text: fmt(fig.std) }),
    `. The proof predicts ${fig.scaled ? "1 at every width" : `√${fig.d_k} = ${fmt(fig.predicted_std)}`}.`,
  );
  // §6.3's hinge: a gap g between two scores makes one weight e^g times the other.
  $("#hist-gaps caption").textContent =
    `Two scores of one query at d_k = ${fig.d_k}: how often they differ by more than g`;
  $("#hist-gaps tbody").replaceChildren(...fig.gaps.map((g) => el("tr", {},
    el("th", { scope: "row", text: fmt(g.gap) }),
    el("td", { text: grouped(g.ratio) }),
    el("td", { "data-value": String(g.unscaled_share), text: pairShare(g.unscaled_share) }),
    el("td", { "data-value": String(g.scaled_share), text: pairShare(g.scaled_share) }))));
  const rows = [
    ["without scaling", fig.unscaled_share, fig.gradient_term, !fig.scaled],
    ["with scaling", fig.scaled_share, null, fig.scaled],
  ].map(([label, share, grad, shown]) => el("tr", { class: shown ? "shown" : null },
    el("th", { scope: "row" }, label, shown ? el("span", { class: "badge", text: " ◀ in front" }) : null),
    el("td", { "data-value": String(share), class: "share" }, pct(share),
      el("span", { class: "meter", "aria-hidden": "true" }, el("span", { style: `width:${100 * share}%` }))),
    el("td", { "data-value": grad === null ? "" : String(grad) },
      label === "with scaling" ? "—" : grad === null ? "no trial saturated" : fmt(grad))));
  $("#hist-saturation tbody").replaceChildren(...rows);
  $("#hist-saturation caption").textContent =
    `${fig.trials} softmax trials over ${fig.keys} keys at d_k = ${fig.d_k}: share where one weight tops ${fig.threshold}`;
  $("#hist-summary").textContent = `d_k = ${fig.d_k}, ${fig.scaled ? "scaled" : "raw"} in front: spread ${fmt(fig.std)}, ${pct(fig.saturated_share)} of trials saturate.`;
}

async function update({ push = true } = {}) {
  const dk = +$("#hist-dk").value;
  const scaled = $("#hist-scaled").checked;
  $("#hist-dk-value").textContent = dk;
  const ticket = ++latest;
  root.setAttribute("aria-busy", "true");
  try {
    const fig = await api(`/api/histogram?d_k=${dk}&scaled=${scaled}`);
    if (ticket !== latest) return; // a newer slider position is on its way
    clearError($("#hist-error"));
    current = fig;
    render(fig);
    root.dataset.dk = String(fig.d_k);
    root.dataset.scaled = String(fig.scaled);
    if (push !== null) writeUrl({ "hist.dk": fig.d_k === cfg.d_k_default ? null : fig.d_k, "hist.scaled": fig.scaled ? 1 : null }, { push });
  } catch (err) {
    showError($("#hist-error"), err);
  } finally {
    if (ticket === latest) root.removeAttribute("aria-busy");
  }
}

function soon() {
  $("#hist-dk-value").textContent = $("#hist-dk").value;
  clearTimeout(timer);
  timer = setTimeout(() => update({ push: null }), 80); // the URL follows on "change"
}

function restore() {
  const dk = Number(readUrl("hist.dk"));
  $("#hist-dk").value = Number.isInteger(dk) && dk >= cfg.d_k_min && dk <= cfg.d_k_max ? dk : cfg.d_k_default;
  $("#hist-scaled").checked = readUrl("hist.scaled") === "1";
  return update({ push: null });
}

function tableData() {
  const f = current;
  return {
    caption: `Why divide by √d_k: d_k = ${f.d_k}, ${f.draws} random scores, ${f.scaled ? "scaled" : "raw"} in front; ${f.trials} softmax trials over ${f.keys} keys, saturation threshold ${f.threshold}.`,
    state: { d_k: f.d_k, scaled: f.scaled },
    tables: [
      { title: `Saturated trials at d_k = ${f.d_k}`, rows: ["without scaling", "with scaling"], cols: ["share saturated", "mean p(1 − p)"], values: [[f.unscaled_share, f.gradient_term], [f.scaled_share, null]] },
      { title: "Saturated share by width", rows: f.curve.d_k.map((d) => `d_k = ${d}`), cols: ["raw", "scaled"], values: f.curve.d_k.map((_, n) => [f.curve.unscaled_share[n], f.curve.scaled_share[n]]) },
      { title: "Score spread", rows: ["raw", "scaled"], cols: ["measured", "predicted"], values: f.series.map((s) => [s.std, s.predicted_std]) },
    ],
  };
}

export async function init() {
  cfg = (await config()).histogram;
  const slider = $("#hist-dk");
  Object.assign(slider, { min: cfg.d_k_min, max: cfg.d_k_max, step: cfg.d_k_step });
  slider.addEventListener("input", soon);
  slider.addEventListener("change", () => { clearTimeout(timer); update(); });
  $("#hist-scaled").addEventListener("change", () => update());
  root.addEventListener("presentchange", () => current && render(current));
  figureTools(root, { name: "sqrt-dk-histogram", data: tableData, plots: () => [$("#hist-plot"), $("#hist-curve")] });
  onUrlChange(restore);
  await restore();
}
