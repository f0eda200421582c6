// Figure multi-head: four hand-set heads on one sentence (GET /api/multihead?query=i), or, in its
// learned mode (mh.mode=learned, js/learned.js), the heads a trained model formed by itself, or,
// with attnlab serve --model, a real model's heads (mh.mode=model, js/models.js).
import { api, clearError, el, fmt, matrixTable, narrow, plot, showError } from "./common.js";
import { figureTools } from "./export.js";
import * as inside from "./inside.js";
import * as learned from "./learned.js";
import * as models from "./models.js";
import { isPresenting } from "./present.js";
import { onUrlChange, readUrl, writeUrl } from "./state.js";

const root = document.getElementById("figure-multi-head");
const $ = (sel) => root.querySelector(sel);
let current = null;
let shownHead = 0; // the one head a presentation shows (keys 1-4, or the arrow keys)

function showHead(h) {
  shownHead = (h + current.heads.length) % current.heads.length;
  root.querySelectorAll(".head").forEach((card) => card.classList.toggle("shown", +card.dataset.head === shownHead));
  root.dataset.head = String(shownHead);
  if (isPresenting(root)) tensorPlot(current); // the heatmap beside it follows
}

function headCards(fig) {
  const p = fig.picked;
  return fig.heads.map((head, h) => {
    const weights = p.weights[h];
    const top = p.top[h];
    const tops = p.tops[h]; // every key tied for the largest weight
    const names = tops.map((j) => `“${fig.tokens[j]}”`);
    const named = names.length > 1 ? `${names.slice(0, -1).join(", ")} and ${names.at(-1)}` : names[0];
    const bars = fig.tokens.map((word, j) => el("li", { class: tops.includes(j) ? "top" : null, "data-key": j, "data-value": String(weights[j]) },
      el("span", { class: "word", text: word }),
      el("span", { class: "bar", "aria-hidden": "true" }, el("span", { style: `width:${100 * weights[j]}%` })),
      el("span", { class: "num", text: fmt(weights[j]) }),
      el("span", { class: "star" }, tops.includes(j) ? el("span", { title: "largest weight", text: "★" }) : null,
        tops.includes(j) ? el("span", { class: "sr-only", text: " largest" }) : null)));
    return el("article", { class: h === shownHead ? "head shown" : "head", "data-head": h },
      el("h3", {}, `Head ${h + 1}: ${head.name}`),
      el("p", { class: "describes", text: head.describes }),
      el("p", { class: "top-line" }, `“${p.word}” puts its largest weight on `,
        el("strong", { class: "top-word", text: named }), tops.length > 1 ? ` (${fmt(p.top_weight[h])} each, a tie).` : ` (${fmt(p.top_weight[h])}).`),
      el("ol", { class: "weights", "aria-label": `Head ${h + 1} weights of “${p.word}” over the sentence` }, bars));
  });
}

function tensorPlot(fig) {
  const n = fig.tokens.length;
  const big = Boolean(root.closest(".presenting")) || root.classList.contains("presenting");
  const small = narrow() && !big;
  const ticks = { tickvals: [...Array(n).keys()], ticktext: fig.tokens, tickfont: { size: big ? 18 : small ? 10 : 12 } };
  // Presenting: one head's heatmap (the one keys 1-4 picked), beside its bars.
  const heads = big ? [fig.heads[shownHead]] : fig.heads;
  const first = big ? shownHead : 0;
  const data = heads.map((head, h) => ({
    type: "heatmap",
    z: head.weights,
    x: [...Array(n).keys()],
    y: [...Array(n).keys()],
    zmin: 0,
    zmax: 1,
    colorscale: [[0, "#f7fbff"], [0.5, "#6aaed6"], [1, "#08306b"]], // light = little, dark = much
    showscale: h === 0,
    colorbar: { title: { text: "weight" }, len: 0.9 },
    xaxis: h ? `x${h + 1}` : "x",
    yaxis: h ? `y${h + 1}` : "y",
    customdata: head.weights.map((row, i) => row.map((_, j) => [fig.tokens[i], fig.tokens[j]])),
    hovertemplate: `head ${first + h + 1}<br>%{customdata[0]} → %{customdata[1]}: %{z:.3f}<extra></extra>`,
  }));
  const layout = {
    // On a phone the heads stack (one a row), so no label runs into the next heatmap.
    grid: big ? undefined : small ? { rows: 4, columns: 1, pattern: "independent", ygap: 0.22 } : { rows: 2, columns: 2, pattern: "independent", xgap: 0.2, ygap: 0.3 },
    height: small ? 1400 : big ? 900 : 640,
    margin: { t: 40, r: 10, b: big ? 110 : 70, l: big ? 110 : 70 },
    shapes: [],
    annotations: [],
  };
  heads.forEach((head, h) => {
    const sx = h ? `${h + 1}` : "";
    layout[`xaxis${sx}`] = { ...ticks, tickangle: -45 };
    layout[`yaxis${sx}`] = { ...ticks, autorange: "reversed" };
    layout.shapes.push({
      type: "rect", xref: `x${sx}`, yref: `y${sx}`, x0: -0.5, x1: n - 0.5,
      y0: fig.picked.query - 0.5, y1: fig.picked.query + 0.5,
      line: { color: "#d9480f", width: 2, dash: "dot" },
    });
    layout.annotations.push({
      text: `Head ${first + h + 1}: ${head.name}`, xref: `x${sx} domain`, yref: `y${sx} domain`,
      x: 0.5, y: 1.02, yanchor: "bottom", showarrow: false, font: { size: big ? 20 : 13 },
    });
  });
  plot($("#mh-tensor"), data, layout).then(() => {
    const node = $("#mh-tensor");
    if (node.on && !node.dataset.clicks) {
      node.dataset.clicks = "on"; // a heatmap cell picks its row's word, as BertViz does
      node.on("plotly_click", (event) => { const pt = event.points?.[0]; if (pt) pick(pt.y); });
    }
  });
  $("#mh-tensor").setAttribute("aria-label", big
    ? `Head ${first + 1}'s heatmap (${fig.heads[first].name}); the row of “${fig.picked.word}” is outlined with a dotted line.`
    : `Four heatmaps, one per head, forming a tensor of shape (${fig.shape.join(", ")}); the row of “${fig.picked.word}” is outlined with a dotted line.`);
}

function mixing(fig) {
  const p = fig.picked;
  const dv = p.head_outputs[0].length;
  const joinedCols = fig.heads.flatMap((_, h) => [...Array(dv).keys()].map((c) => `h${h + 1}·${c + 1}`));
  const dModel = p.mixed.length;
  const outCols = [...Array(dModel).keys()].map((c) => `out ${c + 1}`);
  $("#mh-mix").replaceChildren(
    matrixTable({ caption: `1. Each head's output for “${p.word}” (its weights times its values)`, rows: fig.heads.map((_, h) => `head ${h + 1}`), cols: [...Array(dv).keys()].map((c) => `feature ${c + 1}`), values: p.head_outputs }),
    matrixTable({ caption: "2. Joined side by side: [head 1; head 2; head 3; head 4]", rows: ["joined"], cols: joinedCols, values: [p.joined] }),
    matrixTable({ caption: `3. Wᴼ, ${joinedCols.length} × ${dModel}: every column reads all heads`, rows: joinedCols, cols: outCols, values: fig.w_o }),
    matrixTable({ caption: "4. Mixed output = joined · Wᴼ", rows: ["output"], cols: outCols, values: [p.mixed] }),
  );
}

function render(fig) {
  $("#mh-heads").replaceChildren(...headCards(fig));
  tensorPlot(fig);
  mixing(fig);
  $("#mh-shape").textContent = `(${fig.shape.join(", ")})`;
  root.dataset.query = String(fig.picked.query);
  root.querySelectorAll("#mh-words input").forEach((input) => { input.checked = +input.value === fig.picked.query; });
}

// Only the latest pick's answer is drawn (the default query's answer comes at once, from the
// page itself, and may overtake one still with the server).
let latest = 0;
async function pick(query, { push = true } = {}) {
  const ticket = ++latest;
  try {
    const fig = await api(`/api/multihead?query=${query}`);
    if (ticket !== latest) return;
    current = fig;
    clearError($("#mh-error"));
    render(current);
    if (push !== null) writeUrl({ "mh.word": current.picked.query + 1 }, { push });
  } catch (err) {
    if (ticket !== latest) return;
    showError($("#mh-error"), err);
  }
}

function tableData() {
  if (isLearned()) return learned.tableData();
  if (isModel()) {
    const d = models.tableData(); // and the model's inside, when shown (js/inside.js)
    return { ...d, state: { ...d.state, ...inside.exportState() }, tables: [...d.tables, ...inside.tables()] };
  }
  const fig = current;
  const p = fig.picked;
  return {
    caption: `Multi-head attention on “${fig.tokens.join(" ")}”: query word “${p.word}” (word ${p.query + 1}), ${fig.heads.length} hand-set heads, weights tensor (${fig.shape.join(", ")}).`,
    state: { word: p.query + 1 },
    tables: [
      { title: `Each head's weights for “${p.word}”`, rows: fig.heads.map((_, h) => `Head ${h + 1}`), cols: fig.tokens, values: p.weights },
      ...fig.heads.map((head, h) => ({ title: `Head ${h + 1} (${head.name}) weights`, rows: fig.tokens, cols: fig.tokens, values: head.weights })),
      { title: "Mixed output = joined · Wᴼ", rows: ["output"], cols: p.mixed.map((_, c) => `out ${c + 1}`), values: [p.mixed] },
    ],
  };
}

// -- the mode: the hand-set heads, the learned ones, or a real model's ---------------------------
const isLearned = () => root.dataset.mode === "learned";
const isModel = () => root.dataset.mode === "model";
// mh.mode's value, when the page offers it (the model mode only with a model on the server)
const modeOf = (value) => (value === "learned" || (value === "model" && models.offered()) ? value : "handset");

function showMode(mode) {
  root.dataset.mode = mode;
  $("#mh-heading").textContent = $("#mh-heading").dataset[mode];
  $("#mh-handset").hidden = mode !== "handset";
  $("#mh-learned").hidden = mode !== "learned";
  $("#mh-model").hidden = mode !== "model";
  root.querySelectorAll("#mh-mode input").forEach((input) => { input.checked = input.value === mode; });
}

async function setMode(mode) {
  showMode(mode);
  writeUrl({ "mh.mode": mode === "handset" ? null : mode });
  if (mode === "learned") await learned.restore();
  else if (mode === "model") await models.restore();
  else if (current) render(current); // drawn while hidden, Plotly sized it to nothing
}

async function restore() {
  const mode = modeOf(readUrl("mh.mode"));
  showMode(mode);
  if (mode === "learned") await learned.restore();
  else if (mode === "model") await models.restore();
  const word = Number(readUrl("mh.word"));
  return pick(Number.isInteger(word) && word >= 1 ? word - 1 : 3, { push: null });
}

export async function init() {
  const fig = await api("/api/multihead");
  const group = $("#mh-words");
  group.replaceChildren(el("legend", { text: "Query word" }), ...fig.tokens.map((word, i) => el("label", { class: "chip" },
    el("input", { type: "radio", name: "mh-query", value: i, autocomplete: "off", checked: i === fig.picked.query, onchange: () => pick(i) }),
    el("span", { text: word }))));
  current = fig;
  root.querySelectorAll("#mh-mode input").forEach((input) => input.addEventListener("change", () => setMode(input.value)));
  learned.init(root);
  inside.init(root);
  await models.init(root); // shows the model mode's chip when the server has a model
  root.addEventListener("presentchange", () => current && render(current));
  document.addEventListener("keydown", (event) => {
    if (!isPresenting(root) || !current || isLearned() || isModel() || event.target.closest("input[type='text'], textarea")) return;
    const key = Number(event.key);
    if (Number.isInteger(key) && key >= 1 && key <= current.heads.length) showHead(key - 1);
    else if (event.key === "ArrowRight" || event.key === "ArrowLeft") {
      if (event.target.closest("#mh-words")) return; // the radio group's own arrows pick a word
      showHead(shownHead + (event.key === "ArrowRight" ? 1 : -1));
    } else return;
    event.preventDefault();
  });
  figureTools(root, { name: "multi-head", data: tableData, plots: () => (isLearned() || isModel() ? [] : [$("#mh-tensor")]) });
  onUrlChange(restore);
  if (readUrl("mh.word") || readUrl("mh.mode")) await restore();
  else render(fig);
}
